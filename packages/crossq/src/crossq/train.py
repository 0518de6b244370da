"""Fitting CrossQ: residual k-means init, then ranking-aligned training with soft-to-hard annealing.

Training signal [S + R]: for each training query, a candidate set (teacher top-N by full-precision
MaxSim, which also supplies hard negatives), full-precision scores as the teacher, and the
positive (given, or the teacher's top-1). Pure functions: no file I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .config import CODEBOOK_SIZE, CrossQConfig
from .core import (
    CrossQuantizer,
    listwise_kl,
    margin_loss,
    maxsim_many,
    residual_kmeans,
    segment_max,
)


@dataclass
class TrainingSet:
    """Queries ``[Lq, d]`` each, candidates ``[n_q, N]`` doc ids, positive column ``[n_q]`` and
    teacher full-precision MaxSim ``[n_q, N]``."""

    queries: list[torch.Tensor]
    candidates: torch.Tensor
    positive: torch.Tensor
    teacher: torch.Tensor


def gather_docs(offsets: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token rows of ``docs`` (in order) and their new offsets."""
    starts, ends = offsets[docs], offsets[docs + 1]
    lengths = ends - starts
    new_off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)]) if len(docs) else np.zeros(0, np.int64)
    return rows.astype(np.int64), new_off


def fp_scores(queries: list[torch.Tensor], X: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Full-precision MaxSim of every query against every document ``[n_q, n_docs]``."""
    with torch.no_grad():
        return maxsim_many(list(queries), X, offsets)  # query tokens batched into few products


def build_training_set(queries: list[torch.Tensor], X: torch.Tensor, offsets: torch.Tensor,
                       n_candidates: int, positives: list[int] | None = None) -> TrainingSet:
    """Candidates = teacher top-N (hard negatives included); the given positive is forced in."""
    S = fp_scores(queries, X, offsets)
    N = min(n_candidates, S.shape[1])
    top = S.topk(N, dim=1).indices
    pos_col = torch.zeros(len(queries), dtype=torch.long)
    if positives is not None:
        for i, p in enumerate(positives):
            hit = (top[i] == p).nonzero()
            if len(hit):
                pos_col[i] = hit[0, 0]
            else:
                top[i, -1] = p
                pos_col[i] = N - 1
    teacher = torch.gather(S, 1, top)
    return TrainingSet(list(queries), top, pos_col, teacher)


def pseudo_queries(X: torch.Tensor, offsets: np.ndarray, n: int, n_tokens: int,
                   seed: int) -> tuple[list[torch.Tensor], list[int]]:
    """Pseudo-queries [R]: ``n_tokens`` token vectors sampled from a random document (its source
    is the positive), for fitting on a corpus without training pairs."""
    rng = np.random.default_rng(seed)
    docs = rng.choice(len(offsets) - 1, size=min(n, len(offsets) - 1), replace=False)
    qs = []
    for d in docs:
        rows = np.arange(offsets[d], offsets[d + 1])
        pick = rng.choice(rows, size=min(n_tokens, len(rows)), replace=False)
        qs.append(X[torch.as_tensor(np.sort(pick))])
    return qs, [int(d) for d in docs]


def temperature_at(step: int, cfg: CrossQConfig) -> tuple[float, bool]:
    """Soft-to-hard schedule: geometric ``t_start -> t_end``, then straight-through hard codes."""
    soft_steps = max(1, int(round(cfg.steps * (1 - cfg.hard_fraction))))
    if step >= soft_steps:
        return cfg.t_end, True
    frac = step / max(1, soft_steps - 1)
    return float(cfg.t_start * (cfg.t_end / cfg.t_start) ** frac), False


def init_quantizer(X: np.ndarray, cfg: CrossQConfig, seed: int,
                   books: np.ndarray | None = None) -> CrossQuantizer:
    """A quantizer initialised by residual k-means (``books``, when given, is that result, so
    that several variants fitted on the same data and seed share one initialisation)."""
    torch.manual_seed(seed)
    model = CrossQuantizer(X.shape[1], cfg.bytes_per_token, CODEBOOK_SIZE, context=cfg.context,
                           context_dim=cfg.context_dim, hidden=cfg.hidden)
    if books is None:
        books = residual_kmeans(X, cfg.bytes_per_token, CODEBOOK_SIZE, cfg.kmeans_iters, seed)
    with torch.no_grad():
        model.codebooks.copy_(torch.from_numpy(books))
    return model


def ranking_kl(model: CrossQuantizer, X: torch.Tensor, offsets: np.ndarray, data: TrainingSet,
               tau: float = 1.0) -> float:
    """Listwise KL of ``model``'s hard-code MaxSim to the teacher on ``data``'s candidates (each
    query scored against its own candidate documents only): what the listwise loss minimises."""
    offsets = np.asarray(offsets, np.int64)
    scores = []
    with torch.no_grad():
        for q, cand in zip(data.queries, data.candidates.numpy(), strict=True):
            rows, off = gather_docs(offsets, cand)
            offt = torch.from_numpy(off)
            _, x_hat = model.encode(X[torch.from_numpy(rows)], offt)
            scores.append(segment_max(q @ x_hat.T, offt).sum(0))
        return float(listwise_kl(data.teacher, torch.stack(scores), tau))


def fit_crossq(X: np.ndarray, offsets: np.ndarray, data: TrainingSet, cfg: CrossQConfig,
               seed: int = 0, progress: Callable[[int, float], None] | None = None,
               init: np.ndarray | None = None, every: int = 0,
               checkpoint: Callable[[int, CrossQuantizer, float], None] | None = None) -> CrossQuantizer:
    """Residual k-means init, then ``cfg.steps`` Adam steps on
    ``w_kl * KL + w_margin * margin + w_recon * ||x - x_hat||^2`` over soft-to-hard codes.
    ``checkpoint(step, model, mean training loss since the last call)`` runs after every
    ``every`` steps (and at step 0, before training) for learning curves (``crossq.tuning``)."""
    model = init_quantizer(X, cfg, seed, init)
    Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    n_q = len(data.queries)
    window: list[float] = []
    if checkpoint is not None and every > 0:
        checkpoint(0, model, float("nan"))
    for step in range(cfg.steps if n_q else 0):
        T, st = temperature_at(step, cfg)
        batch = rng.choice(n_q, size=min(cfg.queries_per_step, n_q), replace=False)
        cand = data.candidates[batch]  # [B, N]
        docs, local = np.unique(cand.numpy(), return_inverse=True)
        rows, off = gather_docs(offsets, docs)
        Xb, offb = Xt[torch.from_numpy(rows)], torch.from_numpy(off)
        _, x_hat = model.encode(Xb, offb, temperature=T, straight_through=st)
        per_doc = [segment_max(data.queries[b] @ x_hat.T, offb).sum(0) for b in batch]
        s_q = torch.stack(per_doc)[torch.arange(len(batch))[:, None], torch.from_numpy(local.reshape(cand.shape))]
        s_fp = data.teacher[batch]
        loss = (cfg.w_kl * listwise_kl(s_fp, s_q, cfg.tau)
                + cfg.w_margin * margin_loss(s_fp, s_q, data.positive[batch])
                + cfg.w_recon * ((Xb - x_hat) ** 2).sum(-1).mean())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress is not None:
            progress(step, float(loss.detach()))
        if checkpoint is not None and every > 0:
            window.append(float(loss.detach()))
            if (step + 1) % every == 0 or step + 1 == cfg.steps:
                checkpoint(step + 1, model, float(np.mean(window)))
                window = []
    model.eval()
    return model
