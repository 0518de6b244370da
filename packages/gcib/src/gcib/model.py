"""The GCIB model and the one trainer every method shares (the baselines differ only in which
graphs they encode, how auxiliary edges are masked and which loss weights are non-zero)."""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from icml26_shared.train import EarlyStopping

from . import core
from .config import TrainConfig
from .data import Split
from .metrics import positives_csr, ranks, summarize

MASK_MODES = ("expected", 0.3, 0.5, 0.7)  # test-time mask candidates, chosen on the valid item [R]


class GCIBModel(nn.Module):
    """Shared initial embeddings E⁰; LightGCN per behaviour graph; per auxiliary behaviour an edge
    linear edge scorer p_e = σ(w·[z_u⊙z_i; z_u; z_i] + b) reading the (detached) target-encoder embeddings;
    fusion h = Z_tgt + Σ_b w_b Ẑ_b with learned w_b [R]."""

    def __init__(self, split: Split, cfg: TrainConfig):
        super().__init__()
        d = split.data
        self.cfg, self.U, self.I = cfg, d.n_users, d.n_items
        self.aux = d.auxiliary if cfg.graphs == "per-behaviour" else []
        dev = torch.device(cfg.device)
        gen = torch.Generator().manual_seed(cfg.seed)
        self.emb = nn.Parameter(torch.randn(self.U + self.I, cfg.dim, generator=gen) * 0.1)
        self.fuse = nn.Parameter(torch.full((len(self.aux),), 1.0 / max(1, len(self.aux))))
        n_sc = len(self.aux) if cfg.mask == "learned" else 0
        # linear edge scorer on [z_u⊙z_i; z_u; z_i]: weights (3, d) and a bias per behaviour
        # on unit-normalised embeddings; the z_u⊙z_i weights start at ``scorer_init`` (keep ∝ cosine
        # affinity in the target graph), the z_u, z_i weights at small random values [R]
        w = torch.randn(n_sc, 3, cfg.dim, generator=gen) * 0.1
        w[:, 0] = cfg.scorer_init
        if not cfg.train_scorer:  # cosine-prior: keep = σ(scorer_init·cos + logit(keep_init)), frozen
            w[:, 1:] = 0.0
        self.scorer_w = nn.Parameter(w, requires_grad=cfg.train_scorer)
        self.scorer_b = nn.Parameter(torch.full((n_sc,), math.log(cfg.keep_init / (1 - cfg.keep_init))),
                                     requires_grad=cfg.train_scorer)
        t = lambda a: torch.as_tensor(a, device=dev)  # noqa: E731
        tu, ti = split.train[d.target]
        if cfg.graphs in ("merged", "aux"):
            tu, ti = graph_edges(split, cfg)
        self.adj_t = core.to_csr(core.normalized_adjacency(t(tu), t(ti), self.U, self.I))
        self.edges = [(t(split.train[b][0]), t(split.train[b][1])) for b in self.aux]
        self.adj_orig = [core.to_csr(core.normalized_adjacency(u, i, self.U, self.I)) for u, i in self.edges]
        self.masked = [core.MaskedGraph(u, i, self.U, self.I) for u, i in self.edges] if n_sc else []
        self.ui_pattern = []  # user × item CSR patterns for the scorer's ⟨z_u⊙w, z_i⟩ term (SDDMM)
        for u, i in self.edges if n_sc else []:
            crow = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), torch.bincount(u, minlength=self.U).cumsum(0)])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.ui_pattern.append(torch.sparse_csr_tensor(crow, i, torch.zeros(len(u), device=dev), (self.U, self.I)))
        self.random_masks = []
        if cfg.mask == "random":
            keep = cfg.random_keep or (1.0,) * len(self.aux)
            for (u, _), k in zip(self.edges, keep, strict=True):
                self.random_masks.append((torch.rand(len(u), generator=gen) < k).float().to(dev))
            self.adj_rand = [core.to_csr(core.normalized_adjacency(u, i, self.U, self.I, m))
                             for (u, i), m in zip(self.edges, self.random_masks, strict=True)]
        self.to(dev)

    def keep_logits(self, b: int, z_t: torch.Tensor, normalized: bool = False) -> torch.Tensor:
        """Keep logits of behaviour ``b``'s edges from the target embeddings ``z_t`` (unit-normalised
        here unless ``normalized``: ``encode`` normalises once for every behaviour)."""
        u, i = self.edges[b]
        w = self.scorer_w[b]
        if not normalized:
            z_t = torch.nn.functional.normalize(z_t, dim=1)
        node = z_t @ w[1:].T  # (U+I, 2): the z_u and z_i terms, computed per node
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            had = torch.sparse.sampled_addmm(self.ui_pattern[b], z_t[: self.U] * w[0], z_t[self.U:].T, beta=0.0).values()
        # index_select (backward: index_add) rather than node[u, 0] (backward: index_put with
        # accumulate, several times slower on CPU); same values, same gradients (issue 60, item 5)
        return had + node[:, 0].index_select(0, u) + node[self.U:, 1].index_select(0, i) + self.scorer_b[b]

    def encode(self, mask_mode: str | float = "sample", gen: torch.Generator | None = None):
        """(fused h, Z_tgt, [Ẑ_b], [keep probabilities p_b or None]). ``mask_mode``: "sample"
        (Gumbel-sigmoid, training), "expected" (p as edge weights) or a threshold (p ≥ t kept)."""
        L = self.cfg.layers
        z_t = core.propagate(self.adj_t, self.emb, L)
        zs, probs = [], []
        z_n = torch.nn.functional.normalize(z_t.detach(), dim=1) if self.cfg.mask == "learned" else None
        for b in range(len(self.aux)):
            p = None
            if self.cfg.mask == "learned":
                logits = self.keep_logits(b, z_n, normalized=True)
                p = torch.sigmoid(logits)
                if mask_mode == "sample":
                    w = core.gumbel_sigmoid(logits, self.cfg.mask_temp, gen)
                elif mask_mode == "expected":
                    w = p
                else:
                    w = (p >= float(mask_mode)).float()
                zs.append(self.masked[b].propagate(w, self.emb, L))
                probs.append(p)
                continue
            elif self.cfg.mask == "random":
                adj = self.adj_rand[b]
            else:
                adj = self.adj_orig[b]
            zs.append(core.propagate(adj, self.emb, L))
            probs.append(p)
        h = z_t + sum(w * z for w, z in zip(self.fuse, zs, strict=True)) if zs else z_t
        return h, z_t, zs, probs


