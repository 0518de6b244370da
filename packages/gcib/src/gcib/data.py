"""Multi-behaviour interaction data: the container, the leave-one-out split, labelled noise
injection and a synthetic generator with ground truth (view ⊇ cart ⊇ buy). NumPy only."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

NOISE_KINDS = ("uniform", "popularity")


@dataclass
class MultiBehaviorData:
    """Edges per behaviour as (users, items) index arrays; ``target`` is the behaviour to predict.

    ``timestamps[b]`` orders the target's interactions for the leave-one-out split; ``noise[b]``
    marks injected (fake) edges; ``user_ids`` / ``item_ids`` are the users' own id strings."""

    n_users: int
    n_items: int
    edges: dict[str, tuple[np.ndarray, np.ndarray]]
    target: str
    timestamps: dict[str, np.ndarray] = field(default_factory=dict)
    noise: dict[str, np.ndarray] = field(default_factory=dict)
    user_ids: list[str] | None = None
    item_ids: list[str] | None = None

    def __post_init__(self) -> None:
        if self.target not in self.edges:
            raise ValueError(f"unknown target behaviour {self.target!r} (behaviours: {', '.join(self.edges)})")
        for b, (u, i) in self.edges.items():
            self.edges[b] = (np.asarray(u, dtype=np.int64), np.asarray(i, dtype=np.int64))
            n = len(self.edges[b][0])
            self.timestamps.setdefault(b, np.arange(n, dtype=np.float64))
            self.noise.setdefault(b, np.zeros(n, dtype=bool))
        self.user_ids = self.user_ids or [str(u) for u in range(self.n_users)]
        self.item_ids = self.item_ids or [str(i) for i in range(self.n_items)]

    @property
    def auxiliary(self) -> list[str]:
        return [b for b in self.edges if b != self.target]

    def counts(self) -> dict[str, int]:
        return {b: len(u) for b, (u, _) in self.edges.items()}


@dataclass
class Split:
    """Training graphs per behaviour plus one valid and one test item per evaluated user."""

    data: MultiBehaviorData
    train: dict[str, tuple[np.ndarray, np.ndarray]]
    train_noise: dict[str, np.ndarray]
    valid: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]


def _keys(u: np.ndarray, i: np.ndarray, n_items: int) -> np.ndarray:
    return u.astype(np.int64) * n_items + i.astype(np.int64)


def leave_one_out(data: MultiBehaviorData) -> Split:
    """Per user with ≥ 3 target interactions: the latest (by timestamp, ties by file order) is the
    test item, the second latest the valid item. Neither pair enters any training graph.
    Training edges come sorted by (user, item)."""
    u, i = data.edges[data.target]
    ts = data.timestamps[data.target]
    order = np.lexsort((np.arange(len(u)), ts, u))  # by user, then time, then file order
    us = u[order]
    last = np.r_[us[1:] != us[:-1], True]
    second = np.r_[last[1:], False] & ~last
    cnt = np.bincount(us, minlength=data.n_users)
    ok = cnt[us] >= 3
    test_idx, valid_idx = order[last & ok], order[second & ok]
    held = np.zeros(len(u), dtype=bool)
    held[test_idx] = held[valid_idx] = True
    held_keys = _keys(np.r_[u[test_idx], u[valid_idx]], np.r_[i[test_idx], i[valid_idx]], data.n_items)
    train, noise = {}, {}
    for b, (bu, bi) in data.edges.items():
        keep = ~np.isin(_keys(bu, bi, data.n_items), held_keys)
        if b == data.target:
            keep &= ~held
        sel = np.flatnonzero(keep)
        sel = sel[np.argsort(_keys(bu[sel], bi[sel], data.n_items), kind="stable")]  # (user, item) order
        train[b] = (bu[sel], bi[sel])
        noise[b] = data.noise[b][sel]
    return Split(data, train, noise, (u[valid_idx], i[valid_idx]), (u[test_idx], i[test_idx]))


def no_holdout(data: MultiBehaviorData) -> Split:
    """Every edge trains (deployment, ``gcib train --all``): no valid and no test item, so training
    runs the whole epoch budget and nothing can be evaluated. Training edges sorted by (user, item)."""
    train, noise = {}, {}
    for b, (bu, bi) in data.edges.items():
        sel = np.argsort(_keys(bu, bi, data.n_items), kind="stable")
        train[b] = (bu[sel], bi[sel])
        noise[b] = data.noise[b][sel]
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return Split(data, train, noise, empty, empty)


