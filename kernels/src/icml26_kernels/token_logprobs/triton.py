"""Triton kernels for ``token_logprobs``: one program per row, an online log-sum-exp over vocabulary
blocks (forward) and a recomputed softmax (backward). Configs are explicit (no autotune) so the
same launchers run under ``TRITON_INTERPRET=1``."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd_kernel(logits_ptr, ids_ptr, out_ptr, lse_ptr, stride_row, V, ignore_index,
                BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    tid = tl.load(ids_ptr + row)
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_V], tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes that have seen only -inf: subtract 0 instead, so exp gives 0 and never inf - inf
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    m_all = tl.max(m, axis=0)
    s_all = tl.sum(s * tl.exp(m - m_all), axis=0)
    lse = m_all + tl.log(s_all)
    valid = tid != ignore_index
    safe = tl.where(valid, tid, 0)
    picked = tl.load(base + safe).to(tl.float32)
    tl.store(lse_ptr + row, lse)
    tl.store(out_ptr + row, tl.where(valid, picked - lse, 0.0))


@triton.jit
def _bwd_kernel(grad_ptr, logits_ptr, ids_ptr, lse_ptr, dlogits_ptr, stride_row, stride_drow, V,
                ignore_index, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    dbase = dlogits_ptr + row.to(tl.int64) * stride_drow
    tid = tl.load(ids_ptr + row)
    valid = tid != ignore_index
    g = tl.where(valid, tl.load(grad_ptr + row).to(tl.float32), 0.0)
    lse = tl.load(lse_ptr + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < V
        x = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
        d = -tl.exp(x - lse) * g + tl.where(cols == tid, g, 0.0)
        tl.store(dbase + cols, d.to(dlogits_ptr.dtype.element_ty), mask=mask)


def _block(v: int) -> int:
    return min(4096, triton.next_power_of_2(v))


def forward(logits: torch.Tensor, ids: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    n, v = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    ids = ids.contiguous()
    out = torch.empty(n, dtype=torch.float32, device=logits.device)
    lse = torch.empty(n, dtype=torch.float32, device=logits.device)
    if n:
        _fwd_kernel[(n,)](logits, ids, out, lse, logits.stride(0), v, ignore_index,
                          BLOCK_V=_block(v), num_warps=8 if v >= 8192 else 4)
    return out, lse


def backward(grad: torch.Tensor, logits: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor,
             ignore_index: int) -> torch.Tensor:
    n, v = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    dlogits = torch.empty_like(logits)
    if n:
        _bwd_kernel[(n,)](grad.contiguous(), logits, ids.contiguous(), lse, dlogits,
                          logits.stride(0), dlogits.stride(0), v, ignore_index,
                          BLOCK_V=_block(v), num_warps=8 if v >= 8192 else 4)
    return dlogits
