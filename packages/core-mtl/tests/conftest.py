"""One torch thread: the 2 CPU cores are shared, and tiny models gain nothing from more."""

import torch

torch.set_num_threads(1)
