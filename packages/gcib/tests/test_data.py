"""Data: the split leaks nothing, noise labels are exact, the generator nests, seeds determine all;
metrics agree with icml26_shared's reference and sampled-99 never draws a positive."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gcib.data import inject_noise, leave_one_out, realistic, synthetic
from gcib.denoise import auroc
from gcib.io import from_frame
from gcib.metrics import positives_csr, ranks, sample_negatives, summarize

from icml26_shared.eval import ndcg_at_k, recall_at_k


def _keys(u, i, n):
    return set((u * n + i).tolist())


@pytest.fixture(scope="module")
def data():
    return synthetic(120, 140, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=3)


def test_generator_nests_and_is_deterministic(data):
    n = data.n_items
    buy, cart, view = (_keys(*data.edges[b], n) for b in ("buy", "cart", "view"))
    assert buy <= cart <= view and len(buy) < len(cart) < len(view)
    again = synthetic(120, 140, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=3)
    for b in data.edges:
        assert np.array_equal(data.edges[b][0], again.edges[b][0]) and np.array_equal(data.edges[b][1], again.edges[b][1])
    other = synthetic(120, 140, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=4)
    assert _keys(*other.edges["buy"], n) != buy
    noisy = synthetic(120, 140, n_buy=5, n_cart=8, n_view=14, noise_rate=1.0, seed=3)
    real_view = _keys(*[x[~noisy.noise["view"]] for x in noisy.edges["view"]], n)
    assert real_view == view  # the noise-free part is the clean generator's


@pytest.fixture(scope="module")
def real_like():
    return realistic(1000, 1000, seed=5)


def test_realistic_generator_nests_with_browsed_views_and_orders_time(real_like):
    d, n = real_like, real_like.n_items
    buy, cart, view = (_keys(*d.edges[b], n) for b in ("buy", "cart", "view"))
    assert buy <= cart <= view
    assert len(view) > 2 * len(cart) and len(cart) > len(buy) > 0  # view >> cart > buy: browsed items
    for b in d.edges:  # one edge per pair and behaviour
        assert len(_keys(*d.edges[b], n)) == len(d.edges[b][0])
    t = {b: dict(zip((d.edges[b][0] * n + d.edges[b][1]).tolist(), d.timestamps[b].tolist(), strict=True))
         for b in d.edges}
    assert all(t["view"][k] < t["cart"][k] for k in cart)
    assert all(t["cart"][k] < t["buy"][k] for k in buy)


def test_realistic_generator_is_heavy_tailed(real_like):
    views = np.sort(np.bincount(real_like.edges["view"][1], minlength=real_like.n_items))[::-1]
    assert views[: real_like.n_items // 10].sum() > 0.4 * views.sum()  # top 10% of items > 40% of views
    act = np.bincount(real_like.edges["view"][0], minlength=real_like.n_users)
    assert act.max() > 4 * np.median(act)  # user activity too
    flat = realistic(1000, 1000, popularity_exponent=0.0, popularity_weight=0.0, seed=5)
    views0 = np.sort(np.bincount(flat.edges["view"][1], minlength=1000))[::-1]
    assert views0[:100].sum() < 0.3 * views0.sum()  # the tail comes from the popularity setting


def test_realistic_buys_are_sampled_not_a_top_k(real_like):
    per_user = np.bincount(real_like.edges["buy"][0], minlength=real_like.n_users)
    assert len(np.unique(per_user)) > 5  # buys per user vary (a top-k gives one count)


@pytest.mark.parametrize("kind", ["uniform", "popularity"])
def test_realistic_noise_is_labelled_exactly_and_deterministic(kind):
    clean = realistic(300, 400, seed=5)
    noisy = realistic(300, 400, noise_rate=1.0, noise_kind=kind, seed=5)
    n = noisy.n_items
    assert not noisy.noise["buy"].any()
    real_pairs = set().union(*(_keys(*clean.edges[b], n) for b in clean.edges))
    for b in ("view", "cart"):
        lab = noisy.noise[b]
        u, i = noisy.edges[b]
        assert _keys(u[~lab], i[~lab], n) == _keys(*clean.edges[b], n)  # real part = the clean log
        assert lab.sum() == len(clean.edges[b][0])  # eta = 1: one fake per real edge
        assert not (_keys(u[lab], i[lab], n) & real_pairs)  # a fake never is a real pair
    again = realistic(300, 400, noise_rate=1.0, noise_kind=kind, seed=5)
    for b in noisy.edges:
        assert np.array_equal(noisy.edges[b][1], again.edges[b][1])
        assert np.array_equal(noisy.timestamps[b], again.timestamps[b])
    assert _keys(*realistic(300, 400, seed=6).edges["buy"], n) != _keys(*clean.edges["buy"], n)


@pytest.mark.parametrize("kind", ["uniform", "popularity"])
def test_noise_labels_match_injected_edges_exactly(data, kind):
    noisy = inject_noise(data, 0.7, kind, seed=1)
    n = data.n_items
    for b in data.auxiliary:
        u, i = noisy.edges[b]
        flag = noisy.noise[b]
        assert flag.sum() == round(0.7 * len(data.edges[b][0]))
        assert _keys(u[~flag], i[~flag], n) == _keys(*data.edges[b], n)  # real edges unchanged
        fake = _keys(u[flag], i[flag], n)
        assert len(fake) == flag.sum()  # distinct
        every = set().union(*(_keys(*data.edges[c], n) for c in data.edges))
        assert not fake & every  # never a real pair of any behaviour
    assert np.array_equal(noisy.edges["buy"][0], data.edges["buy"][0])  # the target stays clean
    again = inject_noise(data, 0.7, kind, seed=1)
    assert all(np.array_equal(again.edges[b][1], noisy.edges[b][1]) for b in data.edges)


def test_popularity_noise_prefers_popular_items(data):
    pop = inject_noise(data, 2.0, "popularity", seed=0)
    uni = inject_noise(data, 2.0, "uniform", seed=0)
    deg = np.bincount(np.concatenate([i for _, i in data.edges.values()]), minlength=data.n_items)
    mean_deg = lambda d: deg[d.edges["view"][1][d.noise["view"]]].mean()  # noqa: E731
    assert mean_deg(pop) > 1.2 * mean_deg(uni)


def test_split_leaks_no_valid_or_test_pair_and_holds_out_the_latest():
    d = inject_noise(synthetic(80, 120, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=0), 1.0, seed=0)
    s = leave_one_out(d)
    n = d.n_items
    held = _keys(*s.valid, n) | _keys(*s.test, n)
    for b in d.edges:
        assert not _keys(*s.train[b], n) & held, b
    assert len(s.test[0]) == d.n_users and not _keys(*s.valid, n) & _keys(*s.test, n)
    u, i = d.edges["buy"]
    ts = d.timestamps["buy"]
    for user, item in zip(*s.test, strict=True):
        mine = u == user
        assert i[mine][np.argmax(ts[mine])] == item
    total = sum(len(x[0]) for x in d.edges.values())
    assert sum(len(x[0]) for x in s.train.values()) < total


def test_loader_indexes_strings_and_dedupes():
    d = from_frame(["a", "a", "b", "b", "b", "a", "a"], ["x", "y", "x", "y", "z", "x", "z"],
                   ["buy", "buy", "buy", "view", "buy", "view", "buy"], np.arange(7.0), "buy")
    assert d.user_ids == ["a", "b"] and d.item_ids == ["x", "y", "z"]
    assert d.auxiliary == ["view"] and d.counts() == {"view": 2, "buy": 5}


def test_block_metrics_match_shared_reference_and_sampled99_avoids_positives():
    g = torch.Generator().manual_seed(0)
    U, NI = 30, 150
    ue, ie = torch.randn(U, 8, generator=g), torch.randn(NI, 8, generator=g)
    rng = np.random.default_rng(0)
    pu = np.repeat(np.arange(U), 6)
    pi = np.concatenate([rng.choice(NI, 6, replace=False) for _ in range(U)])
    excl = positives_csr(pu, pi, U, NI)
    users = np.arange(U)
    targets = np.array([next(x for x in rng.permutation(NI) if x not in set(pi[pu == u])) for u in users])
    r = ranks(ue, ie, users, targets, excl, "full", block=7)
    m = summarize(r)
    hr, nd = [], []
    for u in users:
        s = (ue[u] @ ie.T).numpy()
        s[pi[pu == u]] = -np.inf
        order = [x for x in np.argsort(-s, kind="stable") if x not in set(pi[pu == u])]
        hr.append(recall_at_k(order, {targets[u]}, 10))
        nd.append(ndcg_at_k(order, {targets[u]}, 10))
    assert m["hr@10"] == pytest.approx(np.mean(hr)) and m["ndcg@10"] == pytest.approx(np.mean(nd))
    allpos = positives_csr(np.r_[pu, users], np.r_[pi, targets], U, NI)
    negs = sample_negatives(users, allpos, NI, 99, seed=1)
    for u in users:
        assert len(set(negs[u])) == 99 and not set(negs[u]) & set(allpos[u].indices)
    rs = ranks(ue, ie, users, targets, excl, "sampled99", negs)
    assert (rs <= 99).all() and (rs <= r).all()  # fewer competitors than full ranking


def test_auroc_matches_sklearn():
    roc_auc_score = pytest.importorskip("sklearn.metrics").roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.random(300) < 0.4
    s = np.round(rng.random(300) + 0.3 * y, 2)  # with ties
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s))
