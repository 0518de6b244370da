"""The public entry points: estimate a block mask with any registered method, and run causal
sparse prefill attention on the kept blocks (``fast.run_blocks``: batched gathers + fused SDPA on
CPU, the ``icml26_kernels`` Triton kernel on CUDA, or FlexAttention)."""

from __future__ import annotations

import torch

from . import core
from .baselines import METHODS, SELECTORS
from .config import SparseConfig, validate


def _config(cfg: SparseConfig | None, overrides: dict) -> SparseConfig:
    cfg = (cfg or SparseConfig()).with_(**overrides) if overrides else (cfg or SparseConfig())
    return validate(cfg, tuple(METHODS))


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None = None) -> None:
    from icml26_shared import UserError

    if q.dim() != 4 or k.dim() != 4:
        raise UserError(f"q and k must be [B, H, T, D], got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[-1] != k.shape[-1] or (v is not None and v.shape != k.shape):
        raise UserError(f"head dims differ: q {tuple(q.shape)}, k {tuple(k.shape)}"
                        + (f", v {tuple(v.shape)}" if v is not None else ""))
    if q.shape[0] != k.shape[0]:
        raise UserError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise UserError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    if q.shape[2] > k.shape[2]:
        raise UserError(f"more queries ({q.shape[2]}) than keys ({k.shape[2]}) in causal prefill")


@torch.no_grad()
def estimate_block_mask(q: torch.Tensor, k: torch.Tensor, cfg: SparseConfig | None = None,
                        **overrides) -> torch.Tensor:
    """Bool ``[B, H, ceil(T/bs), ceil(S/bs)]`` mask of the blocks to compute for causal prefill.

    ``q [B, H, T, D]``, ``k [B, Hkv, S, D]``; ``cfg`` (or keyword overrides of ``SparseConfig``)
    chooses the method and budget. Sink and local blocks are always kept; no block lies above
    the causal diagonal; ``method="dense"`` or ``density=1`` keeps every visible block.
    """
    cfg = _config(cfg, overrides)
    check_shapes(q, k)
    t, s, bs = q.shape[2], k.shape[2], cfg.block_size
    valid = core.causal_block_valid(t, s, bs, q.device)
    shape = (q.shape[0], q.shape[1], *valid.shape)
    if cfg.method == "dense" or ((cfg.density is None or cfg.density >= 1) and
                                 (cfg.tau is None or cfg.tau >= 1)):
        return valid.expand(shape).clone()
    forced = core.forced_blocks(t, s, bs, cfg.sink_blocks, cfg.local_blocks, q.device)
    if cfg.method in SELECTORS:  # a baseline with its own selection rule
        mask = SELECTORS[cfg.method](q, k, cfg, valid, forced).expand(shape).clone()
        if cfg.baseline_answer_rows:  # the answer-row rule on the baseline's own selection
            mask = core.reselect_answer_rows(mask, q, k, bs, cfg.answer_queries, valid, forced)
    elif cfg.baseline_answer_rows:
        from icml26_shared import UserError

        raise UserError(f"baseline_answer_rows applies to {', '.join(SELECTORS)} "
                        f"(methods with their own selection), not {cfg.method!r}")
    else:
        scores = METHODS[cfg.method](q, k, cfg)
        mask = core.select_blocks(scores, valid, forced, density=cfg.density, tau=cfg.tau,
                                  min_blocks=cfg.min_blocks, allocation=cfg.allocation)
    if cfg.gqa == "union":
        mask = core.gqa_union(mask, k.shape[1])
    return mask


def sparse_prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             cfg: SparseConfig | None = None, *, scale: float | None = None,
                             return_mask: bool = False, backend: str = "auto", **overrides):
    """Causal prefill attention on the blocks the method selects: ``[B, H, T, D]`` (and the mask
    with ``return_mask=True``). ``backend``: "auto" (Triton kernel on CUDA, ``fused`` on CPU),
    "fused", "kernel" (``icml26_kernels.block_sparse_attention``) or "flex"."""
    from icml26_shared import UserError

    from .fast import BACKENDS, run_blocks

    if backend not in BACKENDS:
        raise UserError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    cfg = _config(cfg, overrides)
    check_shapes(q, k, v)
    mask = estimate_block_mask(q, k, cfg)
    out = run_blocks(q, k, v, mask, cfg.block_size, scale, backend)
    return (out, mask) if return_mask else out