@dataclass
class TrainResult:
    model: GCIBModel
    mask_mode: str | float
    best_epoch: int
    epochs_run: int
    seconds_per_epoch: float
    valid: dict[str, float]
    history: list[float] = field(default_factory=list)
    #: the epoch where early stopping fired (None: the whole budget ran)
    stopped_at: float | None = None
    #: per-epoch curves: mean training loss terms (bpr, reg, gib, infonce) and valid hr@10, ndcg@10
    curves: dict[str, list[float]] = field(default_factory=dict)


def graph_edges(split: Split, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The (user, item) training edges of the encoded graph, which are also the BPR positives of
    ``lightgcn-aux``: the target's; every behaviour's merged (``lightgcn-merged``); or the auxiliary
    behaviours' merged (``lightgcn-aux``, the pilot's auxiliary-only arm)."""
    d = split.data
    if cfg.graphs == "target" or cfg.graphs == "per-behaviour":
        return split.train[d.target]
    parts = [split.train[b] for b in d.edges if cfg.graphs == "merged" or b != d.target]
    if not parts:
        raise ValueError("lightgcn-aux needs at least one auxiliary behaviour")
    keys = np.unique(np.concatenate([u * d.n_items + i for u, i in parts]))
    return keys // d.n_items, keys % d.n_items


def _neg_sample(users: np.ndarray, pos_keys: np.ndarray, n_items: int, rng) -> np.ndarray:
    neg = rng.integers(0, n_items, len(users))
    for _ in range(5):
        k = users * n_items + neg
        at = np.minimum(np.searchsorted(pos_keys, k), len(pos_keys) - 1)
        bad = pos_keys[at] == k
        if not bad.any():
            break
        neg[bad] = rng.integers(0, n_items, int(bad.sum()))
    return neg


def _losses(model: GCIBModel, u, i, j, gen, terms: dict[str, float] | None = None) -> torch.Tensor:
    """The trainer's loss on one batch; ``terms`` (if given) accumulates each term's value
    (bpr, reg, gib, infonce; the GIB and InfoNCE summed over behaviours before their weights)."""
    cfg = model.cfg

    def note(name: str, value: torch.Tensor) -> None:
        if terms is not None:
            terms[name] = terms.get(name, 0.0) + float(value.detach())
    h, z_t, zs, probs = model.encode("sample", gen)
    U = model.U
    # index_select: its backward is index_add, several times faster on CPU than the index_put
    # (accumulate) behind h[u]; same values and gradients (issue 60, item 5)
    hu, hi, hj = (h.index_select(0, x) for x in (u, U + i, U + j))
    loss = core.bpr_loss((hu * hi).sum(1), (hu * hj).sum(1))
    note("bpr", loss)
    e = model.emb
    l2 = sum(e.index_select(0, x).pow(2).sum() for x in (u, U + i, U + j)) / (2 * len(u))
    note("reg", l2)
    loss = loss + cfg.reg * l2
    if not zs:
        return loss
    n = cfg.hsic_nodes // 2
    uniq_u, uniq_i = torch.unique(u), torch.unique(i)  # once each (was computed twice)
    uu = uniq_u[torch.randperm(len(uniq_u), generator=gen)[:n]]
    ii = U + uniq_i[torch.randperm(len(uniq_i), generator=gen)[:n]]
    nodes = torch.cat([uu, ii])
    for b, zb in enumerate(zs):
        if cfg.gib_weight > 0:
            with torch.no_grad():
                z_orig = core.propagate(model.adj_orig[b], model.emb, cfg.layers)
            gib = (core.normalized_hsic(zb[nodes], z_orig[nodes], cfg.hsic_kernel)
                   - cfg.gib_target_weight * core.normalized_hsic(zb[nodes], z_t[nodes], cfg.hsic_kernel))
            note("gib", gib / len(zs))
            loss = loss + cfg.gib_weight * gib / len(zs)
        if cfg.cl_weight > 0:
            cl = core.info_nce(zb[uu], z_t[uu], cfg.cl_temp) + core.info_nce(zb[ii], z_t[ii], cfg.cl_temp)
            note("infonce", cl / len(zs))
            loss = loss + cfg.cl_weight * cl / len(zs)
        if cfg.keep_reg > 0 and probs[b] is not None:
            loss = loss + cfg.keep_reg * probs[b].mean() / len(zs)
    return loss


def evaluate(model: GCIBModel, split: Split, which: str = "valid", protocol: str = "full",
             mask_mode: str | float = "expected", negatives: np.ndarray | None = None) -> dict[str, float]:
    """HR/NDCG@{10,20} on the valid or test item; test filters training positives and the valid item."""
    model.eval()
    with torch.no_grad():
        h = model.encode(mask_mode)[0]
    return summarize(split_ranks(h[: model.U], h[model.U:], split, which, protocol, negatives))


def split_ranks(user_emb: torch.Tensor, item_emb: torch.Tensor, split: Split, which: str = "valid",
                protocol: str = "full", negatives: np.ndarray | None = None) -> np.ndarray:
    """0-based rank of each evaluated user's valid or test item under scores ⟨user_emb, item_emb⟩
    (test filters the training positives and the valid item), in ``split.valid``/``split.test`` order."""
    d = split.data
    users, items = split.valid if which == "valid" else split.test
    tu, ti = split.train[d.target]
    if which == "test":
        tu, ti = np.r_[tu, split.valid[0]], np.r_[ti, split.valid[1]]
    excl = positives_csr(tu, ti, d.n_users, d.n_items)
    return ranks(user_emb, item_emb, users, items, excl, protocol, negatives)


def train(split: Split, cfg: TrainConfig, progress=None) -> TrainResult:
    """Adam on BPR (+ GIB + InfoNCE); keep the epoch with the best valid HR@10 (full ranking),
    then pick the test-time mask mode on the valid item."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    rng = np.random.default_rng(cfg.seed)
    model = GCIBModel(split, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    d = split.data
    tu, ti = graph_edges(split, cfg) if cfg.graphs == "aux" else split.train[d.target]
    pos_keys = np.sort(tu * d.n_items + ti)
    dev = torch.device(cfg.device)
    best_state, history, t_train = None, [], 0.0
    curves: dict[str, list[float]] = {}
    stopper = EarlyStopping(patience=cfg.patience, mode="max")
    epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        t0 = time.perf_counter()
        perm = rng.permutation(len(tu))
        terms: dict[str, float] = {}
        steps = 0
        for s in range(0, len(perm), cfg.batch_size):
            b = perm[s:s + cfg.batch_size]
            j = _neg_sample(tu[b], pos_keys, d.n_items, rng)
            u, i, jj = (torch.as_tensor(x, device=dev) for x in (tu[b], ti[b], j))
            opt.zero_grad()
            _losses(model, u, i, jj, gen, terms).backward()
            opt.step()
            steps += 1
        t_train += time.perf_counter() - t0
        for k, v in terms.items():
            curves.setdefault(f"train {k}", []).append(v / max(steps, 1))
        if len(split.valid[0]) == 0:  # nothing held out (train --all): the whole budget, last epoch kept
            if progress:
                progress(epoch, float("nan"))
            continue
        ev = evaluate(model, split, "valid")
        hr = ev["hr@10"]
        history.append(hr)
        curves.setdefault("valid hr@10", []).append(hr)
        curves.setdefault("valid ndcg@10", []).append(ev["ndcg@10"])
        if progress:
            progress(epoch, hr)
        stop = stopper.step(hr, at=epoch)
        if stopper.improved:
            best_state = copy.deepcopy(model.state_dict())
        if stop:
            break
    if len(split.valid[0]) == 0:  # train --all: no selection possible; the expected mask
        return TrainResult(model, "expected", epoch, epoch, t_train / max(epoch, 1), {}, history, None, curves)
    model.load_state_dict(best_state)
    best_epoch = int(stopper.best_at)
    modes = MASK_MODES if cfg.mask == "learned" else ("expected",)
    scored = [(evaluate(model, split, "valid", mask_mode=m), m) for m in modes]
    valid, mode = max(scored, key=lambda x: (x[0]["hr@10"], x[0]["ndcg@10"]))
    return TrainResult(model, mode, best_epoch, epoch, t_train / max(epoch, 1), valid, history,
                       stopper.stopped_at, curves)


@torch.no_grad()
def keep_probabilities(model: GCIBModel) -> dict[str, np.ndarray]:
    """Test-time keep probability of every training edge of each auxiliary behaviour (learned
    masks only; 1 for unmasked graphs, the fixed 0/1 draw for random pruning)."""
    model.eval()
    _, _, _, probs = model.encode("expected")
    out = {}
    for b, name in enumerate(model.aux):
        if probs[b] is not None:
            out[name] = probs[b].cpu().numpy()
        elif model.random_masks:
            out[name] = model.random_masks[b].cpu().numpy()
        else:
            out[name] = np.ones(len(model.edges[b][0]), dtype=np.float32)
    return out


def kept_mask(model: GCIBModel, mask_mode: str | float) -> dict[str, np.ndarray]:
    """Which edges the test-time mask keeps (the expected mask counts p ≥ 0.5 as kept)."""
    thr = 0.5 if mask_mode == "expected" else float(mask_mode)
    return {b: p >= thr for b, p in keep_probabilities(model).items()}
