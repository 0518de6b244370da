"""The measurement: per (d, r, L) cell and seed, the smallest m₁, m₂ and real n that reach the
real-data learner, plus the distilled set's 0-step ablation and the equal-memory baselines.

Seeds: every draw of a cell derives from ``SeedSequence([S, d, r, L, k])`` (k = seed index), the
dev teacher from ``SeedSequence([S, d, r, L, DEV])``: never from the order in which cells finish.
Splits: the dev teacher (its own U) chooses η₁ and λ per cell and the distiller's learning rate at
the reference cell; the searches look at a validation draw of the cell's teacher; every reported
MSE is on a separate test draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from .baselines import select
from .config import ETA1_GRID, GM_LR_GRID, RIDGE_GRID, DistillConfig, SweepSpec
from .core import (
    MultiIndexTeacher,
    TwoStageLearner,
    alignment,
    distilled_directions,
    memory_of,
    mse,
    principal_angles,
    stage2_inputs,
)
from .distill import DISTILLERS, distill_labels, init_from_real, matching_inits, real_gradients

DEV = 10**6


def cell_seeds(S: int, d: int, r: int, L: int, k: int, n: int = 10) -> list[int]:
    return [int(v) for v in np.random.SeedSequence([S, d, r, L, k]).generate_state(n) % (2**31)]


@dataclass
class Data:
    teacher: MultiIndexTeacher
    X1: torch.Tensor
    y1: torch.Tensor
    X2: torch.Tensor
    y2: torch.Tensor
    Xv: torch.Tensor
    yv: torch.Tensor
    Xt: torch.Tensor
    yt: torch.Tensor
    real_seed: int
    block: int


def make_data(spec: SweepSpec, d: int, r: int, L: int, seeds: list[int]) -> Data:
    t = MultiIndexTeacher(d, r, spec.link, seed=seeds[0])
    block = max(64, d * d // 4)
    n_blocks = spec.search.n1_factor * d * d // block
    parts = [t.sample(block, seed=seeds[1] + i) for i in range(n_blocks)]
    X1, y1 = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    X2, y2 = t.sample(spec.search.n2_factor * L, seed=seeds[2])
    Xv, yv = t.sample(spec.search.n_val, seed=seeds[3])
    Xt, yt = t.sample(spec.search.n_test, seed=seeds[4])
    return Data(t, X1, y1, X2, y2, Xv, yv, Xt, yt, seeds[1], block)


def tune_learner(spec: SweepSpec, d: int, r: int, L: int) -> tuple[float, float]:
    """η₁ and λ minimising the real-data learner's validation MSE on the dev teacher."""
    ds = cell_seeds(spec.seed, d, r, L, DEV)
    data = make_data(spec, d, r, L, ds)
    best = (math.inf, 0.0, 0.0)
    base = TwoStageLearner(L, 1.0, seed=ds[5])
    W0, a = base.init(d)
    G = base.grad_sum(W0, a, data.X1, data.y1) / len(data.y1)
    for c in ETA1_GRID:
        for lam in RIDGE_GRID:
            lr = TwoStageLearner(L, c * math.sqrt(d), lam, seed=ds[5])
            err = mse(lr.fit_stage2(lr.step(W0, G), data.X2, data.y2), data.Xv, data.yv)
            if err < best[0]:
                best = (err, lr.eta1, lam)
    return best[1], best[2]


def tune_distiller_lr(spec: SweepSpec) -> float:
    """The distiller's Adam lr with the lowest dev validation MSE at the first cell, m₁ = 8r."""
    d, r, L, _ = spec.cells[0]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _tune_lr(spec, d, r, L)
    finally:
        torch.set_num_threads(threads)


def _tune_lr(spec: SweepSpec, d: int, r: int, L: int) -> float:
    ds = cell_seeds(spec.seed, d, r, L, DEV)
    data = make_data(spec, d, r, L, ds)
    eta1, lam = tune_learner(spec, d, r, L)
    lrn = TwoStageLearner(L, eta1, lam, seed=ds[5])
    best = (math.inf, GM_LR_GRID[0])
    for lr in GM_LR_GRID:
        cfg = replace(spec.distill, lr=lr)
        xs, ys = DISTILLERS[spec.distiller](lrn, data.X1, data.y1, 8 * r, cfg, ds[6])
        err = mse(lrn.fit_stage2(lrn.first_step(xs, ys), data.X2, data.y2), data.Xv, data.yv)
        if err < best[0]:
            best = (err, lr)
    return best[1]


