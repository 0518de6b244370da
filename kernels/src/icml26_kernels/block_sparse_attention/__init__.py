"""Block-sparse attention (forward, prefill): exact softmax attention restricted to the kept
``block_size × block_size`` tiles of a per-(batch, head) block mask."""

from __future__ import annotations

import math

import torch

from .._dispatch import backend_for
from . import reference
from .reference import indices_to_mask, mask_to_indices

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _impl(backend: str):
    if backend == "triton":
        from . import triton as impl  # Triton is imported only here

        return impl
    return reference


def _expand_bh(x: torch.Tensor, b: int, h: int, name: str) -> torch.Tensor:
    if x.dim() != 4:
        raise ValueError(f"{name} must be 4-D [B, H, NQ, ...], got shape {tuple(x.shape)}")
    if x.shape[0] not in (1, b) or x.shape[1] not in (1, h):
        raise ValueError(f"{name} shape {tuple(x.shape)} does not match batch {b} and heads {h} "
                         "(each may also be 1 to broadcast)")
    return x.expand(b, h, *x.shape[2:])


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           block_mask: torch.Tensor, *, block_size: int = 64,
                           causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Softmax attention computed only on the kept blocks of ``block_mask``.

    Args:
        q: ``[B, H, T, D]`` queries, fp32 / bf16 / fp16.
        k, v: ``[B, Hkv, S, D]`` keys and values (same dtype); ``H`` must be a multiple of
            ``Hkv`` (GQA / MQA: query head ``h`` reads key head ``h // (H // Hkv)``).
        block_mask: which tiles to compute, either a bool mask
            ``[B, H, ceil(T/block_size), ceil(S/block_size)]`` or an integer block index list
            ``[B, H, ceil(T/block_size), K]`` of kept key blocks padded with ``-1``.
            ``B`` and ``H`` may be 1 to broadcast.
        block_size: tile edge for both queries and keys (a power of two ≥ 16).
        causal: query ``i`` sees keys ``j ≤ i + S − T`` (bottom-right aligned, as in chunked prefill).
        scale: softmax scale, default ``1/sqrt(D)``.

    Returns:
        ``[B, H, T, D]`` in ``q``'s dtype (fp32 accumulation). A query row whose kept blocks hold
        no visible key gives 0. An all-ones mask reproduces dense attention.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, h, t, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    if k.shape[0] != b:
        raise ValueError(f"batch of k ({k.shape[0]}) != batch of q ({b})")
    if k.shape[3] != d:
        raise ValueError(f"head dim of k/v ({k.shape[3]}) != head dim of q ({d})")
    hkv, s = k.shape[1], k.shape[2]
    if hkv == 0 or h % hkv:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads ({hkv})")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype of fp32/bf16/fp16, got {q.dtype}, {k.dtype}, {v.dtype}")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size}")
    nq, nk = math.ceil(t / block_size), math.ceil(s / block_size)
    if block_mask.dtype == torch.bool:
        block_mask = _expand_bh(block_mask, b, h, "block_mask")
        if block_mask.shape[2:] != (nq, nk):
            raise ValueError(f"block_mask must be [B, H, {nq}, {nk}] for T={t}, S={s}, "
                             f"block_size={block_size}; got {tuple(block_mask.shape)}")
        indices, counts = mask_to_indices(block_mask)
    elif not block_mask.is_floating_point() and not block_mask.is_complex():
        indices = _expand_bh(block_mask, b, h, "block index list").long()
        if indices.shape[2] != nq:
            raise ValueError(f"block index list must have {nq} query blocks, got {indices.shape[2]}")
        if indices.numel() and int(indices.max()) >= nk:
            raise IndexError(f"block indices must lie in [0, {nk}) or be -1 (padding)")
        # canonical form: kept blocks first, in increasing order, no duplicates
        indices, counts = mask_to_indices(indices_to_mask(indices, nk))
    else:
        raise TypeError(f"block_mask must be bool or an integer index list, got {block_mask.dtype}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    backend = backend_for(q, k, v, op="block_sparse_attention")
    return _impl(backend).forward(q, k, v, indices.to(q.device), counts.to(q.device),
                                  block_size, causal, scale)


__all__ = ["block_sparse_attention", "indices_to_mask", "mask_to_indices"]
