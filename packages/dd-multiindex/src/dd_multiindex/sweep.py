"""The measurement: per (d, r, L) cell and seed, the smallest m₁, m₂ and real n that reach the
real-data learner, plus the distilled set's 0-step ablation and the equal-memory baselines.

Seeds: every draw of a cell derives from ``SeedSequence([S, d, r, L, k])`` (k = seed index), the
dev teacher from ``SeedSequence([S, d, r, L, DEV])``: never from the order in which cells finish.
Splits: the dev teacher (its own U) chooses η₁ and λ per cell and the distiller's learning rate at
the reference cell; the searches look at a validation draw of the cell's teacher; every reported
MSE is on a separate test draw.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from .baselines import select
from .config import BASELINE_RIDGE_GRID, ETA1_GRID, GM_LR_GRID, RIDGE_GRID, DistillConfig, SweepSpec
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
REAL = 10**6 + 1  # the seed-stream tag of the real search's fresh draws


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


@functools.lru_cache(maxsize=4)
def _dev_data(spec: SweepSpec, d: int, r: int, L: int) -> Data:
    return make_data(spec, d, r, L, cell_seeds(spec.seed, d, r, L, DEV))


@functools.cache
def tune_learner(spec: SweepSpec, d: int, r: int, L: int) -> tuple[float, float]:
    """η₁ and λ minimising the real-data learner's validation MSE on the dev teacher (cached per
    cell and process: every seed of a cell shares it)."""
    ds = cell_seeds(spec.seed, d, r, L, DEV)
    data = _dev_data(spec, d, r, L)
    best = (math.inf, 0.0, 0.0)
    base = TwoStageLearner(L, 1.0, activation=spec.activation, seed=ds[5])
    W0, a = base.init(d)
    G = base.grad_sum(W0, a, data.X1, data.y1) / len(data.y1)
    for c in ETA1_GRID:
        for lam in RIDGE_GRID:
            lr = TwoStageLearner(L, c * base.eta_unit(d), lam, spec.activation, seed=ds[5])
            err = mse(lr.fit_stage2(lr.step(W0, G), data.X2, data.y2), data.Xv, data.yv)
            if err < best[0]:
                best = (err, lr.eta1, lam)
    return best[1], best[2]


def lr_cells(spec: SweepSpec) -> dict[int, tuple[int, int]]:
    """Per d of the grid, the cell (r, L) where the distiller's lr is chosen: the smallest r with
    stage 1 at that d (then the smallest L)."""
    out: dict[int, tuple[int, int]] = {}
    for d, r, L, _ in sorted(spec.cells, key=lambda c: (c[0], "1" not in c[3], c[1], c[2])):
        out.setdefault(d, (r, L))
    return out


def tune_distiller_lr(spec: SweepSpec) -> dict[int, float]:
    """Per d, the distiller's Adam lr with the lowest dev validation MSE at m₁ = 8r (issue 54 item 5:
    the lr on dev per d), at that d's ``lr_cells`` cell."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {d: _tune_lr(spec, d, r, L) for d, (r, L) in lr_cells(spec).items()}
    finally:
        torch.set_num_threads(threads)


def _tune_lr(spec: SweepSpec, d: int, r: int, L: int) -> float:
    ds = cell_seeds(spec.seed, d, r, L, DEV)
    data = make_data(spec, d, r, L, ds)
    eta1, lam = tune_learner(spec, d, r, L)
    lrn = TwoStageLearner(L, eta1, lam, spec.activation, seed=ds[5])
    best = (math.inf, GM_LR_GRID[0])
    for lr in GM_LR_GRID:
        cfg = replace(spec.distill, lr=lr)
        xs, ys = DISTILLERS[spec.distiller](lrn, data.X1, data.y1, min(8 * r, len(data.y1)), cfg, ds[6])
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


