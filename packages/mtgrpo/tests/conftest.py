"""Tiny tensors: one thread avoids oversubscribing the shared CPU cores."""

import torch

torch.set_num_threads(1)
