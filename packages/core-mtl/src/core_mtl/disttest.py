"""A two-process check that task gradients are all-reduced before aggregation (so MGDA / PCGrad
see one global batch): ``run_check(method)`` spawns 2 gloo processes, each with half of a fixed
batch, and returns (multi-process direction, single-process direction)."""

from __future__ import annotations

import os
import socket

import torch

from . import baselines
from .train import task_gradients


def _problem():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    ys = [torch.randn(8, generator=gen, dtype=torch.float64) for _ in range(2)]
    w = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    return x, ys, w


def _worker(rank: int, world: int, port: int, method: str, q) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        x, ys, w = _problem()
        G = task_gradients([((x[rank::world] @ w - y[rank::world]) ** 2).mean() for y in ys], [w])
        torch.manual_seed(1)
        d = baselines.aggregate(method, G)
        if rank == 0:
            q.put(d.tolist())
    finally:
        dist.destroy_process_group()


def run_check(method: str, world: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    import torch.multiprocessing as mp

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    q = mp.get_context("spawn").Queue()
    mp.start_processes(_worker, args=(world, port, method, q), nprocs=world, start_method="spawn")
    x, ys, w = _problem()
    G = task_gradients([((x @ w - y) ** 2).mean() for y in ys], [w])
    torch.manual_seed(1)
    return torch.tensor(q.get(), dtype=torch.float64), baselines.aggregate(method, G)