def target_d(spec: SweepSpec, r: int, L: int) -> int:
    """The d at which the absolute target of (r, L) is set: ``spec.target_at`` if given (and r <= it),
    else the smallest stage-1 d with that (r, L)."""
    if spec.target_at and r <= spec.target_at:
        return spec.target_at
    ds = [c[0] for c in spec.cells if (c[1], c[2]) == (r, L) and "1" in c[3]]
    return min(ds or [c[0] for c in spec.cells if (c[1], c[2]) == (r, L)])


@functools.cache
def absolute_target(spec: SweepSpec, r: int, L: int) -> tuple[float, float, int]:
    """(τ, alignment threshold, d_ref), fixed per (r, L) for every d: the real learner on the dev
    teacher at d_ref = ``target_d`` with n₁ = 4 d_ref² points (the data a distiller sees), η₁ and λ
    tuned there; τ = mse_factor × its validation MSE, alignment threshold = min(min_alignment,
    0.97 × its alignment), each the median over three learner inits. Nothing of the cell's own
    teacher enters."""
    d = target_d(spec, r, L)
    ds = cell_seeds(spec.seed, d, r, L, DEV)
    data = _dev_data(spec, d, r, L)
    eta1, lam = tune_learner(spec, d, r, L)
    errs, aligns = [], []
    for s in ds[5:8]:  # the median over three learner inits: one lucky or unlucky init does not set it
        lrn = TwoStageLearner(L, eta1, lam, spec.activation, seed=s)
        W1 = lrn.first_step(data.X1, data.y1)
        errs.append(mse(lrn.fit_stage2(W1, data.X2, data.y2), data.Xv, data.yv))
        aligns.append(alignment(W1, data.teacher.U))
    sc = spec.search
    return (sc.mse_factor * float(np.median(errs)), min(sc.min_alignment, 0.97 * float(np.median(aligns))), d)


def fresh_seeds(spec: SweepSpec, d: int, r: int, L: int, k: int, n: int) -> list[int]:
    """Seeds of the real-search blocks: their own stream, disjoint from the reference's n₁ points."""
    return [int(v) for v in np.random.SeedSequence([spec.seed, d, r, L, k, REAL]).generate_state(n) % (2**31)]


