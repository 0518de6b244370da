"""Flip diagnostics: does training, or the document context, change anything the index stores?

- ``code_flip_rate(codes, ref)``: the share of codes that differ from a reference encoding of the
  same tokens (per byte position, over all codes, and tokens with any byte changed). Against the
  greedy-RQ start (the same quantizer before training: ``u = 0``, same initial codebooks) it counts
  what training changed.
- ``context_flip_rate(model, X, offsets)``: the same trained model encoded with and without the
  document context: the codes the context alone changes.
- ``winner_flip_rate(queries, X, X_hat, offsets, docs)``: how often the argmax document token of a
  query token (its MaxSim "winner") changes from the full-precision vectors ``X`` to the decoded
  ``X_hat`` (design note; 0 for an index that reproduces ``X``'s rankings of tokens).
"""

from __future__ import annotations

import numpy as np
import torch

from .core import doc_index, segment_max


def code_flip_rate(codes: np.ndarray, ref: np.ndarray) -> dict[str, object]:
    """``{"per_byte": [M] shares, "code": share of all n*M codes, "any_byte": share of tokens with
    at least one byte changed}`` of ``codes`` vs ``ref`` (both ``[n, M]``)."""
    codes, ref = np.asarray(codes), np.asarray(ref)
    if codes.shape != ref.shape or codes.ndim != 2:
        raise ValueError(f"codes {codes.shape} and reference {ref.shape} must be the same [n, M]")
    diff = codes != ref
    if diff.size == 0:
        return {"per_byte": [0.0] * codes.shape[1], "code": 0.0, "any_byte": 0.0}
    return {"per_byte": diff.mean(0).astype(float).tolist(), "code": float(diff.mean()),
            "any_byte": float(diff.any(1).mean())}


def greedy_start_codes(model, X: np.ndarray, offsets: np.ndarray, init_books: np.ndarray) -> np.ndarray:
    """Codes of ``model``'s greedy-RQ start: the same architecture with its initial codebooks
    ``init_books`` and the gate output zero (``u = 0``), i.e. plain greedy residual quantization."""
    from .core import CrossQuantizer

    start = CrossQuantizer(model.dim, model.M, model.K, context=model.use_context,
                           context_dim=model.context.rho[1].out_features, hidden=model.u.shape[2])
    with torch.no_grad():
        start.codebooks.copy_(torch.as_tensor(np.asarray(init_books, np.float32)))
        codes, _ = start.encode(torch.as_tensor(np.ascontiguousarray(X, np.float32)),
                                torch.as_tensor(np.asarray(offsets, np.int64)))
    return codes.numpy().astype(np.uint8)


def context_flip_rate(model, X: np.ndarray, offsets: np.ndarray) -> dict[str, object]:
    """``code_flip_rate`` of ``model``'s codes with the document context vs with it zeroed (the
    model is left as it was)."""
    Xt = torch.as_tensor(np.ascontiguousarray(X, np.float32))
    off = torch.as_tensor(np.asarray(offsets, np.int64))
    was = model.use_context
    try:
        with torch.no_grad():
            model.use_context = True
            with_ctx, _ = model.encode(Xt, off)
            model.use_context = False
            without, _ = model.encode(Xt, off)
    finally:
        model.use_context = was
    return code_flip_rate(with_ctx.numpy(), without.numpy())


def segment_argmax(S: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``[Lq, n_tok]`` token scores -> ``[Lq, n_docs]`` row of each document's best token (the
    first one on ties); ``n_tok`` for an empty document."""
    idx = doc_index(offsets)
    best = segment_max(S, offsets, idx)
    pos = torch.arange(S.shape[1], device=S.device).expand_as(S)
    cand = torch.where(S == best[:, idx], pos, torch.full_like(pos, S.shape[1]))
    out = torch.full(best.shape, S.shape[1], dtype=torch.long, device=S.device)
    return out.scatter_reduce(1, idx[None, :].expand_as(S), cand, "amin", include_self=True)


def winner_flip_rate(queries: list[torch.Tensor], X: torch.Tensor, X_hat: torch.Tensor,
                     offsets: np.ndarray, docs: np.ndarray | None = None) -> float:
    """Share of (query token, document) pairs whose winning document token (argmax of
    ``q_i . x_j`` over the document's tokens) differs between ``X`` and ``X_hat``; ``docs``
    ``[n_q, P]`` names each query's documents (default: every document)."""
    from .train import gather_docs

    offsets = np.asarray(offsets, np.int64)
    n_docs = len(offsets) - 1
    flips, total = 0, 0
    for i, Q in enumerate(queries):
        d = np.arange(n_docs) if docs is None else np.asarray(docs[i], np.int64)
        d = d[offsets[d + 1] > offsets[d]]  # a document without tokens has no winner
        rows, off = gather_docs(offsets, d)
        r, o = torch.from_numpy(rows), torch.from_numpy(off)
        a = segment_argmax(Q @ X[r].T, o)
        b = segment_argmax(Q @ X_hat[r].T, o)
        flips += int((a != b).sum())
        total += a.numel()
    return flips / total if total else 0.0
