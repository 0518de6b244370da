"""One torch thread for the package's tests: the tiny models gain nothing from more, and on a
shared 2-core machine extra threads only contend."""

import torch

torch.set_num_threads(1)
