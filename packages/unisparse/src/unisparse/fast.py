"""Execution backends for the kept blocks (exact softmax attention on them, causal prefill).

- ``gather``: the kept key/value blocks of many query blocks and all heads are
  gathered at once (padded to the longest row of a chunk of rows) and attended with two batched
  matmuls; no Python loop per query block, no private aten op. Memory is bounded by
  ``MAX_GATHER_ELEMS`` per chunk.
- ``kernel``: ``icml26_kernels.block_sparse_attention`` (Triton on CUDA, its reference on CPU).
- ``flex``: PyTorch FlexAttention with a ``BlockMask`` built from the same block mask (compiled
  on CUDA; eager, slow, on CPU — there for exactness tests).

Shapes as everywhere here: ``q [B, H, T, D]``, ``k, v [B, Hkv, S, D]``, ``mask [B|1, H|1, NQ, NK]``
bool, queries aligned to the last ``T`` keys.
"""

from __future__ import annotations

import math

import torch

BACKENDS = ("auto", "gather", "kernel", "flex")
#: largest gathered K (or V) chunk, in elements
MAX_GATHER_ELEMS = 1 << 23


def gather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     block_size: int, scale: float | None = None) -> torch.Tensor:
    """Exact causal attention restricted to the kept blocks, batched over heads and query blocks."""
    b, h, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    bs = block_size
    nq, nk = math.ceil(t / bs), math.ceil(s / bs)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    mask = mask.expand(b, h, nq, nk)
    pad_t, pad_s = nq * bs - t, nk * bs - s
    qb = torch.nn.functional.pad(q, (0, 0, 0, pad_t)).reshape(b, h, nq, bs, d)
    kb = torch.nn.functional.pad(k, (0, 0, 0, pad_s)).reshape(b, hkv, nk, bs, d)
    vb = torch.nn.functional.pad(v, (0, 0, 0, pad_s)).reshape(b, hkv, nk, bs, d)
    counts = mask.sum(-1)  # [B, H, NQ]
    # kept block indices first, in increasing order (stable sort of ~mask)
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)
    out = q.new_zeros(b, h, nq, bs, d)
    bi = torch.arange(b, device=q.device)[:, None, None, None]
    hi = (torch.arange(h, device=q.device) // (h // hkv))[None, :, None, None]
    qoff = s - t
    i0 = 0
    while i0 < nq:
        kmax = max(int(counts[:, :, i0].max()), 1)
        rows = max(1, MAX_GATHER_ELEMS // (b * h * kmax * bs * d))
        i1 = min(nq, i0 + rows)
        kmax = max(int(counts[:, :, i0:i1].max()), 1)
        while i1 - i0 > 1 and b * h * (i1 - i0) * kmax * bs * d > 2 * MAX_GATHER_ELEMS:
            i1 -= 1
            kmax = max(int(counts[:, :, i0:i1].max()), 1)
        idx = order[:, :, i0:i1, :kmax]  # [B, H, R, K]
        kept = torch.arange(kmax, device=q.device) < counts[:, :, i0:i1, None]
        kg = kb[bi, hi, idx].reshape(b, h, i1 - i0, kmax * bs, d)
        vg = vb[bi, hi, idx].reshape(b, h, i1 - i0, kmax * bs, d)
        kpos = (idx[..., None] * bs + torch.arange(bs, device=q.device)).reshape(b, h, i1 - i0, -1)
        qpos = (torch.arange(i0 * bs, i1 * bs, device=q.device) + qoff).reshape(i1 - i0, bs)
        ok = (kept[..., None].expand(*kept.shape, bs).reshape(kpos.shape) & (kpos < s))[..., None, :]
        ok = ok & (kpos[..., None, :] <= qpos[None, None, :, :, None])
        # PyTorch's public fused SDPA on the gathered tiles; a query row with no visible key -> 0
        o = torch.nn.functional.scaled_dot_product_attention(qb[:, :, i0:i1], kg, vg, attn_mask=ok,
                                                             scale=scale)
        out[:, :, i0:i1] = torch.where(ok.any(-1, keepdim=True), o, o.new_zeros(()))
        i0 = i1
    return out.reshape(b, h, nq * bs, d)[:, :, :t]


def flex_attention_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                          block_size: int, scale: float | None = None) -> torch.Tensor:
    """The same computation through PyTorch FlexAttention: a ``BlockMask`` from the kept blocks
    (``from_kv_blocks``) and a causal ``mask_mod`` inside them."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    b, h, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    bs = block_size
    nq, nk = math.ceil(t / bs), math.ceil(s / bs)
    mask = mask.expand(b, h, nq, nk)
    off = s - t

    dense_mask = mask.contiguous()

    def causal(b_, h_, qi, ki):  # causal inside the kept tiles (the tiles also gate the mask)
        return (ki <= qi + off) & dense_mask[b_, h_, qi // bs, ki // bs]

    counts = mask.sum(-1).to(torch.int32)
    idx = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    bm = BlockMask.from_kv_blocks(counts, idx, BLOCK_SIZE=bs, mask_mod=causal, seq_lengths=(t, s))
    if q.is_cuda:
        return _compiled_flex()(q, k, v, block_mask=bm, scale=scale, enable_gqa=hkv != h)
    import warnings

    with warnings.catch_warnings():  # eager CPU FlexAttention warns that it is unfused
        warnings.simplefilter("ignore", UserWarning)
        return flex_attention(q, k, v, block_mask=bm, scale=scale, enable_gqa=hkv != h)


_FLEX = None


def _compiled_flex():
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


def run_blocks(q, k, v, mask, block_size: int, scale: float | None = None,
               backend: str = "auto") -> torch.Tensor:
    """Dispatch: ``auto`` = ``kernel`` (Triton on CUDA; on CPU the kernels package's reference,
    measured faster than ``gather`` on our 2-core machine, see the README)."""
    if backend == "auto":
        backend = "kernel"
    if backend == "gather":
        return gather_attention(q, k, v, mask, block_size, scale)
    if backend == "flex":
        return flex_attention_blocks(q, k, v, mask, block_size, scale)
    from icml26_kernels import block_sparse_attention

    return block_sparse_attention(q, k, v, mask, block_size=block_size, causal=True, scale=scale)
