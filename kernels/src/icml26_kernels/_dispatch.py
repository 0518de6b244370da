"""One dispatch rule for every op.

Triton for CUDA tensors, the PyTorch reference otherwise. ``ICML26_KERNELS`` forces a backend:
``reference`` always works; ``triton`` needs Triton and either a CUDA tensor or
``TRITON_INTERPRET=1`` (Triton's CPU interpreter), and raises when neither holds.
"""

from __future__ import annotations

import importlib.util
import os

import torch

ENV = "ICML26_KERNELS"
BACKENDS = ("auto", "reference", "triton")


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def backend_for(*tensors: torch.Tensor, op: str = "op") -> str:
    """``"triton"`` or ``"reference"`` for an op on ``tensors``."""
    forced = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if forced not in BACKENDS:
        raise ValueError(f"{ENV}={forced!r}: choose one of {', '.join(BACKENDS)}")
    on_cuda = all(t.is_cuda for t in tensors)
    if forced == "reference":
        return "reference"
    if forced == "triton":
        if not triton_available():
            raise RuntimeError(f"{ENV}=triton but Triton is not installed ({op})")
        if not on_cuda and not interpret_mode():
            raise RuntimeError(f"{ENV}=triton for CPU tensors needs TRITON_INTERPRET=1 ({op})")
        return "triton"
    return "triton" if on_cuda and triton_available() else "reference"
