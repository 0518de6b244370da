"""CrossQ's maths as pure functions and modules (no I/O, no global state).

Shapes: ``d`` token dim, ``M`` codebooks (= bytes per token), ``K`` = 256 codes per codebook,
``X`` document token vectors ``[n_tok, d]`` with ``offsets`` ``[n_docs + 1]`` (document ``j`` owns
rows ``offsets[j]:offsets[j+1]``), a query ``Q`` is ``[Lq, d]``.

- MaxSim (ColBERT): ``S(q, d) = sum_i max_j q_i . x_j``.
- Additive codes [S]: ``x_hat = sum_m C_m[code_m]``; scored by lookup tables (ADC)
  ``T[i, m, k] = q_i . C_m[k]``, so ``q_i . x_hat = sum_m T[i, m, code_m]``.
- Conditional encoder [S + R]: greedy, residual-style; code ``m`` maximises
  ``-||r_{m-1} - C_m[k]||^2 + g_m([e; r_{m-1}; c_d]) . u_{m,k}`` with the DeepSets document context
  ``c_d = rho(mean_j phi(e_j))`` computed at indexing and discarded. Decoding never sees ``c_d``.
- Losses [S + R]: listwise KL from full-precision scores, hard-negative margin preservation.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# --- MaxSim and lookup-table scoring -------------------------------------------------------------


def doc_index(offsets: torch.Tensor) -> torch.Tensor:
    """Document id of every token ``[n_tok]`` from ``offsets [n_docs + 1]``."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(len(lengths), device=offsets.device), lengths)


