"""``fair-cdal scale``: time per CDAL iteration (default scale-free weights) and traced memory vs n on synthetic views that are
generated block by block into float32 memmaps (never whole in memory)."""

from __future__ import annotations

import csv
import time
import tracemalloc
from pathlib import Path

import numpy as np

from .config import SolverConfig, SyntheticConfig
from .io import staged_dir
from .solver import CDALSolver, Views
from .synthetic import make_fair_multiview

BLOCK = 50_000


def write_views(folder: Path, n: int, cfg: SyntheticConfig, seed: int):
    """Views as float32 .npy memmaps in ``folder`` and the group codes (int8 memmap)."""
    views = [np.lib.format.open_memmap(folder / f"view{i}.npy", mode="w+", dtype=np.float32,
                                       shape=(n, d)) for i, d in enumerate(cfg.dims)]
    groups = np.lib.format.open_memmap(folder / "groups.npy", mode="w+", dtype=np.int8, shape=(n,))
    for b, start in enumerate(range(0, n, BLOCK)):
        stop = min(start + BLOCK, n)
        vs, _, g = make_fair_multiview(cfg, seed=seed * 100_003 + b, n=stop - start)
        for mm, v in zip(views, vs):
            mm[start:stop] = v
        groups[start:stop] = g
    for mm in (*views, groups):
        mm.flush()
    return views, groups


def time_fit(views, groups, k: int, c: int, iters: int, chunk_size, seed: int, workdir=None) -> dict:
    """Initialise, then ``iters`` CDAL iterations; seconds per iteration and traced peak memory
    (NumPy buffers and Python objects; memmapped pages are not counted)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    from .estimator import weight_scales

    w = weight_scales(views[0].shape[0], [v.shape[1] for v in views], 2 * k)  # the default knobs
    solver = CDALSolver(Views(views, chunk_size), np.asarray(groups, dtype=np.int64), c, 2 * k,
                        SolverConfig(**w), seed=seed, workdir=workdir)
    t_init = time.perf_counter() - t0
    steps = []
    for _ in range(iters):
        t1 = time.perf_counter()
        solver.step()
        steps.append(time.perf_counter() - t1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    solver.close()
    return {"init_seconds": t_init, "seconds_per_iteration": float(np.median(steps)),
            "traced_peak_mb": peak / 2**20}


def run_scale(ns, iters: int, chunk_size, out, seed: int = 0) -> list[dict]:
    cfg = SyntheticConfig()
    records = []
    with staged_dir(out) as tmp:
        for n in ns:
            data = tmp / f"data_n{n}"
            data.mkdir()
            views, groups = write_views(data, n, cfg, seed)
            rec = {"n": n, "chunk_size": chunk_size or n, **time_fit(views, groups, cfg.k, cfg.c, iters,
                                                                     chunk_size, seed, workdir=data)}
            rec["memmap_mb"] = sum(v.nbytes for v in views) / 2**20
            records.append(rec)
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()),
                  flush=True)
            del views, groups
            for f in data.iterdir():
                f.unlink()
            data.rmdir()
        with (tmp / "scale.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(records[0]))
            w.writeheader()
            w.writerows(records)
    print(f"-> {Path(out) / 'scale.csv'}")
    return records
