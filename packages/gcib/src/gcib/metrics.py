"""Leave-one-out evaluation in user blocks (never a users × items matrix): full ranking with
training positives filtered, or the MBGCN/CML protocol of 99 sampled negatives."""

from __future__ import annotations

import numpy as np
import torch

from .core import hr_ndcg, rank_of_target

PROTOCOLS = ("full", "sampled99")


def positives_csr(users: np.ndarray, items: np.ndarray, n_users: int, n_items: int):
    """Per-user item sets as a scipy CSR matrix (rows = users)."""
    import scipy.sparse as sp

    m = sp.csr_matrix((np.ones(len(users), dtype=np.float32), (users, items)), shape=(n_users, n_items))
    m.sum_duplicates()
    m.data[:] = 1
    return m


def sample_negatives(users: np.ndarray, positives, n_items: int, n: int = 99,
                     seed: int = 0) -> np.ndarray:
    """``n`` distinct items per user, none of them among ``positives[user]`` (all of the user's
    known target items), drawn with a fixed seed."""
    rng = np.random.default_rng(seed)
    out = np.empty((len(users), n), dtype=np.int64)
    for r, u in enumerate(users):
        pos = positives.indices[positives.indptr[u]:positives.indptr[u + 1]]
        free = n_items - len(pos)
        if free < n:
            raise ValueError(f"user {u} has fewer than {n} items left to sample as negatives")
        picked = np.empty(0, dtype=np.int64)
        while len(picked) < n:
            c = rng.integers(0, n_items, 2 * n)
            c = c[~np.isin(c, pos)]
            picked = np.unique(np.r_[picked, c])
        out[r] = rng.permutation(picked)[:n]
    return out


@torch.no_grad()
def ranks(user_emb: torch.Tensor, item_emb: torch.Tensor, users: np.ndarray, targets: np.ndarray,
          exclude, protocol: str = "full", negatives: np.ndarray | None = None,
          block: int = 256) -> np.ndarray:
    """0-based rank of each user's held-out item: over all items minus ``exclude[user]`` (full),
    or among the item and its 99 ``negatives`` (sampled99)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (full or sampled99)")
    out = np.empty(len(users), dtype=np.int64)
    dev = user_emb.device
    for s in range(0, len(users), block):
        bu = users[s:s + block]
        bt = torch.as_tensor(targets[s:s + block], device=dev)
        hu = user_emb[torch.as_tensor(bu, device=dev)]
        if protocol == "full":
            sc = hu @ item_emb.T
            sub = exclude[bu].tocoo()
            sc[torch.as_tensor(sub.row, device=dev), torch.as_tensor(sub.col, device=dev)] = -torch.inf
            sc[torch.arange(len(bu), device=dev), bt] = (hu * item_emb[bt]).sum(1)
            out[s:s + block] = rank_of_target(sc, bt).cpu().numpy()
        else:
            cand = torch.cat([bt[:, None], torch.as_tensor(negatives[s:s + block], device=dev)], 1)
            sc = (hu[:, None, :] * item_emb[cand]).sum(-1)
            out[s:s + block] = rank_of_target(sc, torch.zeros(len(bu), dtype=torch.long, device=dev)).cpu().numpy()
    return out


def summarize(r: np.ndarray, ks: tuple[int, ...] = (10, 20)) -> dict[str, float]:
    """Mean HR@k and NDCG@k over users from their ranks."""
    t = torch.as_tensor(r)
    out = {}
    for k in ks:
        hit, nd = hr_ndcg(t, k)
        out[f"hr@{k}"], out[f"ndcg@{k}"] = float(hit.mean()), float(nd.mean())
    return out


@torch.no_grad()
def top_k(user_emb: torch.Tensor, item_emb: torch.Tensor, users: np.ndarray, exclude, k: int,
          block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` items and scores per user with ``exclude[user]`` (training positives) removed."""
    items, scores = [], []
    dev = user_emb.device
    for s in range(0, len(users), block):
        bu = users[s:s + block]
        sc = user_emb[torch.as_tensor(bu, device=dev)] @ item_emb.T
        sub = exclude[bu].tocoo()
        sc[torch.as_tensor(sub.row, device=dev), torch.as_tensor(sub.col, device=dev)] = -torch.inf
        v, i = sc.topk(min(k, sc.shape[1]), dim=1)
        items.append(i.cpu().numpy())
        scores.append(v.cpu().numpy())
    return np.concatenate(items), np.concatenate(scores)
