"""Execution backends for the kept blocks (exact softmax attention on them, causal prefill).

- ``fused`` (the CPU default): all (batch, head, query block) units that keep the same number
  of key blocks form one batched call over their gathered K/V blocks, then PyTorch's public
  fused ``F.scaled_dot_product_attention`` (the CPU flash kernel) on ``[G, 1, b, c·b]`` per
  batched call; when every unit of a call has its diagonal block last and block-aligned (the
  usual case: the local band is always kept) one shared ``[b, c·b]`` mask (all ones, causal on
  the last block) serves the whole call; otherwise a per-unit element mask. Exact in fp32;
  bf16 / fp16 inputs are computed in their own dtype, as the model's SDPA computes them.
- ``kernel``: ``icml26_kernels.block_sparse_attention`` (Triton on CUDA, its reference on CPU).
- ``flex``: PyTorch FlexAttention with a ``BlockMask`` built from the same block mask (compiled
  on CUDA; eager, slow, on CPU — there for exactness tests).

Shapes as everywhere here: ``q [B, H, T, D]``, ``k, v [B, Hkv, S, D]``, ``mask [B|1, H|1, NQ, NK]``
bool, queries aligned to the last ``T`` keys.
"""

from __future__ import annotations

import math

import torch

BACKENDS = ("auto", "fused", "kernel", "flex")
#: largest score tile of one batched call (elements); the gathered K/V of a call are d/b of it
MAX_GROUP_ELEMS = 1 << 22
#: the same for ``fused`` (2^17-2^21 measured at 8k-32k: within noise of each other)
MAX_FUSED_ELEMS = 1 << 20


def _units(mask: torch.Tensor, b: int, h: int, hkv: int, nq: int, nk: int, t: int, s: int,
           bs: int):
    """The (batch, head, query block) units sorted by kept-block count: ``counts``, the sort
    ``order``, its runs of equal count, each unit's kept key blocks in increasing order
    (``kidx``), its first K/V block row (``kv_base``) and its first query position."""
    dev = mask.device
    counts = mask.sum(-1).reshape(-1)
    order = torch.argsort(counts, stable=True)
    runs = torch.unique_consecutive(counts[order], return_counts=True)
    kidx = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).reshape(-1, nk)
    unit = torch.arange(b * h * nq, device=dev)
    kv_base = ((unit // (h * nq)) * hkv + (unit // nq) % h // (h // hkv)) * nk
    qfirst = (unit % nq) * bs + (s - t)
    return counts, order, runs, kidx, kv_base, qfirst


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                    block_size: int, scale: float | None = None) -> torch.Tensor:
    """Exact causal attention restricted to the kept blocks through the public fused
    ``F.scaled_dot_product_attention``, in the inputs' dtype (fp32 stays fp32; bf16 / fp16 use
    SDPA's own low-precision path with fp32 accumulation: the model's dense attention at the
    same precision, within 2x of its error, the kernels' tolerance rule; fp64 and others run in
    fp32). Units with the same kept-block count ``c`` form one call on their gathered K/V blocks
    ``[G, 1, c·b, D]``; the mask is one shared ``[b, c·b]`` tensor (every kept block fully
    visible except the block-aligned diagonal, last in the sorted row) when the whole call
    allows it, else each unit's element mask. A query that sees no key gives 0."""
    import torch.nn.functional as F

    b, h, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[3]
    bs, dev = block_size, q.device
    nq, nk = math.ceil(t / bs), math.ceil(s / bs)
    mask = mask.expand(b, h, nq, nk)
    pad = torch.nn.functional.pad
    dt = q.dtype if q.dtype in (torch.bfloat16, torch.float16) else torch.float32
    qb = pad(q.to(dt), (0, 0, 0, nq * bs - t)).reshape(b * h * nq, 1, bs, d)
    kb = pad(k.to(dt), (0, 0, 0, nk * bs - s)).reshape(b * hkv * nk, bs, d)
    vb = pad(v.to(dt), (0, 0, 0, nk * bs - s)).reshape(b * hkv * nk, bs, dv)
    counts, order, runs, kidx, kv_base, qfirst = _units(mask, b, h, hkv, nq, nk, t, s, bs)
    local = torch.arange(bs, device=dev)
    tril = local[None, :] <= local[:, None]  # [bs, bs]: query row, key column
    out = torch.zeros(b * h * nq, 1, bs, dv, device=dev, dtype=dt)
    u0 = 0
    for c, n in zip(runs[0].tolist(), runs[1].tolist()):
        if c == 0:
            u0 += n
            continue
        # the shared mask, additive (a bool mask would be converted on every call)
        shared = torch.zeros(bs, c * bs, device=dev, dtype=dt)
        shared[:, (c - 1) * bs:].masked_fill_(~tril, -math.inf)
        step = max(1, MAX_FUSED_ELEMS // (c * bs * bs))
        for g0 in range(u0, u0 + n, step):
            units = order[g0:min(u0 + n, g0 + step)]
            g = len(units)
            idx = kidx[units, :c]  # [G, c], increasing
            flat = (kv_base[units, None] + idx).reshape(-1)
            kg = kb.index_select(0, flat).view(g, 1, c * bs, d)
            vg = vb.index_select(0, flat).view(g, 1, c * bs, dv)
            qf = qfirst[units]
            full = (idx[:, :-1] + 1) * bs - 1 <= qf[:, None]  # blocks every query sees whole
            if bool(full.all()) and bool((idx[:, -1] * bs == qf).all()) and \
                    bool(((idx[:, -1] + 1) * bs <= s).all()):
                am, empty = shared, None
            else:  # the general case: each unit's own element mask
                kpos = (idx[:, :, None] * bs + local).reshape(g, 1, 1, c * bs)
                qpos = (qf[:, None] + local).reshape(g, 1, bs, 1)
                am = (kpos <= qpos) & (kpos < s)
                empty = ~am.any(-1, keepdim=True)
            o = F.scaled_dot_product_attention(qb.index_select(0, units), kg, vg,
                                               attn_mask=am, scale=scale)
            if empty is not None:
                o = o.masked_fill(empty, 0.0)
            out.index_copy_(0, units, o)
        u0 += n
    return out.reshape(b, h, nq * bs, dv)[:, :, :t].to(q.dtype)


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
    """Dispatch: ``auto`` = ``kernel`` on CUDA (the Triton kernel), ``fused`` elsewhere
    (measured faster than the kernels package's CPU reference, see the README)."""
    if backend == "auto":
        backend = "kernel" if q.is_cuda else "fused"
    if backend == "fused":
        return fused_attention(q, k, v, mask, block_size, scale)
    if backend == "flex":
        return flex_attention_blocks(q, k, v, mask, block_size, scale)
    from icml26_kernels import block_sparse_attention

    return block_sparse_attention(q, k, v, mask, block_size=block_size, causal=True, scale=scale)