def segment_max(S: torch.Tensor, offsets: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
    """``[Lq, n_tok]`` token scores -> ``[Lq, n_docs]`` max over each document's tokens
    (``idx`` = ``doc_index(offsets)``, precomputed by callers that repeat the call)."""
    idx = doc_index(offsets) if idx is None else idx
    out = S.new_full((S.shape[0], len(offsets) - 1), float("-inf"))
    return out.scatter_reduce(1, idx[None, :].expand(S.shape[0], -1), S, "amax", include_self=True)


def maxsim(Q: torch.Tensor, X: torch.Tensor, offsets: torch.Tensor,
           q_mask: torch.Tensor | None = None) -> torch.Tensor:
    """MaxSim of one query against every document: ``[n_docs]``."""
    per = segment_max(Q @ X.T, offsets)
    if q_mask is not None:
        per = per * q_mask[:, None]
    return per.sum(0)


def maxsim_many(queries: list[torch.Tensor], X: torch.Tensor, offsets: torch.Tensor,
                max_rows: int = 512) -> torch.Tensor:
    """MaxSim of many queries against every document ``[n_q, n_docs]`` (query tokens batched
    into one matrix product, in chunks of about ``max_rows`` query tokens)."""
    pad = doc_index(offsets)
    out, i = [], 0
    while i < len(queries):
        j, rows = i, 0
        while j < len(queries) and (rows == 0 or rows + len(queries[j]) <= max_rows):
            rows += len(queries[j])
            j += 1
        Q = torch.cat(queries[i:j])
        per = segment_max(Q @ X.T, offsets, pad)  # [rows, n_docs]
        bounds = torch.tensor([0, *np.cumsum([len(q) for q in queries[i:j]])])
        out.extend(per[bounds[a]:bounds[a + 1]].sum(0) for a in range(j - i))
        i = j
    return torch.stack(out) if out else X.new_zeros(0, len(offsets) - 1)


def maxsim_bruteforce(Q: np.ndarray, docs: list[np.ndarray]) -> np.ndarray:
    """Reference MaxSim with explicit loops (float64), for tests."""
    out = np.zeros(len(docs))
    for j, D in enumerate(docs):
        for q in Q.astype(np.float64):
            out[j] += max(float(q @ x) for x in D.astype(np.float64))
    return out


def adc_tables(Q: torch.Tensor, codebooks: torch.Tensor) -> torch.Tensor:
    """``T[i, m, k] = q_i . C_m[k]`` for additive codebooks ``[M, K, d]``: ``[Lq, M, K]``."""
    return torch.einsum("id,mkd->imk", Q, codebooks)


def adc_token_scores(T: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """``sum_m T[i, m, codes[j, m]]`` for tables ``[Lq, M, K]`` and codes ``[n, M]``: ``[Lq, n]``."""
    Lq, M, K = T.shape
    codes = codes.long()
    out = T[:, 0, codes[:, 0]]  # accumulated one codebook at a time: memory [Lq, n], not [Lq, n, M]
    for m in range(1, M):
        out = out + T[:, m, codes[:, m]]
    return out


def additive_decode(codes: torch.Tensor, codebooks: torch.Tensor) -> torch.Tensor:
    """``x_hat[j] = sum_m C_m[codes[j, m]]``: ``[n, d]``. Uses nothing but codes and codebooks."""
    M = codebooks.shape[0]
    return sum(codebooks[m][codes[:, m].long()] for m in range(M))


# --- losses -------------------------------------------------------------------------------------


def listwise_kl(s_fp: torch.Tensor, s_q: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """``KL(softmax(s_fp / tau) || softmax(s_q / tau))`` averaged over rows ``[B, N]`` [S]."""
    p = F.log_softmax(s_fp / tau, dim=-1)
    q = F.log_softmax(s_q / tau, dim=-1)
    return (p.exp() * (p - q)).sum(-1).mean()


def margin_loss(s_fp: torch.Tensor, s_q: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Hard-negative margin preservation [S + R]: for the positive column ``pos[b]`` and every
    other candidate ``n``, ``max(0, (s_fp[p] - s_fp[n]) - (s_q[p] - s_q[n]))``, averaged."""
    rows = torch.arange(s_fp.shape[0], device=s_fp.device)
    gap_fp = s_fp[rows, pos][:, None] - s_fp
    gap_q = s_q[rows, pos][:, None] - s_q
    keep = torch.ones_like(s_fp, dtype=torch.bool)
    keep[rows, pos] = False
    return F.relu(gap_fp - gap_q)[keep].mean()


# --- the CrossQ quantizer ------------------------------------------------------------------------


class ContextEncoder(nn.Module):
    """DeepSets document context ``c_d = rho(mean_j phi(e_j))`` [S]; widths [R]."""

    def __init__(self, dim: int, hidden: int, out: int):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.rho = nn.Sequential(nn.ReLU(), nn.Linear(hidden, out), nn.Tanh())

    def forward(self, X: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Per-document context ``[n_docs, out]``."""
        h = self.phi(X)
        idx = doc_index(offsets)
        n_docs = len(offsets) - 1
        pooled = h.new_zeros(n_docs, h.shape[1]).index_add_(0, idx, h)
        lengths = (offsets[1:] - offsets[:-1]).clamp(min=1).to(h.dtype)
        return self.rho(pooled / lengths[:, None])


class CrossQuantizer(nn.Module):
    """Additive multi-codebook quantizer whose code choice is conditioned on document context.

    ``context=False`` zeroes the context input (the token-wise conditional ablation); with the gate
    output zero (``u = 0`` at initialisation) the encoder is plain greedy residual quantization.
    """

    def __init__(self, dim: int, n_codebooks: int, K: int = 256, *, context: bool = True,
                 context_dim: int = 32, hidden: int = 64):
        super().__init__()
        self.dim, self.M, self.K, self.use_context = dim, n_codebooks, K, context
        self.codebooks = nn.Parameter(torch.zeros(n_codebooks, K, dim))
        self.context = ContextEncoder(dim, hidden, context_dim)
        self.gate = nn.ModuleList(nn.Linear(2 * dim + context_dim, hidden) for _ in range(n_codebooks))
        self.u = nn.Parameter(torch.zeros(n_codebooks, K, hidden))

    def token_context(self, X: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """``c_d`` broadcast to every token ``[n_tok, context_dim]`` (zeros without context)."""
        c = self.context(X, offsets)[doc_index(offsets)]
        return c if self.use_context else torch.zeros_like(c)

    def logits(self, m: int, e: torch.Tensor, r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        C = self.codebooks[m]
        dist = 2 * r @ C.T - (C * C).sum(-1)[None, :]  # -||r - C||^2 up to a per-row constant
        bias = self.gate[m](torch.cat([e, r, c], dim=-1)) @ self.u[m].T
        return dist + bias

    def encode(self, X: torch.Tensor, offsets: torch.Tensor, temperature: float | None = None,
               straight_through: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy conditional encoding. Returns ``(codes [n, M] int64, x_hat [n, d])``.

        ``temperature=None``: hard argmax codes. Otherwise soft assignments
        ``softmax(logits / T)`` (``x_hat`` differentiable); with ``straight_through`` the forward
        pass uses hard codes and the backward pass the soft ones.
        """
        c = self.token_context(X, offsets)
        r = X
        codes, x_hat = [], torch.zeros_like(X)
        for m in range(self.M):
            lg = self.logits(m, X, r, c)
            code = lg.argmax(-1)
            codes.append(code)
            if temperature is None:
                contrib = self.codebooks[m][code]
            else:
                p = F.softmax(lg / temperature, dim=-1)
                if straight_through:
                    hard = F.one_hot(code, self.K).to(p.dtype)
                    p = hard + p - p.detach()
                contrib = p @ self.codebooks[m]
            r = r - contrib
            x_hat = x_hat + contrib
        return torch.stack(codes, dim=1), x_hat

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return additive_decode(codes, self.codebooks)


def residual_kmeans(X: np.ndarray, M: int, K: int, iters: int, seed: int,
                    points_per_centroid: int = 256) -> np.ndarray:
    """Residual k-means initialisation of ``M`` codebooks ``[M, K, d]`` (faiss k-means, each
    stage trained on a sample of at most ``points_per_centroid * K`` residuals, then applied to
    all)."""
    from ._faiss import load_faiss

    faiss = load_faiss()

    R = np.ascontiguousarray(X, dtype=np.float32).copy()
    books = []
    for m in range(M):
        km = faiss.Kmeans(R.shape[1], K, niter=iters, seed=seed + m, verbose=False,
                          max_points_per_centroid=points_per_centroid, min_points_per_centroid=1)
        km.train(R)
        _, assign = km.index.search(R, 1)
        C = km.centroids.astype(np.float32)
        R -= C[assign[:, 0]]
        books.append(C)
    return np.stack(books)