def inject_noise(data: MultiBehaviorData, rate: float, kind: str = "uniform",
                 behaviours: list[str] | None = None, seed: int = 0) -> MultiBehaviorData:
    """Add ``round(rate · real edges)`` fake edges to each auxiliary behaviour, labelled as noise.

    A fake pair never coincides with a pair of any behaviour (so it is unambiguously noise);
    ``uniform`` draws users and items uniformly, ``popularity`` draws items ∝ their degree."""
    if kind not in NOISE_KINDS:
        raise ValueError(f"unknown noise kind {kind!r} (uniform or popularity)")
    if not np.isfinite(rate) or rate < 0:
        raise ValueError(f"noise rate must be a finite number >= 0, got {rate}")
    behaviours = data.auxiliary if behaviours is None else list(behaviours)
    for b in behaviours:
        if b not in data.edges:
            raise ValueError(f"unknown behaviour {b!r} (behaviours: {', '.join(data.edges)})")
        if b == data.target:
            raise ValueError(f"noise goes into auxiliary behaviours, not the target {b!r}")
    rng = np.random.default_rng(seed)
    taken = set(np.concatenate([_keys(u, i, data.n_items) for u, i in data.edges.values()]).tolist())
    deg = np.bincount(np.concatenate([i for _, i in data.edges.values()]), minlength=data.n_items)
    p_item = deg / deg.sum() if kind == "popularity" else None
    edges, ts, noise = dict(data.edges), dict(data.timestamps), dict(data.noise)
    for b in behaviours:
        real = int((~data.noise[b]).sum())
        want = int(round(rate * real))
        if want > data.n_users * data.n_items - len(taken):
            raise ValueError(f"noise rate {rate} asks for more fake {b} edges than free pairs")
        new: list[int] = []
        while len(new) < want:
            m = 2 * (want - len(new)) + 16
            cu = rng.integers(0, data.n_users, m)
            ci = rng.choice(data.n_items, m, p=p_item) if p_item is not None else rng.integers(0, data.n_items, m)
            for k in _keys(cu, ci, data.n_items).tolist():
                if k not in taken:
                    taken.add(k)
                    new.append(k)
                    if len(new) == want:
                        break
        k = np.asarray(new, dtype=np.int64)
        u, i = edges[b]
        edges[b] = (np.r_[u, k // data.n_items], np.r_[i, k % data.n_items])
        t = data.timestamps[b]
        lo, hi = (float(t.min()), float(t.max())) if len(t) else (0.0, 1.0)
        ts[b] = np.r_[t, rng.uniform(lo, hi, len(k))]
        noise[b] = np.r_[data.noise[b], np.ones(len(k), dtype=bool)]
    return replace(data, edges=edges, timestamps=ts, noise=noise)


def synthetic(n_users: int = 1000, n_items: int = 800, dim: int = 16, n_buy: int = 6, n_cart: int = 12,
              n_view: int = 30, noise_rate: float = 1.0, noise_kind: str = "popularity",
              seed: int = 0) -> MultiBehaviorData:
    """Latent-preference generator [R]: per user, Gumbel-perturbed preferences ⟨p_u, q_i⟩ + b_i
    rank the items; buy = top ``n_buy``, cart = top ``n_cart`` ⊇ buy, view = top ``n_view`` ⊇ cart
    (all real), then ``noise_rate`` fake edges per real view and cart edge (labelled)."""
    if not n_buy <= n_cart <= n_view <= n_items:
        raise ValueError("need n_buy <= n_cart <= n_view <= n_items")
    rng = np.random.default_rng(seed)
    p = rng.normal(size=(n_users, dim)) / np.sqrt(dim)
    q = rng.normal(size=(n_items, dim))
    bias = rng.normal(scale=0.5, size=n_items)
    keys = p @ q.T + bias + rng.gumbel(size=(n_users, n_items))
    top = np.argsort(-keys, axis=1)[:, :n_view]
    edges, ts = {}, {}
    for b, n in (("view", n_view), ("cart", n_cart), ("buy", n_buy)):
        u = np.repeat(np.arange(n_users), n)
        edges[b] = (u, top[:, :n].ravel())
        ts[b] = rng.uniform(0, 1e6, len(u))
    data = MultiBehaviorData(n_users, n_items, edges, "buy", timestamps=ts)
    return inject_noise(data, noise_rate, noise_kind, ["view", "cart"], seed=seed + 1) if noise_rate else data


def realistic(n_users: int = 1000, n_items: int = 1000, dim: int = 16, views_per_user: float = 40.0,
              activity_sigma: float = 0.8, popularity_exponent: float = 1.2, popularity_weight: float = 1.0,
              affinity: float = 2.5, view_affinity: float = 0.5, browse: float = 1.5,
              cart_bias: float = -3.5, buy_bias: float = -2.5,
              noise_rate: float = 0.0, noise_kind: str = "popularity", seed: int = 0) -> MultiBehaviorData:
    """A view ⊇ cart ⊇ buy log with heavy tails and sampled behaviours (issue 60, 3b) [R].

    - Items: popularity ∝ rank^(−``popularity_exponent``) (Zipf, ranks shuffled); users: the
      number of views is log-normal (median ``views_per_user``, log-sd ``activity_sigma``), so
      both user activity and item popularity are heavy-tailed.
    - Preference s_ui = ``affinity``·⟨p_u, q_i⟩ (p_u, q_i unit-variance normal / √dim).
    - view: ``n_u`` distinct items sampled without replacement with weight
      exp(``popularity_weight``·log pop_i + ``view_affinity``·s_ui) (Gumbel top-``n_u``): browsing
      follows popularity more than taste, plus ``browse``·b_ui, a browsing interest
      (⟨p'_u, q'_i⟩, independent of s) that never drives a cart or a buy.
    - cart ⊆ view: each viewed item is carted with probability σ(``cart_bias`` + s_ui); buy ⊆ cart:
      each carted item is bought with probability σ(``buy_bias`` + s_ui). Buys are sampled from
      preferences (no top-k); views that were not carted are the browsed items.
    - Timestamps: per user a start time, each viewed pair at start + Exp(1 day) and its cart
      and buy later still (view < cart < buy for every pair).
    - ``noise_rate`` fake edges per real view and cart edge, ``uniform`` or ``popularity`` items,
      labelled in ``data.noise`` (``inject_noise``; buy stays clean).
    """
    if n_users < 1 or n_items < 2:
        raise ValueError("need at least 1 user and 2 items")
    if not (views_per_user > 0 and activity_sigma >= 0 and popularity_exponent >= 0):
        raise ValueError("views-per-user must be positive, activity-sigma and popularity-exponent >= 0")
    rng = np.random.default_rng(seed)
    log_pop = -popularity_exponent * np.log(rng.permutation(n_items) + 1.0)
    p = rng.normal(size=(n_users, dim)) / np.sqrt(dim)
    q = rng.normal(size=(n_items, dim))
    s = affinity * (p @ q.T)  # ⟨p_u, q_i⟩ has unit variance
    n_view = np.clip(np.round(views_per_user * np.exp(activity_sigma * rng.normal(size=n_users))),
                     3, n_items - 1).astype(np.int64)
    browsing = (rng.normal(size=(n_users, dim)) / np.sqrt(dim)) @ rng.normal(size=(n_items, dim)).T
    keys = (popularity_weight * log_pop[None, :] + view_affinity * s + browse * browsing
            + rng.gumbel(size=(n_users, n_items)))
    order = np.argsort(-keys, axis=1)
    vu = np.repeat(np.arange(n_users), n_view)
    vi = order[np.arange(n_items)[None, :] < n_view[:, None]]  # row-major: each user's top n_u
    sv = s[vu, vi]
    carted = rng.random(len(vu)) < 1 / (1 + np.exp(-(cart_bias + sv)))
    bought = carted & (rng.random(len(vu)) < 1 / (1 + np.exp(-(buy_bias + sv))))
    day = 86400.0
    t_view = rng.uniform(0, 180 * day, n_users)[vu] + rng.exponential(day, len(vu))
    t_cart = t_view + rng.exponential(day / 24, len(vu))
    t_buy = t_cart + rng.exponential(day / 24, len(vu))
    edges = {"view": (vu, vi), "cart": (vu[carted], vi[carted]), "buy": (vu[bought], vi[bought])}
    ts = {"view": t_view, "cart": t_cart[carted], "buy": t_buy[bought]}
    data = MultiBehaviorData(n_users, n_items, edges, "buy", timestamps=ts)
    return inject_noise(data, noise_rate, noise_kind, ["view", "cart"], seed=seed + 1) if noise_rate else data
