"""Whole adapters: merge many LoRA adapters (in memory or PEFT folders) into one, and inspect them.

Layers are merged one at a time; a PEFT set is streamed from disk module by module, so the peak
memory is one layer's factors (plus the dense m×n stack for the ``full`` / ``knots`` baselines).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from icml26_shared import UserError
from icml26_shared.io import dumps_json

from .config import MergeConfig
from .core import effective_rank
from .spaces import merge_layer

Factors = tuple[torch.Tensor, torch.Tensor]  # (A (r, n), B (m, r)), ΔW = B A


def _merge_one(As, Bs, cfg: MergeConfig, index: int) -> Factors:
    return merge_layer(As, Bs, space=cfg.space, rule=cfg.rule, weights=cfg.weights,
                       density=cfg.density, seed=cfg.seed, layer_index=index,
                       out_rank=cfg.out_rank, opts=cfg.space_options())


def merge_lora(adapters: Sequence[Mapping[str, Factors]], config: MergeConfig | None = None) -> dict[str, Factors]:
    """Merge in-memory adapters ``{module: (A, B)}`` (same modules in each) into one.

    Returns ``{module: (A*, B*)}`` with rank ≤ Σ_t r_t (≤ ``config.out_rank``). Deterministic for
    ``config.seed``; layer i uses the stream (seed, i) over the sorted module names.
    """
    cfg = config or MergeConfig()
    if not adapters:
        raise ValueError("need at least one adapter")
    names = sorted(adapters[0])
    for ad in adapters[1:]:
        if sorted(ad) != names:
            raise ValueError("adapters must hold the same modules")
    if cfg.weights is not None and len(cfg.weights) != len(adapters):
        raise ValueError(f"{len(cfg.weights)} weights for {len(adapters)} adapters")
    return {name: _merge_one([ad[name][0] for ad in adapters], [ad[name][1] for ad in adapters], cfg, i)
            for i, name in enumerate(names)}


def _warm_up(cfg: MergeConfig) -> None:
    """Import what the merge needs (peft's rule code, which pulls transformers, for TA / TIES /
    DARE; peft's model for the ``peft`` space) before the timed loop, so the merge time is the
    merge's alone."""
    from icml26_shared.merge import peft_merge_utils

    if cfg.rule not in ("tsv", "iso"):  # the rules whose code is peft's
        peft_merge_utils()
    if cfg.space == "peft":
        from .peft_baseline import _require_peft

        _require_peft()


def merge_adapters(dirs: Sequence[str | Path], out: str | Path, config: MergeConfig | None = None, *,
                   force: bool = False, progress: Callable[[int, int, str], None] | None = None,
                   ignore_base_name: bool = False) -> dict[str, Any]:
    """Merge PEFT LoRA adapter folders into a new PEFT adapter folder ``out``.

    Refuses (``UserError``, nothing written) adapters of different base models (unless
    ``ignore_base_name``: target modules and shapes are still checked) or target modules, missing
    files, an ``out`` that is (or holds, or lies inside) an input, or an existing ``out`` unless
    ``force`` and it is an earlier circumerge output. Returns a summary dict: ``merge_seconds``
    (the merges alone), ``io_seconds`` (reading and writing factors), ``setup_seconds`` (opening,
    checks, imports the merge needs).
    """
    from icml26_shared.merge import prepare_out

    from .io import PeftAdapter, check_compatible, iter_layers, output_config
    from .writer import StreamingAdapterWriter

    t_setup = time.perf_counter()
    cfg = config or MergeConfig()
    if not dirs:
        raise UserError("give at least one adapter folder")
    prepare_out(out, force, list(dirs), tool="circumerge")
    if cfg.weights is not None and len(cfg.weights) != len(dirs):
        raise UserError(f"--weights has {len(cfg.weights)} values for {len(dirs)} adapters")
    adapters = [PeftAdapter.open(d) for d in dirs]
    check_compatible(adapters, ignore_base_name=ignore_base_name)
    _warm_up(cfg)
    out_dtype = adapters[0].weight_dtype()
    # the output rank is fixed before merging (Σ r_t, or out_rank), so the safetensors header can be
    # written first and every merged layer streamed to disk as soon as it exists
    first = adapters[0]
    mods = first.modules
    full_rank = {mod: sum(ad.shapes[mod][0] for ad in adapters) for mod in mods}
    rank = max(min(full_rank[m], cfg.out_rank or full_rank[m]) for m in mods)
    layout = []
    for mod in mods:
        _, n, m = first.shapes[mod]
        layout += [(mod + ".lora_A.weight", (rank, n)), (mod + ".lora_B.weight", (m, rank))]
    meta = {k: v for k, v in asdict(cfg).items()}
    meta["sources"] = [str(Path(d)) for d in dirs]
    t0, merge_s = time.perf_counter(), 0.0
    setup_s = t0 - t_setup
    with StreamingAdapterWriter(Path(out), layout, out_dtype, output_config(first.config, rank),
                                {"circumerge": dumps_json(meta, indent=None, default=str)}, force) as writer:
        for i, (mod, As, Bs) in enumerate(iter_layers(adapters)):
            t1 = time.perf_counter()
            A, B = _merge_one(As, Bs, cfg, i)
            merge_s += time.perf_counter() - t1
            k = A.shape[0]  # pad with zeros to the common rank (the product is unchanged)
            writer.write(mod + ".lora_A.weight", torch.cat([A, A.new_zeros(rank - k, A.shape[1])]))
            writer.write(mod + ".lora_B.weight", torch.cat([B, B.new_zeros(B.shape[0], rank - k)], 1))
            del As, Bs, A, B
            if progress:
                progress(i + 1, len(mods), mod)
    return {"out": str(out), "modules": len(mods), "rank": rank, "adapters": len(dirs),
            "merge_seconds": merge_s, "io_seconds": time.perf_counter() - t0 - merge_s,
            "setup_seconds": setup_s, "total_seconds": time.perf_counter() - t_setup}


def _orth(X: torch.Tensor) -> torch.Tensor:
    Q, _ = torch.linalg.qr(X)
    return Q


def factored_svdvals(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Singular values of B A from the factors (QR of both, SVD of r×r)."""
    _, Rb = torch.linalg.qr(B, mode="r")  # only the triangular factors are needed
    _, Ra = torch.linalg.qr(A.T, mode="r")
    return torch.linalg.svdvals(Rb @ Ra.T)


def subspace_overlap(X: torch.Tensor, Y: torch.Tensor) -> float:
    """‖Q_Xᵀ Q_Y‖_F² / min(rank): 1 for nested column spaces, 0 for orthogonal ones."""
    Qx, Qy = _orth(X), _orth(Y)
    return float((Qx.T @ Qy).pow(2).sum() / min(Qx.shape[1], Qy.shape[1]))


def inspect_adapters(dirs: Sequence[str | Path]) -> dict[str, Any]:
    """Ranks, mean effective rank of each ΔW_t, effective rank of the stacked factors, and the
    pairwise subspace overlap (mean of the B column-space and A row-space overlaps) over modules."""
    from .io import PeftAdapter, check_compatible

    adapters = [PeftAdapter.open(d) for d in dirs]
    if len(adapters) > 1:
        check_compatible(adapters)
    T = len(adapters)
    eranks = [[] for _ in adapters]
    overlap = torch.zeros(T, T, dtype=torch.float64)
    stack_erank = []
    mods = adapters[0].modules
    for mod in mods:
        pairs = [ad.load(mod) for ad in adapters]
        for t, (A, B) in enumerate(pairs):
            eranks[t].append(effective_rank(factored_svdvals(A, B)))
        for i in range(T):
            for j in range(T):
                overlap[i, j] += 0.5 * (subspace_overlap(pairs[i][1], pairs[j][1])
                                        + subspace_overlap(pairs[i][0].T, pairs[j][0].T))
        stack_erank.append(effective_rank(torch.cat([a for a, _ in pairs])))
    overlap /= len(mods)
    return {
        "base_model": adapters[0].base_model,
        "modules": len(mods),
        "adapters": [{"path": str(ad.path), "ranks": sorted({s[0] for s in ad.shapes.values()}),
                      "mean_effective_rank": sum(e) / len(e)} for ad, e in zip(adapters, eranks, strict=True)],
        "stacked_A_effective_rank": sum(stack_erank) / len(stack_erank),
        "overlap": overlap.tolist(),
    }
