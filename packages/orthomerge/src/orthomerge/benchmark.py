"""One seed of the digits benchmark [R]: train the base and the experts (written to disk), merge
them with every method over its strength grid through the package's own readers and merges, and
score each merge on dev and test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from . import core, digits
from .config import DecoupleConfig, OFTMergeConfig
from .io import Adapter, Tensors
from .merging import decoupled, merge_oft_adapters, merge_residual, oft_dense, oft_rotation

GRIDS = {  # strength grids per rule [R]; each method's strength is chosen on dev
    "orthomerge": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "avg": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "ta": (0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
    "ties": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "dare": (0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "tsv": (0.2, 0.3, 0.5, 0.75, 1.0, 1.5),
}
PARTS = ("dev", "test")


def _grid(method: str, cfg: dict) -> list[tuple[float, float]]:
    lams = GRIDS[method][:: cfg.get("grid_step", 1)]
    dens = cfg["densities"] if method in ("ties", "dare") else (0.2,)
    return [(lam, d) for d in dens for lam in lams]


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
    for method in ("orthomerge", "avg", "ta", "ties", "dare", "tsv"):
        if method not in cfg["oft_methods"]:
            continue
        rows = []
        for lam, dens in _grid(method, cfg):
            mc = OFTMergeConfig(method=method, scale=lam, density=dens, seed=seed)
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
        for rule in cfg["rules"]:
            rows = []
            for lam, dens in _grid(rule, cfg):
                dc = DecoupleConfig(ortho=ortho, residual=rule, residual_scale=lam, density=dens, seed=seed)
                sd = {k: merge_residual(p, dc, index=i) for i, (k, p) in enumerate(parts)}
                rows.append({"scale": lam, "density": dens, **score(sd, ctx)})
            full[f"{ortho}/{rule}"] = rows
    out["full"] = full
    out["geometry"] = geometry(base, ads, cfg["geometry_T"])
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


def geometry(base: dict, ads: list[Adapter], Ts) -> list[dict]:
    """Hyperspherical energy and spectral norm of merged l1/l2 vs the base as T grows, fp64: the pure
    orthogonal merge (OrthoMerge on OFT experts) against TA (λ = 0.3) on the same experts' deltas."""
    rows = []
    W0s = {t: base[f"{t}.weight"].double() for t in digits.TARGETS}
    ref = {t: (core.hyperspherical_energy(W), core.spectral_norm(W)) for t, W in W0s.items()}
    for T in Ts:
        if T > len(ads):
            continue
        tensors, _ = merge_oft_adapters(ads[:T], OFTMergeConfig())
        for t, W0 in W0s.items():
            vec = tensors[f"base_model.model.{t}.oft_R.weight"].double()
            R = core.block_diag(core.cayley(core.skew_from_vec(vec, core.block_from_params(vec.shape[-1])), "peft"))
            deltas = [W0 @ oft_rotation(a, t, None, W0.shape[1]).T - W0 for a in ads[:T]]
            W_ta = W0 + 0.3 * torch.stack(deltas).sum(0)
            for method, W in (("orthomerge", W0 @ R.T), ("ta", W_ta)):
                he, sn = core.hyperspherical_energy(W), core.spectral_norm(W)
                rows.append({"T": T, "module": t, "method": method,
                             "he_rel_change": abs(he - ref[t][0]) / ref[t][0],
                             "spectral_rel_change": abs(sn - ref[t][1]) / ref[t][1]})
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
