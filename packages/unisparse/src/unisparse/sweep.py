"""The τ sweep: the density each method needs to reach a given last-row recall.

Every method turns its *own* knob over a grid — UniSparse its per-row density budget (the
default rule) and, as a second row, its per-row top-p ``tau``; XAttention its cumulative
threshold; FlexPrefill its γ; MInference its vertical/slash count and block-sparse budget
(``density``); A-shape its window (``density``). Two controls on the *true* block mass: ``oracle``
under UniSparse's row rule (at every budget its last-row recall is at least UniSparse's, so it
needs no more density) and ``oracle_tau``, a per-row top-p (the control of the threshold rules;
it keeps τ of *every* row's mass, so it is not a lower bound on the density a last-row target
needs). For every head the grid is walked
upwards and the first knob value whose last-row recall reaches the target gives the head's
density there (measured, whole causal map). Each grid ends at the dense end (knob 1), so every
target is reached. ``sweep_unit`` scores one capture; ``needed_density`` reads the targets off.
"""

from __future__ import annotations

import numpy as np
import torch

from . import core

#: arm -> (registered method, knob name, knob grid, ascending; the last value keeps every block)
DENSITY_GRID = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
TAU_GRID = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0)
SWEEP_ARMS = {
    "unisparse": ("unisparse", "density", DENSITY_GRID),
    "unisparse_tau": ("unisparse", "tau", TAU_GRID),
    "xattention": ("xattention", "tau", TAU_GRID),
    "flexprefill": ("flexprefill", "tau", TAU_GRID),
    "minference": ("minference", "density", DENSITY_GRID),
    "ashape": ("ashape", "density", DENSITY_GRID),
    "oracle": ("oracle", "density", DENSITY_GRID),
    "oracle_tau": ("oracle", "tau", TAU_GRID),
}
TARGETS = (0.8, 0.9, 0.95)


def knob_config(arm: str, block: int, value: float, *, seed: int = 0, patterns=None):
    """The arm's config with its knob at ``value`` (the other budget off)."""
    from .fidelity import arm_config

    method, knob, _grid = SWEEP_ARMS[arm]
    cfg = arm_config("unisparse_row" if method == "unisparse" else method, block, 0.25, seed,
                     patterns)
    if knob == "tau":
        return cfg.with_(density=None, tau=value)
    return cfg.with_(density=value, tau=None)


@torch.no_grad()
def sweep_unit(q, k, block: int, arms=tuple(SWEEP_ARMS), *, seed: int = 0, patterns=None,
               grids: dict | None = None) -> dict:
    """``{arm: (knobs, density [n_knobs, H], last_row_recall [n_knobs, H])}`` for one capture
    (batch 1); densities are each head's measured fraction of causal blocks."""
    from .sparse import estimate_block_mask

    t = q.shape[2]
    mass = core.block_attention_mass(q, k, block)
    out = {}
    for arm in arms:
        grid = tuple((grids or {}).get(arm, SWEEP_ARMS[arm][2]))
        dens, rec = [], []
        for value in grid:
            mask = estimate_block_mask(q, k, knob_config(arm, block, value, seed=seed,
                                                         patterns=patterns))
            dens.append(core.block_density(mask, t, t, block)[0].numpy())
            rec.append(core.row_recall(mass, mask, 1)[0].numpy())
        out[arm] = (grid, np.stack(dens), np.stack(rec))
    return out


def needed_density(density: np.ndarray, recall: np.ndarray, target: float) -> np.ndarray:
    """Per head: the measured density at the first knob value (ascending) whose last-row recall
    reaches ``target``; ``nan`` where no knob value does (never, when the grid ends dense)."""
    ok = recall >= target - 1e-9
    first = ok.argmax(0)
    res = density[first, np.arange(density.shape[1])].astype(float)
    res[~ok.any(0)] = np.nan
    return res


def bootstrap_ci(units: np.ndarray, groups: np.ndarray, n: int = 2000, seed: int = 0):
    """95% percentile interval of the mean over ``units``, resampling whole ``groups``
    (documents) with replacement; ``None`` with fewer than two groups."""
    ids = np.unique(groups)
    if len(ids) < 2:
        return None
    rng = np.random.default_rng(seed)
    by = [units[groups == g] for g in ids]
    means = [np.concatenate([by[i] for i in rng.integers(0, len(ids), len(ids))]).mean()
             for _ in range(n)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarize(per_unit: list, targets=TARGETS) -> dict:
    """``per_unit``: ``[(doc, layer, sweep_unit result)]`` → ``{arm: {target: {"mean", "ci95",
    "per_layer": {layer: mean over heads (and documents)}}}}``."""
    rows: dict = {}
    for doc, layer, res in per_unit:
        for arm, (_grid, dens, rec) in res.items():
            for tgt in targets:
                need = needed_density(dens, rec, tgt)
                cell = rows.setdefault(arm, {}).setdefault(tgt, {"vals": [], "docs": [],
                                                                 "layers": []})
                cell["vals"].extend(need.tolist())
                cell["docs"].extend([doc] * len(need))
                cell["layers"].extend([layer] * len(need))
    out: dict = {}
    for arm, by_t in rows.items():
        for tgt, c in by_t.items():
            v, d, lay = np.array(c["vals"]), np.array(c["docs"]), np.array(c["layers"])
            out.setdefault(arm, {})[tgt] = {
                "mean": float(np.nanmean(v)),
                "ci95": bootstrap_ci(v, d),
                "per_layer": {int(li): float(np.nanmean(v[lay == li])) for li in np.unique(lay)},
                "unreached": int(np.isnan(v).sum()),
                "units": len(v),
            }
    return out


def tau_sweep_study(model, tok, *, length: int = 4096, block: int = 64, layers=(2, 8, 14),
                    test_docs: int = 2, seed: int = 0, targets=TARGETS, arms=tuple(SWEEP_ARMS),
                    log=print) -> dict:
    """The quick fidelity study's setting (dev document offset 500 for MInference's pattern
    search at density 0.3, test documents offset 0): the sweep over the test captures."""
    from .baselines import search_minference
    from .e2e import documents
    from .fidelity import arm_config, capture

    dev = documents(tok, length, 1, seed, offset=500)
    test = documents(tok, length, test_docs, seed, offset=0)
    log("dev capture (MInference pattern search)")
    dcap = capture(model, dev[0][0], layers)
    cfg = arm_config("minference", block, 0.3, seed)
    patterns = {li: search_minference([(dcap[li][0], dcap[li][1])], cfg) for li in layers}
    del dcap
    per_unit = []
    for i, (ids, _key, _span) in enumerate(test):
        log(f"test capture {i + 1}/{len(test)}")
        for layer, (q, k, _v) in capture(model, ids, layers).items():
            per_unit.append((i, layer, sweep_unit(q, k, block, arms, seed=seed,
                                                  patterns=patterns.get(layer))))
            log(f"  layer {layer} swept")
    return {"setting": dict(length=length, block=block, layers=list(layers), test_docs=test_docs,
                            seed=seed, targets=list(targets),
                            knobs={a: [SWEEP_ARMS[a][1], list(SWEEP_ARMS[a][2])] for a in arms}),
            "patterns": {str(li): list(p) for li, p in patterns.items()},
            "summary": {a: {str(t): c for t, c in by.items()}
                        for a, by in summarize(per_unit, targets).items()}}
