"""Multi-process training through accelerate (issue 29, item 4).

Run any ``nbcg train`` under ``accelerate launch --num_processes N [--cpu] -m nbcg train ...``:
every process takes its shard of each batch (the same global permutation on every rank), the
per-coalition loss *sums* and the gradients are all-reduced before the bargaining weights are
computed, so every process uses the same coalition weights and the run equals the one-process run
on the same batches (``tests/test_scale.py`` checks 2 processes against 1). Only rank 0 writes.
"""

from __future__ import annotations

import os

import torch

from .train import Local


class AccelerateGroup(Local):
    """The process group of an ``accelerate`` launch; ``sum`` is an all-reduce (sum)."""

    def __init__(self, cpu: bool | None = None):
        from accelerate import Accelerator

        if cpu is None:
            cpu = not torch.cuda.is_available()
        self.acc = Accelerator(cpu=cpu)
        self.rank, self.world = self.acc.process_index, self.acc.num_processes

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return t
        return self.acc.reduce(t.contiguous(), reduction="sum")

    def barrier(self) -> None:
        self.acc.wait_for_everyone()


def launched_world() -> int:
    """Processes of the current launch (``WORLD_SIZE`` as set by accelerate / torchrun), else 1."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def process_group() -> Local:
    """``AccelerateGroup`` under a multi-process launch, ``Local`` otherwise (no accelerate import)."""
    if launched_world() > 1:
        try:
            return AccelerateGroup()
        except ImportError:
            from icml26_shared import UserError

            raise UserError("multi-process training needs accelerate: pip install accelerate") from None
    return Local()
