"""PyTorch reference for ``block_sparse_attention`` — also the CPU path.

It never computes attention on a masked block: for each query block it gathers only the kept key
blocks (every batch and head at once, padded to the row's largest kept count) and attends to them
in fp32. Kept blocks that every query of the row sees whole go through PyTorch's fused CPU flash
kernel (an online softmax that also returns the log-sum-exp); the few blocks that need an element
mask (the causal diagonal, the ragged tail, per-head padding) go through explicit maths; the two
partial softmaxes are merged by their log-sum-exps. Work scales with the number of kept blocks,
not with ``T × S``.
"""

from __future__ import annotations

import math

import torch

#: per-(batch, head) calls replace padding once heads differ by this many whole keys per row
PER_HEAD_MIN_KEYS = 1024


def mask_to_indices(block_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bool ``[B, H, NQ, NK]`` → (``indices [B, H, NQ, K]`` int64 padded with -1, ``counts [B, H, NQ]``).

    Indices of each row are in increasing order; ``K`` is the largest kept count (at least 1).
    """
    counts = block_mask.sum(-1)
    k = max(int(counts.max()) if counts.numel() else 0, 1)
    nk = block_mask.shape[-1]
    # stable sort puts kept blocks first, each row in increasing key-block order
    key = (~block_mask).to(torch.int8)
    order = torch.sort(key, dim=-1, stable=True).indices[..., :k]
    ar = torch.arange(k, device=block_mask.device)
    idx = torch.where(ar < counts[..., None], order, torch.full_like(order, -1))
    return idx if nk else idx[..., :0], counts


def indices_to_mask(indices: torch.Tensor, nk: int) -> torch.Tensor:
    """Index list ``[B, H, NQ, K]`` (−1 = padding) → bool mask ``[B, H, NQ, nk]``."""
    mask = torch.zeros(*indices.shape[:-1], nk + 1, dtype=torch.bool, device=indices.device)
    safe = torch.where(indices < 0, torch.full_like(indices, nk), indices)
    mask.scatter_(-1, safe, True)
    return mask[..., :nk]


def _pad_seq(x: torch.Tensor, length: int) -> torch.Tensor:
    if x.shape[2] == length:
        return x
    pad = x.new_zeros(*x.shape[:2], length - x.shape[2], x.shape[3])
    return torch.cat([x, pad], dim=2)


def _cpu_flash():
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ok: torch.Tensor,
            scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention under an element mask ``ok`` → (normalized out, log-sum-exp); a row that
    sees nothing gives out 0 and log-sum-exp −inf."""
    flash = _cpu_flash()
    if q.device.type == "cpu" and flash is not None:
        bias = torch.zeros(ok.shape, dtype=q.dtype, device=q.device).masked_fill_(~ok, -math.inf)
        out, lse = flash(q, k, v, 0.0, False, attn_mask=bias.expand(*q.shape[:3], k.shape[2]),
                         scale=scale)
        seen = ok.any(-1).expand(lse.shape)
        return out, torch.where(seen, lse, torch.full_like(lse, -math.inf))
    scores = torch.matmul(q * scale, k.transpose(-1, -2)).masked_fill_(~ok, -math.inf)
    m = scores.amax(-1)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(scores - m_safe[..., None])
    denom = p.sum(-1)
    out = torch.matmul(p, v) / torch.where(denom > 0, denom, torch.ones_like(denom))[..., None]
    return out, m_safe + torch.log(denom)  # log(0) = -inf: the row saw nothing


def _full(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Unmasked attention → (out, log-sum-exp); PyTorch's fused flash kernel on CPU."""
    flash = _cpu_flash()
    if q.device.type == "cpu" and flash is not None:
        out, lse = flash(q, k, v, 0.0, False, scale=scale)
        return out, lse
    return _masked(q, k, v, torch.ones((), dtype=torch.bool, device=q.device), scale)


def _merge(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    (oa, la), (ob, lb) = a, b
    m = torch.maximum(la, lb)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(la - m), torch.exp(lb - m)
    tot = wa + wb
    tot = torch.where(tot > 0, tot, torch.ones_like(tot))
    return (oa * (wa / tot)[..., None]) + (ob * (wb / tot)[..., None])


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, indices: torch.Tensor,
            counts: torch.Tensor, block_size: int, causal: bool, scale: float) -> torch.Tensor:
    """``q [B,H,T,D]``, ``k, v [B,Hkv,S,D]``, ``indices [B,H,NQ,K]`` (−1 pads, each row increasing),
    ``counts [B,H,NQ]`` → ``out [B,H,T,D]`` in ``q``'s dtype. Rows that see no key give 0."""
    b, h, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[3]
    bs = block_size
    nq, nk = math.ceil(t / bs), math.ceil(s / bs)
    group = h // hkv
    offset = s - t  # causal alignment: query i sees keys j <= i + (S - T) (bottom-right)
    qf = _pad_seq(q, nq * bs).float().reshape(b, h, nq, bs, d)
    kf = _pad_seq(k, nk * bs).float().reshape(b, hkv, nk, bs, d)
    vf = _pad_seq(v, nk * bs).float().reshape(b, hkv, nk, bs, dv)
    out = torch.zeros(b, h, nq, bs, dv, dtype=torch.float32, device=q.device)
    bidx = torch.arange(b, device=q.device)[:, None, None]
    hidx = (torch.arange(h, device=q.device) // group)[None, :, None]
    local = torch.arange(bs, device=q.device)
    for i in range(nq):
        kmax = int(counts[:, :, i].max()) if counts.numel() else 0
        if kmax == 0:
            continue
        qi = qf[:, :, i]  # [B,H,bs,D]
        idx = indices[:, :, i, :kmax]  # [B,H,C], kept blocks first, increasing
        valid = idx >= 0
        # a kept block is "whole" when every query of this row sees all of its keys; whole blocks
        # form a prefix of each row because the row is sorted
        whole = valid & ((idx + 1) * bs <= s)
        if causal:
            whole &= (idx + 1) * bs - 1 <= i * bs + offset
        n_whole = whole.sum(-1)
        counts_i = counts[:, :, i]
        p = int(n_whole.min())  # the first p kept blocks are whole in every (batch, head)
        safe = idx.clamp(min=0)
        parts = []
        spread = int(n_whole.max()) - p
        if spread * bs < PER_HEAD_MIN_KEYS:
            # one batched call on the blocks every head sees whole; the few extra whole blocks of
            # some heads join the masked remainder below
            n_whole = torch.full_like(n_whole, p)
            if p:
                kb = kf[bidx, hidx, safe[..., :p]].reshape(b, h, p * bs, d)
                vb = vf[bidx, hidx, safe[..., :p]].reshape(b, h, p * bs, dv)
                parts.append(_full(qi, kb, vb, scale))
        else:  # heads keep very different numbers of whole blocks: one call per (batch, head)
            o_w = torch.zeros(b, h, bs, dv, device=q.device)
            l_w = torch.full((b, h, bs), -math.inf, device=q.device)
            for bb in range(b):
                for hh in range(h):
                    n = int(n_whole[bb, hh])
                    if n:
                        sel = safe[bb, hh, :n]
                        kb = kf[bb, hh // group, sel].reshape(1, 1, n * bs, d)
                        vb = vf[bb, hh // group, sel].reshape(1, 1, n * bs, dv)
                        o_, l_ = _full(qi[bb:bb + 1, hh:hh + 1], kb, vb, scale)
                        o_w[bb, hh], l_w[bb, hh] = o_[0, 0], l_[0, 0]
            parts.append((o_w, l_w))
        n_rest = counts_i - n_whole  # kept blocks that need an element mask (diagonal, tail)
        c = int(n_rest.max())
        if c:
            # gather each head's remaining blocks, padded to the longest with -1 (masked out)
            ar = torch.arange(c, device=q.device)
            pos = (n_whole[..., None] + ar).clamp(max=idx.shape[-1] - 1)
            rest_idx = torch.where(ar < n_rest[..., None], torch.gather(idx, -1, pos),
                                   torch.full_like(pos, -1))
            rest = rest_idx.clamp(min=0)
            kb = kf[bidx, hidx, rest].reshape(b, h, c * bs, d)
            vb = vf[bidx, hidx, rest].reshape(b, h, c * bs, dv)
            kpos = (rest[..., None] * bs + local).reshape(b, h, 1, c * bs)
            ok = ((rest_idx >= 0)[..., None] & (kpos.reshape(b, h, c, bs) < s)).reshape(b, h, 1, c * bs)
            if causal:
                ok = ok & (kpos <= (i * bs + local + offset)[:, None])
            parts.append(_masked(qi, kb, vb, ok, scale))
        out[:, :, i] = parts[0][0] if len(parts) == 1 else _merge(parts[0], parts[1])
    return out.reshape(b, h, nq * bs, dv)[:, :, :t].to(q.dtype)