def search(ok, lo: int, hi: int, ratio: float = 1.25) -> tuple[int | None, str]:
    """Smallest n in [lo, hi] with ok(n): doubling from lo, then bisection until the bracket is
    within ``ratio``. Returns (n, flag) with flag "floor" (ok at lo), "ceiling" (never ok) or ""."""
    if ok(lo):
        return lo, "floor"
    prev, n = lo, lo
    while True:
        n = min(2 * n, hi)
        if ok(n):
            break
        if n >= hi:
            return None, "ceiling"
        prev = n
    bad, good = prev, n
    while good > bad + 1 and good / bad > ratio:
        mid = (bad + good) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good, ""


def run_cell(spec: SweepSpec, d: int, r: int, L: int, stages: str, k: int, lr: float,
             device: str = "cpu") -> dict:
    """One row of ``rows.jsonl``: the cell (d, r, L) at seed index k (one torch thread; on the
    GPU when ``device="cuda"``, with every seeded draw made on the CPU first)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.device(device):
            return _run_cell(spec, d, r, L, stages, k, lr)
    finally:
        torch.set_num_threads(threads)


def _run_cell(spec: SweepSpec, d: int, r: int, L: int, stages: str, k: int, lr: float) -> dict:
    seeds = cell_seeds(spec.seed, d, r, L, k)
    eta1, lam = tune_learner(spec, d, r, L)
    data = make_data(spec, d, r, L, seeds)
    lrn = TwoStageLearner(L, eta1, lam, seed=seeds[5])
    sc, cfg = spec.search, replace(spec.distill, lr=lr)
    W0, a = lrn.init(d)
    W1_ref = lrn.first_step(data.X1, data.y1, W0)
    ref = lrn.fit_stage2(W1_ref, data.X2, data.y2)
    ref_val, ref_align = mse(ref, data.Xv, data.yv), alignment(W1_ref, data.teacher.U)
    thr = min(sc.min_alignment, 0.97 * ref_align)
    row: dict = dict(d=d, r=r, L=L, seed=k, stages=stages, eta1=eta1, ridge=lam, distiller=spec.distiller,
                     distill_lr=lr, ref_test_mse=mse(ref, data.Xt, data.yt), ref_alignment=ref_align,
                     alignment_threshold=thr, flags=[], m1_star=None, m2_star=None, memory=None,
                     memory_stage1=None, memory_stage2=None, test_mse=None, alignment=None,
                     test_mse_0step=None, alignment_0step=None, n_real_star=None, compression=None,
                     angle_max_deg=None, angle_max_deg_0step=None, baseline_points=None,
                     **{f"{name}_test_mse": None for name in spec.baselines})

    def passes(W1, model) -> bool:
        return (mse(model, data.Xv, data.yv) <= sc.mse_factor * ref_val
                and alignment(W1, data.teacher.U) >= thr)

    # stage 2 alone (stage 1 = the real step): the smallest m₂ of distilled labels
    seed2 = seeds[7]

    def label_model(W1, m2):
        lab = distill_labels(lrn, W1, data.X2, data.y2, m2, seed2)
        return lrn.fit_stage2(W1, stage2_inputs(seed2, m2, d), lab), lab

    m2, flag2 = search(lambda m: mse(label_model(W1_ref, m)[0], data.Xv, data.yv) <= sc.mse_factor * ref_val,
                       1, sc.m2_max_factor * L)
    row["m2_star"] = m2
    if flag2:
        row["flags"].append(f"m2:{flag2}")
    if m2 is not None:
        row["memory_stage2"] = m2 + memory_of(seed2)
    if "1" not in stages:
        if m2 is not None:
            row["test_mse"] = mse(label_model(W1_ref, m2)[0], data.Xt, data.yt)
        return row

    # stage 1: the smallest m₁ of distilled points (stage 2 on the real 4L points)
    inits = matching_inits(lrn, d, cfg.n_inits, seeds[6])
    G_real = real_gradients(lrn, *inits, data.X1, data.y1) if spec.distiller == "gm" else None
    made: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def distilled(m: int):
        if m not in made:
            made[m] = DISTILLERS[spec.distiller](lrn, data.X1, data.y1, m, cfg, seeds[6] + m,
                                                 G_real=G_real, inits=inits)
        return made[m]

    def ok1(m: int) -> bool:
        W1 = lrn.first_step(*distilled(m), W0)
        return passes(W1, lrn.fit_stage2(W1, data.X2, data.y2))

    m1, flag1 = search(ok1, 1, sc.m1_max)
    row["m1_star"], row["m1_ceiling"] = m1, sc.m1_max  # a ceiling row is censored at m1_ceiling
    if flag1:
        row["flags"].append(f"m1:{flag1}")
    _real_search(row, spec, lrn, W0, a, data, passes)
    if m1 is None or m2 is None:
        return row

    # the whole distilled set: S₁ at m₁*, then m₂* labels for the step that S₁ gives
    U = data.teacher.U
    for tag, (xs, ys) in (("", distilled(m1)), ("_0step", init_from_real(data.X1, data.y1, m1, seeds[6] + m1))):
        W1 = lrn.first_step(xs, ys, W0)
        model, _ = label_model(W1, m2)
        row["test_mse" + tag] = mse(model, data.Xt, data.yt)
        row["alignment" + tag] = alignment(W1, U)
        ang = principal_angles(U, distilled_directions(xs, ys, r))
        row["angle_max_deg" + tag] = float(np.degrees(ang.max()))
    row["memory_stage1"] = memory_of(distilled(m1))
    row["memory"] = row["memory_stage1"] + row["memory_stage2"]
    if row["n_real_star"] is not None:
        row["compression"] = (row["n_real_star"] + len(data.y2)) * (d + 1) / row["memory"]
    n_b = max(1, row["memory"] // (d + 1))
    pool_X, pool_y = data.X1[:4096], data.y1[:4096]
    for name in spec.baselines:
        idx = select(name, pool_X, pool_y, n_b, seeds[8])
        Xb, yb = pool_X[idx], pool_y[idx]
        model = lrn.fit_stage2(lrn.first_step(Xb, yb, W0), Xb, yb)
        row[f"{name}_test_mse"] = mse(model, data.Xt, data.yt)
    row["baseline_points"] = n_b
    return row


def _real_search(row: dict, spec: SweepSpec, lrn: TwoStageLearner, W0, a, data: Data, passes) -> None:
    """The smallest real stage-1 n (in blocks of the same stream that holds the n₁ = 4d² points)."""
    d, B = data.X1.shape[1], data.block
    n1_blocks = len(data.y1) // B
    max_blocks = spec.search.real_max_factor * d * d // B
    sums: list[torch.Tensor] = [lrn.grad_sum(W0, a, data.X1[i * B:(i + 1) * B], data.y1[i * B:(i + 1) * B])
                                for i in range(n1_blocks)]

    def ok(nb: int) -> bool:
        while len(sums) < nb:
            Xb, yb = data.teacher.sample(B, seed=data.real_seed + len(sums))
            sums.append(lrn.grad_sum(W0, a, Xb, yb))
        W1 = lrn.step(W0, torch.stack(sums[:nb]).sum(0) / (nb * B))
        return passes(W1, lrn.fit_stage2(W1, data.X2, data.y2))

    nb, flag = search(ok, 1, max_blocks, ratio=1.0)
    if flag:
        row["flags"].append(f"n_real:{flag}")
    row["n_real_star"] = None if nb is None else nb * B


def pm_at(spec: SweepSpec, row: dict) -> dict:
    """gm and pm at the row's m₁* (same seeds, same data, same steps; stage 2 on the real 4L)."""
    d, r, L, k, m = row["d"], row["r"], row["L"], row["seed"], row["m1_star"]
    seeds = cell_seeds(spec.seed, d, r, L, k)
    data = make_data(spec, d, r, L, seeds)
    lrn = TwoStageLearner(L, row["eta1"], row["ridge"], seed=seeds[5])
    W0, _ = lrn.init(d)
    out = {"seed": k}
    for name in ("gm", "pm"):
        cfg = replace(spec.distill, lr=row["distill_lr"], n_inits=2 if name == "pm" else spec.distill.n_inits,
                      pm_batch=512)
        xs, ys = DISTILLERS[name](lrn, data.X1, data.y1, m, cfg, seeds[6] + m)
        W1 = lrn.first_step(xs, ys, W0)
        out[name] = mse(lrn.fit_stage2(W1, data.X2, data.y2), data.Xt, data.yt)
    return out


def default_distill(grid: str) -> DistillConfig:
    return DistillConfig(steps=15, lr=0.1, n_inits=2, pm_batch=256) if grid == "smoke" else DistillConfig()
