"""The encoder's linear head trained for MaxSim, and CrossQ's light query-side fine-tuning.

Both are contrastive with in-batch negatives on (query, relevant document) training pairs [S + R]:
for a batch of ``b`` queries and their ``b`` positive documents, the scores
``S[i, j] = MaxSim(q_i W, d_j W)`` (rows unit-normalised after the projection) enter a
cross-entropy whose target is the diagonal, at temperature ``tau``.

- ``train_projection``: the head ``W [H, dim]`` on top of frozen encoder token states (the
  MiniLM "mini-ColBERT" of the reproduction; initialised by PCA), both sides projected by ``W``.
- ``finetune_query_projection``: "CrossQ + light fine-tuning" [P]: the *query* head only, against
  the fixed, already compressed documents (decoded codes) of an index, with in-batch and hard
  (teacher top-N) negatives. The index is untouched: only queries are encoded differently.

Pure functions of arrays (no I/O).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional as F


def pad(vectors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, L_max, d]`` zero-padded stack and its mask ``[n, L_max]``."""
    L = max(len(v) for v in vectors)
    out = vectors[0].new_zeros(len(vectors), L, vectors[0].shape[1])
    mask = torch.zeros(len(vectors), L, dtype=torch.bool)
    for i, v in enumerate(vectors):
        out[i, :len(v)] = v
        mask[i, :len(v)] = True
    return out, mask


def maxsim_matrix(Q: torch.Tensor, q_mask: torch.Tensor, D: torch.Tensor,
                  d_mask: torch.Tensor) -> torch.Tensor:
    """MaxSim of every padded query ``[nq, Lq, d]`` against every padded document
    ``[nd, Ld, d]``: ``[nq, nd]``."""
    S = torch.einsum("qid,jkd->qjik", Q, D)
    S = S.masked_fill(~d_mask[None, :, None, :], float("-inf")).amax(-1)
    return (S * q_mask[:, None, :]).sum(-1)


def maxsim_matrix_flat(Q: torch.Tensor, q_of: torch.Tensor, n_q: int, D: torch.Tensor,
                       d_mask: torch.Tensor) -> torch.Tensor:
    """``maxsim_matrix`` with the queries' tokens unpadded: ``Q [sum Lq, d]``, ``q_of`` the query
    of each row; one ``[sum Lq, nd * Ld]`` product (no work on query padding): ``[n_q, nd]``."""
    S = (Q @ D.reshape(-1, D.shape[-1]).T).view(len(Q), D.shape[0], D.shape[1])
    S = S.masked_fill(~d_mask[None], float("-inf")).amax(-1)  # [sum Lq, nd]
    return S.new_zeros(n_q, D.shape[0]).index_add(0, q_of, S)


def _flat(vectors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of every query stacked and the query of each row."""
    lengths = torch.tensor([len(v) for v in vectors])
    return torch.cat(list(vectors)), torch.repeat_interleave(torch.arange(len(vectors)), lengths)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def train_projection(doc_hidden: Sequence[np.ndarray], query_hidden: Sequence[np.ndarray],
                     positives: Sequence[int], W0: np.ndarray, steps: int = 300, batch: int = 32,
                     lr: float = 1e-3, tau: float = 0.05, seed: int = 0) -> np.ndarray:
    """A projection ``[H, dim]`` trained with in-batch contrastive MaxSim from ``W0``.
    ``positives[i]`` is the document (index into ``doc_hidden``) relevant to query ``i``."""
    g = torch.Generator().manual_seed(seed)
    W = torch.nn.Parameter(torch.from_numpy(np.array(W0, np.float32)))
    opt = torch.optim.Adam([W], lr=lr)
    n = len(query_hidden)
    for _ in range(steps if n > 1 else 0):
        idx = torch.randperm(n, generator=g)[:min(batch, n)].tolist()
        Q, q_of = _flat([torch.from_numpy(np.asarray(query_hidden[i], np.float32)) for i in idx])
        D, dm = pad([torch.from_numpy(np.asarray(doc_hidden[positives[i]], np.float32)) for i in idx])
        S = maxsim_matrix_flat(_unit(Q @ W), q_of, len(idx), _unit(D @ W), dm)
        loss = F.cross_entropy(S / tau, torch.arange(len(idx)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return W.detach().numpy().copy()


def finetune_query_projection(query_hidden: Sequence[np.ndarray], positives: Sequence[int],
                              candidates: np.ndarray, doc_vectors: Sequence[np.ndarray],
                              W0: np.ndarray, snapshots: Sequence[int], batch: int = 16,
                              lr: float = 5e-4, tau: float = 0.05,
                              seed: int = 0) -> dict[int, np.ndarray]:
    """The query head fine-tuned against fixed (compressed, decoded) document vectors
    ``doc_vectors``; each query's negatives are its ``candidates`` row (teacher top-N doc ids)
    and the other queries' positives. Returns ``{step: W_q}`` at each of ``snapshots`` (0 = the
    untouched head), so that the number of steps can be chosen on dev."""
    g = torch.Generator().manual_seed(seed)
    W = torch.nn.Parameter(torch.from_numpy(np.array(W0, np.float32)))
    opt = torch.optim.Adam([W], lr=lr)
    out = {0: W.detach().numpy().copy()} if 0 in snapshots else {}
    n = len(query_hidden)
    docs_t = [torch.from_numpy(np.asarray(d, np.float32)) for d in doc_vectors]
    queries_t = [torch.from_numpy(np.asarray(q, np.float32)) for q in query_hidden]
    for step in range(1, max(snapshots, default=0) + 1):
        idx = torch.randperm(n, generator=g)[:min(batch, n)].tolist()
        pool = list(dict.fromkeys([positives[i] for i in idx]
                                  + [int(c) for i in idx for c in candidates[i]]))
        col = {d: j for j, d in enumerate(pool)}
        Q, q_of = _flat([queries_t[i] for i in idx])
        D, dm = pad([docs_t[d] for d in pool])
        S = maxsim_matrix_flat(_unit(Q @ W), q_of, len(idx), D, dm)
        loss = F.cross_entropy(S / tau, torch.tensor([col[positives[i]] for i in idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in snapshots:
            out[step] = W.detach().numpy().copy()
    return out


def project(hidden: Sequence[np.ndarray], W: np.ndarray) -> list[np.ndarray]:
    """Token states through the head, rows unit-normalised (what the encoder does)."""
    out = []
    for h in hidden:
        v = np.asarray(h, np.float32) @ W
        out.append((v / np.linalg.norm(v, axis=1, keepdims=True).clip(min=1e-12)).astype(np.float32))
    return out
