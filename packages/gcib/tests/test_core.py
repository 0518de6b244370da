"""The maths: normalised adjacency, LightGCN propagation, the mask identity, HSIC, InfoNCE, BPR."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gcib import core
from gcib.config import TrainConfig
from gcib.data import leave_one_out, synthetic
from gcib.model import GCIBModel


def _graph(seed=0, U=7, NI=9, E=30):
    g = torch.Generator().manual_seed(seed)
    keys = torch.unique(torch.randint(0, U * NI, (E,), generator=g))
    return keys // NI, keys % NI, U, NI


def test_normalized_adjacency_symmetric_with_spectrum_in_unit_interval():
    u, i, U, NI = _graph()
    w = torch.rand(len(u), generator=torch.Generator().manual_seed(1)) + 0.1
    for weights in (None, w):
        A = core.normalized_adjacency(u, i, U, NI, weights).to_dense().double()
        assert torch.allclose(A, A.T)
        ev = torch.linalg.eigvalsh(A)
        assert ev.min() >= -1 - 1e-9 and ev.max() <= 1 + 1e-9
        assert ev.max() == pytest.approx(1.0, abs=1e-6)  # bipartite: ±1 are eigenvalues
        assert ev.min() == pytest.approx(-1.0, abs=1e-6)


def test_constant_degree_propagation_matches_closed_form():
    # a complete bipartite K_{U,I}: Â = J/√(UI) off-diagonal blocks; a constant signal c on users
    # and c' on items maps to (√(I/U) c', √(U/NI) c)
    U, NI = 4, 6
    uu, ii = torch.meshgrid(torch.arange(U), torch.arange(NI), indexing="ij")
    A = core.normalized_adjacency(uu.ravel(), ii.ravel(), U, NI)
    E = torch.cat([torch.full((U, 3), 2.0), torch.full((NI, 3), 5.0)])
    out = core.propagate(core.to_csr(A), E, 2)
    a, b = 2.0, 5.0
    l1 = (math.sqrt(NI / U) * b, math.sqrt(U / NI) * a)
    l2 = (math.sqrt(NI / U) * l1[1], math.sqrt(U / NI) * l1[0])
    assert torch.allclose(out[:U], torch.full((U, 3), (a + l1[0] + l2[0]) / 3))
    assert torch.allclose(out[U:], torch.full((NI, 3), (b + l1[1] + l2[1]) / 3))


def test_sparse_propagation_equals_dense_and_gradients_agree():
    u, i, U, NI = _graph(3)
    w = torch.rand(len(u), generator=torch.Generator().manual_seed(2)).requires_grad_()
    E = torch.randn(U + NI, 5, generator=torch.Generator().manual_seed(4), requires_grad=True)
    adj = lambda: core.normalized_adjacency(u, i, U, NI, w)  # noqa: E731
    dense = E
    cur = E
    for _ in range(3):
        cur = adj().to_dense() @ cur
        dense = dense + cur
    dense = dense / 4
    sparse = core.propagate(adj(), E, 3)
    assert torch.allclose(sparse, dense, atol=1e-6)
    g_dense = torch.autograd.grad(dense.pow(2).sum(), [w, E], retain_graph=True)
    g_sparse = torch.autograd.grad(core.propagate(adj(), E, 3).pow(2).sum(), [w, E])
    A = adj().detach()
    for a, b in zip(g_dense, g_sparse, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    # the masked-graph path (fixed structure, differentiable values) agrees in value and gradient
    mg = core.MaskedGraph(u, i, U, NI)
    Em = E.detach().clone().requires_grad_()
    wm = w.detach().clone().requires_grad_()
    out = mg.propagate(wm, Em, 3)
    assert torch.allclose(out, dense, atol=1e-6)
    gw, ge = torch.autograd.grad(out.pow(2).sum(), [wm, Em])
    assert torch.allclose(gw, g_dense[0], atol=1e-5) and torch.allclose(ge, g_dense[1], atol=1e-5)
    # the fixed-graph CSR path (symmetric backward) agrees too
    Ec = E.detach().clone().requires_grad_()
    csr = core.propagate(core.to_csr(A), Ec, 3)
    assert torch.allclose(csr, dense, atol=1e-6)
    (gc,) = torch.autograd.grad(csr.pow(2).sum(), [Ec])
    assert torch.allclose(gc, g_dense[1], atol=1e-5)


def test_all_ones_mask_gives_lightgcn_on_the_original_auxiliary_graph():
    d = synthetic(60, 50, n_buy=3, n_cart=5, n_view=8, noise_rate=0.5, seed=0)
    split = leave_one_out(d)
    m = GCIBModel(split, TrainConfig(method="gcib", dim=8, layers=2))
    z_t = core.propagate(m.adj_t, m.emb, 2)
    for b, (u, _) in enumerate(m.edges):
        ref = core.propagate(m.adj_orig[b], m.emb, 2)
        assert torch.allclose(m.masked[b].propagate(torch.ones(len(u)), m.emb, 2), ref, atol=1e-6)
        # a threshold that keeps every edge is the same graph; the learned soft mask is not
        p = torch.sigmoid(m.keep_logits(b, z_t))
        assert torch.allclose(m.masked[b].propagate((p >= 0).float(), m.emb, 2), ref, atol=1e-6)
        soft = m.masked[b].propagate(p * torch.rand(len(u)), m.emb, 2)
        assert not torch.allclose(soft, ref, atol=1e-4)


def test_hsic_identities():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 6, generator=g)
    Y = X @ torch.randn(6, 6, generator=g) + 0.5 * torch.randn(40, 6, generator=g)
    for k in ("linear", "rbf"):
        assert core.hsic(torch.ones(40, 6), Y, k).abs() < 1e-6
        assert core.normalized_hsic(torch.ones(40, 6), Y, k).abs() < 1e-6
        assert core.normalized_hsic(X, X, k) == pytest.approx(1.0, abs=1e-5)
        perm = torch.randperm(40, generator=g)
        assert core.hsic(X[perm], Y[perm], k) == pytest.approx(float(core.hsic(X, Y, k)), rel=1e-5)
        dep = float(core.normalized_hsic(X, Y, k))
        indep = float(core.normalized_hsic(X, Y[perm], k))
        assert 0 < indep < dep < 1  # dependence is detected, a shuffled pairing scores lower
    # the biased estimator against its trace formula
    n = 40
    H = torch.eye(n) - torch.ones(n, n) / n
    K, L = X @ X.T, Y @ Y.T
    assert core.hsic(X, Y) == pytest.approx(float(torch.trace(K @ H @ L @ H) / (n - 1) ** 2), rel=1e-4)


def test_info_nce_log_batch_when_similarities_equal_and_lower_when_aligned():
    a = torch.ones(16, 4)
    assert core.info_nce(a, a, 0.2) == pytest.approx(math.log(16), rel=1e-6)
    x = torch.eye(16)
    assert core.info_nce(x, x, 0.2) < math.log(16) - 1
    # symmetric when both directions are summed
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    assert (core.info_nce(p, q, 0.3) + core.info_nce(q, p, 0.3)) == pytest.approx(
        float(core.info_nce(q, p, 0.3) + core.info_nce(p, q, 0.3)))


def test_bpr_and_gumbel_sigmoid():
    assert core.bpr_loss(torch.tensor([0.0]), torch.tensor([0.0])) == pytest.approx(math.log(2))
    assert core.bpr_loss(torch.tensor([5.0]), torch.tensor([0.0])) < core.bpr_loss(torch.tensor([0.0]), torch.tensor([5.0]))
    logits = torch.tensor([3.0] * 4000 + [-3.0] * 4000)
    s = core.gumbel_sigmoid(logits, 0.5, torch.Generator().manual_seed(0))
    assert s[:4000].mean() > 0.85 and s[4000:].mean() < 0.15  # follows the keep probability
    assert ((s > 0.5).float()[:4000].mean() - torch.sigmoid(torch.tensor(3.0))).abs() < 0.02


def test_rank_and_hr_ndcg():
    scores = torch.arange(20.0).flip(0)[None].repeat(3, 1)  # item 0 best
    r = core.rank_of_target(scores, torch.tensor([0, 10, 9]))
    assert r.tolist() == [0, 10, 9]
    hit, nd = core.hr_ndcg(r, 10)
    assert hit.tolist() == [1.0, 0.0, 1.0]
    assert nd[0] == 1.0 and nd[1] == 0.0 and nd[2] == pytest.approx(1 / np.log2(11))
