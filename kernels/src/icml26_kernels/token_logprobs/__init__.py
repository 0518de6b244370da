"""Per-token log-probabilities of chosen ids, without materializing the full log-softmax."""

from __future__ import annotations

import torch

from .._dispatch import backend_for
from . import reference


def _impl(backend: str):
    if backend == "triton":
        from . import triton as impl  # Triton is imported only here

        return impl
    return reference


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, ids, ignore_index, backend):  # type: ignore[override]
        out, lse = _impl(backend).forward(logits, ids, ignore_index)
        ctx.save_for_backward(logits, ids, lse)
        ctx.ignore_index, ctx.backend = ignore_index, backend
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        logits, ids, lse = ctx.saved_tensors
        d = _impl(ctx.backend).backward(grad, logits, ids, lse, ctx.ignore_index)
        return d, None, None, None


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, *, ignore_index: int = -100) -> torch.Tensor:
    """``log softmax(logits)[..., ids]`` per position.

    Args:
        logits: ``[B, T, V]`` (or any ``[..., V]``), fp32 / bf16 / fp16.
        ids: ``[B, T]`` (``logits.shape[:-1]``), integer token ids; positions equal to
            ``ignore_index`` give 0 and receive no gradient.

    Returns:
        ``[B, T]`` float32 log-probabilities (accumulated in fp32 whatever the input dtype).
        Differentiable with respect to ``logits``; the gradient has ``logits``' dtype.
    """
    if logits.shape[:-1] != ids.shape:
        raise ValueError(f"ids shape {tuple(ids.shape)} must equal logits.shape[:-1] "
                         f"{tuple(logits.shape[:-1])}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"ids must be int64 or int32, got {ids.dtype}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got {logits.dtype}")
    v = logits.shape[-1]
    if v == 0:
        raise ValueError("empty vocabulary")
    valid = ids[ids != ignore_index]
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= v):
        raise IndexError(f"token ids must lie in [0, {v}) (or equal ignore_index={ignore_index})")
    backend = backend_for(logits, op="token_logprobs")
    flat = logits.reshape(-1, v)
    out = _TokenLogprobs.apply(flat, ids.reshape(-1).long(), ignore_index, backend)
    return out.reshape(ids.shape)


__all__ = ["token_logprobs"]
