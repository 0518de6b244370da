"""PyTorch reference for ``token_logprobs`` — also the CPU path.

Rows are processed in chunks so that at most ``chunk × V`` fp32 values exist at once: the full
``[N, V]`` log-softmax is never materialized.
"""

from __future__ import annotations

import torch

CHUNK_ELEMS = 1 << 24  # ~64 MB of fp32 work per chunk


def _rows_per_chunk(v: int) -> int:
    return max(1, CHUNK_ELEMS // max(v, 1))


def forward(logits: torch.Tensor, ids: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits [N, V]``, ``ids [N]`` → ``(logprobs [N] fp32, lse [N] fp32)``."""
    n, v = logits.shape
    out = torch.zeros(n, dtype=torch.float32, device=logits.device)
    lse = torch.zeros(n, dtype=torch.float32, device=logits.device)
    valid = ids != ignore_index
    safe = torch.where(valid, ids, torch.zeros_like(ids))
    step = _rows_per_chunk(v)
    for s in range(0, n, step):
        x = logits[s:s + step].float()
        lse_c = torch.logsumexp(x, dim=-1)
        picked = x.gather(1, safe[s:s + step, None]).squeeze(1)
        lse[s:s + step] = lse_c
        out[s:s + step] = torch.where(valid[s:s + step], picked - lse_c, torch.zeros_like(lse_c))
    return out, lse


def backward(grad: torch.Tensor, logits: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor,
             ignore_index: int) -> torch.Tensor:
    """d logprob_i / d logits_i = onehot(id_i) − softmax(logits_i), scaled by ``grad [N]``."""
    n, v = logits.shape
    dlogits = torch.empty_like(logits)
    valid = ids != ignore_index
    g = torch.where(valid, grad.float(), torch.zeros_like(grad, dtype=torch.float32))
    safe = torch.where(valid, ids, torch.zeros_like(ids))
    step = _rows_per_chunk(v)
    fp32 = logits.dtype == torch.float32
    for s in range(0, n, step):
        x = logits[s:s + step].float()
        gs = g[s:s + step, None]
        # fp32: work in place in the output slice; otherwise in an fp32 buffer, then cast
        d = dlogits[s:s + step] if fp32 else torch.empty_like(x)
        torch.sub(x, lse[s:s + step, None], out=d)
        d.exp_().mul_(-gs).scatter_add_(1, safe[s:s + step, None], gs)
        if not fp32:
            dlogits[s:s + step] = d.to(logits.dtype)
    return dlogits