def _run_cell(spec: SweepSpec, d: int, r: int, L: int, stages: str, k: int, lr: float) -> dict:
    seeds = cell_seeds(spec.seed, d, r, L, k)
    eta1, lam = tune_learner(spec, d, r, L)
    data = make_data(spec, d, r, L, seeds)
    lrn = TwoStageLearner(L, eta1, lam, spec.activation, seed=seeds[5])
    sc = spec.search
    W0, a = lrn.init(d)
    W1_ref = lrn.first_step(data.X1, data.y1, W0)
    ref = lrn.fit_stage2(W1_ref, data.X2, data.y2)
    ref_val, ref_align = mse(ref, data.Xv, data.yv), alignment(W1_ref, data.teacher.U)
    row: dict = dict(d=d, r=r, L=L, seed=k, stages=stages, eta1=eta1, ridge=lam, distiller=spec.distiller,
                     activation=spec.activation,
                     distill_lr=lr, ref_test_mse=mse(ref, data.Xt, data.yt), ref_alignment=ref_align,
                     zero_test_mse=float((data.yt**2).mean()), flags=[], m1_star=None, m2_star=None,
                     memory=None, memory_stage1=None, memory_stage2=None, test_mse=None, alignment=None,
                     test_mse_0step=None, alignment_0step=None, test_mse_owninit=None, alignment_owninit=None,
                     n_real_star=None, compression=None,
                     angle_max_deg=None, angle_max_deg_0step=None, angle_max_deg_owninit=None, baseline_points=None,
                     **{f"{name}_test_mse": None for name in spec.baselines})
    m2 = _m2_search(row, spec, lrn, W1_ref, data, seeds[7], ref_val)
    if "1" not in stages:
        return row
    tau, thr, d_ref = absolute_target(spec, r, L)
    row.update(target_mse=tau, alignment_threshold=thr, target_d=d_ref, ref_val_mse=ref_val,
               ref_meets_target=bool(ref_val <= tau and ref_align >= thr))

    def passes(W1, model) -> bool:  # the absolute target: the same for the distilled sets and real data
        return mse(model, data.Xv, data.yv) <= tau and alignment(W1, data.teacher.U) >= thr

    distilled = _Distilled(spec, lrn, data, seeds[6], lr)
    m1 = _m1_search(row, spec, lrn, W0, data, distilled, passes)
    if "real" in spec.parts:
        _real_search(row, spec, lrn, W0, a, data, passes,
                     fresh_seeds(spec, d, r, L, k, sc.real_max_factor * d * d // data.block))
    if m1 is None or m2 is None:
        return row
    _final_set(row, lrn, W0, data, distilled, m1, m2, seeds)
    if "baselines" in spec.parts:
        _baselines(row, spec, lrn, W0, data, seeds[8])
    return row


class _Distilled:
    """The cell's distilled sets by m₁ (one distiller run per m₁, same inits and matched gradient),
    with each run's loss curve and stop reason."""

    def __init__(self, spec: SweepSpec, lrn: TwoStageLearner, data: Data, seed: int, lr: float):
        self.spec, self.lrn, self.data, self.seed = spec, lrn, data, seed
        self.cfg = replace(spec.distill, lr=lr)
        self.inits = matching_inits(lrn, data.X1.shape[1], self.cfg.n_inits, seed)
        self.G_real = (real_gradients(lrn, *self.inits, data.X1, data.y1) if spec.distiller == "gm"
                       else None)
        self.made: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.logs: dict[int, dict] = {}

    def __call__(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        if m not in self.made:
            log: dict = {}
            kw = dict(G_real=self.G_real, inits=self.inits, log=log) if self.spec.distiller == "gm" else {}
            self.made[m] = DISTILLERS[self.spec.distiller](self.lrn, self.data.X1, self.data.y1, m, self.cfg,
                                                           self.seed + m, **kw)
            self.logs[m] = log
        return self.made[m]


def _m2_search(row: dict, spec: SweepSpec, lrn: TwoStageLearner, W1_ref, data: Data, seed2: int,
               ref_val: float) -> int | None:
    """Stage 2 alone (stage 1 = the real step): the smallest m₂ of distilled labels whose ridge fit
    is within mse_factor of the real stage-2 fit (an identity check: the labels are exact once m₂ ≥ L)."""
    sc = spec.search
    d = data.X1.shape[1]

    def ok(m):
        lab = distill_labels(lrn, W1_ref, data.X2, data.y2, m, seed2)
        return mse(lrn.fit_stage2(W1_ref, stage2_inputs(seed2, m, d), lab), data.Xv, data.yv) <= sc.mse_factor * ref_val

    m2, flag2 = search(ok, 1, sc.m2_max_factor * row["L"])
    row["m2_star"] = m2
    if flag2:
        row["flags"].append(f"m2:{flag2}")
    if m2 is not None:
        row["memory_stage2"] = m2 + memory_of(seed2)
        if "1" not in row["stages"]:
            lab = distill_labels(lrn, W1_ref, data.X2, data.y2, m2, seed2)
            row["test_mse"] = mse(lrn.fit_stage2(W1_ref, stage2_inputs(seed2, m2, d), lab), data.Xt, data.yt)
    return m2


def _m1_search(row: dict, spec: SweepSpec, lrn: TwoStageLearner, W0, data: Data, distilled: _Distilled,
               passes) -> int | None:
    """The smallest m₁ of distilled points (stage 2 on the real 4L points) that meets the target."""

    def ok(m: int) -> bool:
        W1 = lrn.first_step(*distilled(m), W0)
        return passes(W1, lrn.fit_stage2(W1, data.X2, data.y2))

    m1, flag1 = search(ok, 1, spec.search.m1_max)
    row["m1_star"], row["m1_ceiling"] = m1, spec.search.m1_max  # a ceiling row is censored at m1_ceiling
    if flag1:
        row["flags"].append(f"m1:{flag1}")
    logs = list(distilled.logs.values())
    row["distill_runs"] = len(logs)
    row["distill_capped"] = sum(1 for g in logs if g.get("stopped") == "cap")
    at = distilled.logs.get(m1 if m1 is not None else max(distilled.logs, default=-1), {})
    loss = at.get("loss", [])
    row["distill_curve"] = loss[:: max(1, len(loss) // 100)] + loss[-1:] if loss else []
    row["distill_curve_step"] = max(1, len(loss) // 100)
    row["distill_steps"], row["distill_stopped"] = at.get("steps"), at.get("stopped")
    return m1


def _final_set(row: dict, lrn: TwoStageLearner, W0, data: Data, distilled: _Distilled, m1: int, m2: int,
               seeds: list[int]) -> None:
    """The whole distilled set: S₁ at m₁*, then m₂* labels for the step that S₁ gives; its 0-step
    ablation (the same m₁ real starting points, no distiller step) and, for gm, the own-init
    ablation (the same start matched at the learner's own init W₀ instead of K other inits)."""
    U, d, r = data.teacher.U, data.X1.shape[1], row["r"]
    seed2 = seeds[7]
    sets = [("", distilled(m1)), ("_0step", init_from_real(data.X1, data.y1, m1, seeds[6] + m1))]
    if distilled.spec.distiller == "gm" and "owninit" in distilled.spec.parts:  # matched at W0 only
        own = (W0[None], lrn.init(d)[1])
        sets.append(("_owninit", DISTILLERS["gm"](lrn, data.X1, data.y1, m1, distilled.cfg, seeds[6] + m1,
                                                   G_real=real_gradients(lrn, *own, data.X1, data.y1), inits=own)))
    for tag, (xs, ys) in sets:
        W1 = lrn.first_step(xs, ys, W0)
        lab = distill_labels(lrn, W1, data.X2, data.y2, m2, seed2)
        model = lrn.fit_stage2(W1, stage2_inputs(seed2, m2, d), lab)
        row["test_mse" + tag] = mse(model, data.Xt, data.yt)
        row["alignment" + tag] = alignment(W1, U)
        ang = principal_angles(U, distilled_directions(xs, ys, r))
        row["angle_max_deg" + tag] = float(np.degrees(ang.max()))
    row["memory_stage1"] = memory_of(distilled(m1))
    row["memory"] = row["memory_stage1"] + row["memory_stage2"]
    if row["n_real_star"] is not None:
        row["compression"] = (row["n_real_star"] + len(data.y2)) * (d + 1) / row["memory"]


@functools.cache
def tune_baseline(spec: SweepSpec, d: int, r: int, L: int, name: str, n: int) -> tuple[float, float]:
    """η₁ and λ for the baseline ``name`` at its own size n, on the dev teacher: the same rule picks n
    dev points, and the pair with the lowest dev validation MSE wins (λ up to 1e3, where the fit is
    the constant predictor 0, so a tuned baseline is never much worse than predicting 0)."""
    ds = cell_seeds(spec.seed, d, r, L, DEV)
    data = _dev_data(spec, d, r, L)
    idx = select(name, data.X1[:4096], data.y1[:4096], n, ds[8])
    Xb, yb = data.X1[:4096][idx], data.y1[:4096][idx]
    base = TwoStageLearner(L, 1.0, activation=spec.activation, seed=ds[5])
    W0 = base.init(d)[0]
    best = (math.inf, 0.0, 0.0)
    for c in ETA1_GRID:
        for lam in BASELINE_RIDGE_GRID:
            lr = TwoStageLearner(L, c * base.eta_unit(d), lam, spec.activation, seed=ds[5])
            err = mse(lr.fit_stage2(lr.first_step(Xb, yb, W0), Xb, yb), data.Xv, data.yv)
            if err < best[0]:
                best = (err, lr.eta1, lam)
    return best[1], best[2]


def _baselines(row: dict, spec: SweepSpec, lrn: TwoStageLearner, W0, data: Data, seed: int) -> None:
    """Equal-memory real subsets (floor(memory/(d+1)) points, both stages), each with η₁ and λ tuned
    on the dev teacher for its own rule and size (``tune_baseline``)."""
    d, r, L = data.X1.shape[1], row["r"], row["L"]
    n_b = max(1, row["memory"] // (d + 1))
    pool_X, pool_y = data.X1[:4096], data.y1[:4096]
    for name in spec.baselines:
        idx = select(name, pool_X, pool_y, n_b, seed)
        Xb, yb = pool_X[idx], pool_y[idx]
        eta1, lam = tune_baseline(spec, d, r, L, name, n_b)
        lb = TwoStageLearner(L, eta1, lam, spec.activation, seed=lrn.seed)
        model = lb.fit_stage2(lb.first_step(Xb, yb, W0), Xb, yb)
        row[f"{name}_test_mse"] = mse(model, data.Xt, data.yt)
        row[f"{name}_eta1"], row[f"{name}_ridge"] = eta1, lam
    row["baseline_points"] = n_b


def _real_search(row: dict, spec: SweepSpec, lrn: TwoStageLearner, W0, a, data: Data, passes,
                 seeds: list[int]) -> None:
    """The smallest real stage-1 n that meets the target, in blocks of ``data.block`` fresh points
    (block i drawn from ``seeds[i]``: never the reference's n₁ points), up to real_max_factor·d²."""
    B = data.block
    sums: list[torch.Tensor] = []

    def ok(nb: int) -> bool:
        while len(sums) < nb:
            Xb, yb = data.teacher.sample(B, seed=seeds[len(sums)])
            sums.append(lrn.grad_sum(W0, a, Xb, yb))
        W1 = lrn.step(W0, torch.stack(sums[:nb]).sum(0) / (nb * B))
        return passes(W1, lrn.fit_stage2(W1, data.X2, data.y2))

    nb, flag = search(ok, 1, len(seeds), ratio=1.0)
    if flag:
        row["flags"].append(f"n_real:{flag}")
    row["n_real_star"] = None if nb is None else nb * B
    row["n_real_ceiling"] = len(seeds) * B  # a ceiling row is censored there


def pm_at(spec: SweepSpec, row: dict) -> dict:
    """gm and pm at the row's m₁* (same seeds, same data; stage 2 on the real 4L): gm to its plateau,
    pm (no plateau rule: its loss is a fresh minibatch each step) for min(150, cap) steps."""
    d, r, L, k, m = row["d"], row["r"], row["L"], row["seed"], row["m1_star"]
    seeds = cell_seeds(spec.seed, d, r, L, k)
    data = make_data(spec, d, r, L, seeds)
    lrn = TwoStageLearner(L, row["eta1"], row["ridge"], spec.activation, seed=seeds[5])
    W0, _ = lrn.init(d)
    out = {"seed": k}
    for name in ("gm", "pm"):
        cfg = replace(spec.distill, lr=row["distill_lr"], n_inits=2 if name == "pm" else spec.distill.n_inits,
                      pm_batch=512, steps=min(150, spec.distill.steps) if name == "pm" else spec.distill.steps)
        xs, ys = DISTILLERS[name](lrn, data.X1, data.y1, m, cfg, seeds[6] + m)
        W1 = lrn.first_step(xs, ys, W0)
        out[name] = mse(lrn.fit_stage2(W1, data.X2, data.y2), data.Xt, data.yt)
    return out


def default_distill(grid: str) -> DistillConfig:
    return DistillConfig(steps=15, lr=0.1, n_inits=2, pm_batch=256) if grid == "smoke" else DistillConfig()
