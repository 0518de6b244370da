"""Triton kernel for ``block_sparse_attention`` (forward, prefill).

One program per (query block, batch × head). It walks the row's list of kept key blocks
(``indices``, ``counts``), each in ``BLOCK_N``-key tiles, and folds every tile into a
FlashAttention-style online softmax with fp32 accumulation; masked blocks are never loaded.
Row and key offsets are int64 (an HF-layout ``[B, T, H, D]`` tensor has a token stride of
``H·D``: int32 products wrap at ``T·H·D ≥ 2^31``). Launch settings come from ``launch_config``
(no autotune, nothing beyond Triton 3.6) so the same launcher runs under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

#: shared memory the launch config may plan for (bytes): below an H100's 228 KB per SM and an
#: A100's 164 KB, leaving room for the compiler's own layout conversions
SMEM_BUDGET = 160 * 1024


def smem_bytes(block: int, block_n: int, block_d: int, elem: int, stages: int) -> int:
    """Estimated shared memory of one program: the query tile plus ``stages`` K and V tiles."""
    return elem * block_d * (block + 2 * stages * block_n)


def launch_config(block: int, d: int, dtype: torch.dtype, budget: int = SMEM_BUDGET) -> dict:
    """``BLOCK_N`` (keys per inner tile), ``num_warps`` and ``num_stages`` for one launch: the
    largest key tile and pipeline depth whose ``smem_bytes`` fit ``budget`` (fp32 at block 128 /
    D 128: a 64-key tile, one stage, 128 KB)."""
    block_d = max(16, triton.next_power_of_2(d))
    elem = torch.empty((), dtype=dtype).element_size()
    num_warps = 4 if block <= 64 else 8
    for block_n in (block, block // 2, 16):
        for stages in (2, 1):
            if block_n >= 16 and smem_bytes(block, block_n, block_d, elem, stages) <= budget:
                return {"BLOCK_N": block_n, "BLOCK_D": block_d, "num_warps": num_warps,
                        "num_stages": stages}
    return {"BLOCK_N": 16, "BLOCK_D": block_d, "num_warps": num_warps, "num_stages": 1}


@triton.jit
def _fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, idx_ptr, cnt_ptr,
                sqb, sqh, sqt, skb, skh, sks, svb, svh, svs, sob, soh, sot,
                sib, sih, siq, scb, sch,
                H, T, S, GROUP, OFFSET, QB0, scale,
                BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                D: tl.constexpr, CAUSAL: tl.constexpr, IEEE: tl.constexpr):
    qb = tl.program_id(0) + QB0
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    rows = qb.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    cols_d = tl.arange(0, BLOCK_D)
    dmask = cols_d < D
    q_base = q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    q = tl.load(q_base + rows[:, None] * sqt + cols_d[None, :],
                mask=(rows[:, None] < T) & dmask[None, :], other=0.0)
    k_base = k_ptr + b.to(tl.int64) * skb + hk.to(tl.int64) * skh
    v_base = v_ptr + b.to(tl.int64) * svb + hk.to(tl.int64) * svh
    m_i = tl.full([BLOCK], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    cnt = tl.load(cnt_ptr + b * scb + h * sch + qb)
    idx_base = idx_ptr + b.to(tl.int64) * sib + h.to(tl.int64) * sih + qb.to(tl.int64) * siq
    qpos = rows + OFFSET
    for j in range(0, cnt):
        kb = tl.load(idx_base + j)
        for n0 in range(0, BLOCK, BLOCK_N):
            kcols = kb.to(tl.int64) * BLOCK + n0 + tl.arange(0, BLOCK_N)
            kmask = kcols < S
            k = tl.load(k_base + kcols[:, None] * sks + cols_d[None, :],
                        mask=kmask[:, None] & dmask[None, :], other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = s * scale
            allowed = kmask[None, :]
            if CAUSAL:
                allowed = allowed & (kcols[None, :] <= qpos[:, None])
            s = tl.where(allowed, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + kcols[:, None] * svs + cols_d[None, :],
                        mask=kmask[:, None] & dmask[None, :], other=0.0)
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    o_base = o_ptr + b.to(tl.int64) * sob + h.to(tl.int64) * soh
    tl.store(o_base + rows[:, None] * sot + cols_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=(rows[:, None] < T) & dmask[None, :])


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, indices: torch.Tensor,
            counts: torch.Tensor, block_size: int, causal: bool, scale: float,
            first_q_block: int = 0) -> torch.Tensor:
    """Same contract as ``reference.forward``. ``first_q_block`` > 0 launches only the query
    blocks from there on (the rows before it are left unwritten: a test hook for long inputs)."""
    b, h, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    idx = indices.to(torch.int32).contiguous()
    cnt = counts.to(torch.int32).contiguous()
    out = torch.empty_like(q)
    nq = math.ceil(t / block_size)
    if t == 0 or b * h == 0 or first_q_block >= nq:
        return out
    cfg = launch_config(block_size, d, q.dtype)
    _fwd_kernel[(nq - first_q_block, b * h)](
        q, k, v, out, idx, cnt,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        idx.stride(0), idx.stride(1), idx.stride(2), cnt.stride(0), cnt.stride(1),
        h, t, s, h // hkv, s - t, first_q_block, float(scale),
        BLOCK=block_size, D=d, CAUSAL=bool(causal), IEEE=q.dtype == torch.float32, **cfg,
    )
    return out
