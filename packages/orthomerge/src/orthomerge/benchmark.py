"""One seed of the digits benchmark [R]: train the base and the experts (written to disk), merge
them with every method over its strength grid through the package's own readers and merges, and
score each merge on dev and test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import core, digits
from .config import AUTHORS_TIES, DecoupleConfig, OFTMergeConfig
from .io import Adapter, Tensors
from .merging import (
    decoupled,
    merge_oft_adapters,
    merge_residual,
    oft_blocks,
    oft_dense,
    oft_rotation,
    oft_skews,
    residual_thresholds,
)

GRIDS = {  # strength grids per rule [R]; each method's strength is chosen on dev
    "orthomerge": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "avg": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "ta": (0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
    "ties": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "dare_ties": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "tsv": (0.2, 0.3, 0.5, 0.75, 1.0, 1.5),
}
PARTS = ("dev", "test")




def _grid(method: str, cfg: dict) -> list[tuple[float, float]]:
    if method == "ties_tensor":
        return [AUTHORS_TIES]
    lams = GRIDS[method][cfg.get("grid_offset", 0):: cfg.get("grid_step", 1)]
    dens = cfg["densities"] if method in ("ties", "dare_ties") else (0.5,) if method.startswith("dare") else (0.2,)
    return [(lam, d) for d in dens for lam in lams]


def _rule(method: str) -> tuple[str, str]:
    """(rule, trim scope) of a benchmark method name."""
    return ("ties", "tensor") if method == "ties_tensor" else (method, "model")


def score(sd, ctx) -> dict[str, float]:
    """Per split: normalised accuracy over the tasks (merged ÷ expert) and base-task accuracy."""
    out = {}
    for part in PARTS:
        accs = {t: digits.accuracy(sd, ctx["heads"][t], *digits.task_data(ctx["split"], t, part))
                for t in ctx["tasks"]}
        out[f"{part}_norm"] = float(np.mean([accs[t] / ctx["indiv"][part][t] for t in ctx["tasks"]]))
        out[f"{part}_base"] = digits.accuracy(sd, ctx["base_head"], *digits.task_data(ctx["split"], "base", part))
    return out


def _indiv(sds: dict[str, dict], ctx) -> dict[str, dict[str, float]]:
    return {part: {t: digits.accuracy(sds[t], ctx["heads"][t], *digits.task_data(ctx["split"], t, part))
                   for t in ctx["tasks"]} for part in PARTS}


def run_seed(cfg: dict, seed: int, root: Path) -> dict:
    torch.manual_seed(seed)
    split = digits.load_split(seed)
    base, base_head = digits.train_base(split, cfg["base_steps"], seed)
    tasks = list(cfg["tasks"])
    root = Path(root) / f"seed{seed}"
    base_dir = digits.save_base(base, root / "base")
    oft_dirs = [digits.train_oft_expert(base, split, t, cfg["expert_steps"], seed, cfg["block"],
                                        root / "oft" / t) for t in tasks]
    full_dirs = [digits.train_full_expert(base, split, t, cfg["expert_steps"], seed, root / "full" / t)
                 for t in tasks]
    heads = {t: digits.task_head(t, seed) for t in tasks}
    ctx = {"split": split, "tasks": tasks, "heads": heads, "base_head": base_head}
    base_t = Tensors.open(base_dir)
    ads = [Adapter.open(d) for d in oft_dirs]
    experts = [Tensors.open(d) for d in full_dirs]
    out: dict = {"base": {p: digits.accuracy(base, base_head, *digits.task_data(split, "base", p)) for p in PARTS}}

    # OFT experts -------------------------------------------------------------------------------
    ctx["indiv"] = _indiv({t: _oft_sd(base, ad) for t, ad in zip(tasks, ads, strict=True)}, ctx)
    out["indiv_oft"] = ctx["indiv"]
    oft = {}
    for method in cfg["oft_methods"]:
        rows = []
        for lam, dens in _grid(method, cfg):
            rule, scope = _rule(method)
            mc = OFTMergeConfig(method=rule, scale=lam, density=dens, trim_scope=scope, seed=seed)
            if method in ("orthomerge", "avg"):
                tensors, _ = merge_oft_adapters(ads, mc)
                sd = _oft_sd(base, ads[0], tensors)
            else:
                sd = {k: v for k, v in oft_dense(ads, base_t, mc).items()}
            rows.append({"scale": lam, "density": dens, **score(sd, ctx)})
        oft[method] = rows
    out["oft"] = oft
    out["orth_err"] = _orth_err(ads)

    # full fine-tunes: Orthogonal-Residual Decoupling ±, per residual rule ---------------------------
    ctx["indiv"] = _indiv({t: {k: e[k] for k in e.keys()} for t, e in zip(tasks, experts, strict=True)}, ctx)
    out["indiv_full"] = ctx["indiv"]
    full = {}
    for ortho in ("none", "general", "conflict"):
        parts = list(decoupled(base_t, experts, DecoupleConfig(ortho=ortho)))  # rotations once per target
        for method in cfg["rules"]:
            rows, thr = [], {}
            for lam, dens in _grid(method, cfg):
                rule, scope = _rule(method)
                dc = DecoupleConfig(ortho=ortho, residual=rule, residual_scale=lam, density=dens,
                                    trim_scope=scope, seed=seed)
                if dens not in thr:  # model-scope trim cuts, once per density
                    thr[dens] = residual_thresholds(parts, dc)
                sd = {k: merge_residual(p, dc, index=i, thresholds=thr[dens]) for i, (k, p) in enumerate(parts)}
                rows.append({"scale": lam, "density": dens, **score(sd, ctx)})
            full[f"{ortho}/{method}"] = rows
    out["full"] = full
    out["geometry"] = geometry(base, ads, cfg["geometry_T"])
    if cfg.get("neumann"):  # the same experts trained on peft's default Neumann path: geometry only
        neu = [Adapter.open(digits.train_oft_expert(base, split, t, cfg["expert_steps"], seed, cfg["block"],
                                                     root / "oft_neumann" / t, neumann=True)) for t in tasks]
        out["geometry"] += geometry(base, neu, cfg["geometry_T"], path="neumann")
    out["dirs"] = {"base": str(base_dir), "oft": [str(d) for d in oft_dirs], "full": [str(d) for d in full_dirs]}
    return out


def _oft_sd(base: dict, ad: Adapter, tensors: dict | None = None) -> dict:
    """Body weights of the model an OFT adapter (or merged tensors in its format) produces."""
    sd = dict(base)
    for t in digits.TARGETS:
        key = f"base_model.model.{t}.oft_R.weight"
        vec = (tensors or ad.tensors)[key].double()
        Q = core.skew_from_vec(vec, core.block_from_params(vec.shape[-1]))
        W0 = base[f"{t}.weight"].double()
        sd[f"{t}.weight"] = (W0 @ oft_rotation(ad, t, Q, W0.shape[1]).T).float()
    return sd


def _orth_err(ads: list[Adapter]) -> float:
    """max ‖R*ᵀR* − I‖ over modules of the merged rotation (exact Cayley path, fp64)."""
    tensors, _ = merge_oft_adapters(ads, OFTMergeConfig())
    err = 0.0
    for t in digits.TARGETS:
        vec = tensors[f"base_model.model.{t}.oft_R.weight"].double()
        R = core.cayley(core.skew_from_vec(vec, core.block_from_params(vec.shape[-1])), "peft")
        err = max(err, core.orthogonality_error(R))
    return err


def geometry(base: dict, ads: list[Adapter], Ts, path: str = "exact") -> list[dict]:
    """Geometry of merged l1/l2 vs the base as T grows, fp64, as peft applies the rotations
    (``path``: the experts' Cayley path): hyperspherical energy, spectral norm and ‖RᵀR − I‖_F of
    each expert (T = 1), of OrthoMerge, of TA (λ = 0.3) on the same experts' deltas, and on the
    Neumann path of the merge written on the exact path (``--exact-cayley``)."""
    rows = []
    W0s = {t: base[f"{t}.weight"].double() for t in digits.TARGETS}
    ref = {t: (core.hyperspherical_energy(W), core.spectral_norm(W)) for t, W in W0s.items()}

    def row(T, t, method, W, R_blocks=None):
        he, sn = core.hyperspherical_energy(W), core.spectral_norm(W)
        return {"T": T, "module": t, "method": method, "path": path,
                "he_rel_change": abs(he - ref[t][0]) / ref[t][0], "spectral_rel_change": abs(sn - ref[t][1]) / ref[t][1],
                "orthogonality_error": None if R_blocks is None else core.orthogonality_error(R_blocks)}
    for t, W0 in W0s.items():
        for a in ads:
            Rb = oft_blocks(a.config, oft_skews(a, t))
            rows.append(row(1, t, "expert", W0 @ core.block_diag(Rb).T, Rb))
    for T in Ts:
        if T > len(ads):
            continue
        tensors, config = merge_oft_adapters(ads[:T], OFTMergeConfig())
        for t, W0 in W0s.items():
            vec = tensors[f"base_model.model.{t}.oft_R.weight"].double()
            Q = core.skew_from_vec(vec, core.block_from_params(vec.shape[-1]))
            Rb = oft_blocks(config, Q)
            deltas = [W0 @ oft_rotation(a, t, None, W0.shape[1]).T - W0 for a in ads[:T]]
            rows.append(row(T, t, "orthomerge", W0 @ core.block_diag(Rb).T, Rb))
            rows.append(row(T, t, "ta", W0 + 0.3 * torch.stack(deltas).sum(0)))
            if path == "neumann":
                Re = core.cayley(-Q, "peft")  # what --exact-cayley writes
                rows.append(row(T, t, "orthomerge --exact-cayley", W0 @ core.block_diag(Re).T, Re))
    return rows


def peft_check(base: dict, merged_dir: Path, expert_dir: Path, X: torch.Tensor) -> float:
    """Load an expert and the merged adapter with ``PeftModel.from_pretrained``; the max abs gap
    between peft's outputs and ours (the same body weights evaluated functionally)."""
    import warnings

    from peft import PeftModel

    gap = 0.0
    for d in (expert_dir, merged_dir):
        body = digits.Body()
        body.load_state_dict(base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm = PeftModel.from_pretrained(body, str(d)).eval()
        with torch.no_grad():
            ours = digits.features(_oft_sd(base, Adapter.open(d)), X)
            gap = max(gap, float((pm(X) - ours).abs().max()))
    return gap
