"""One defining property per baseline that had none (issue 49, Tests): CAGrad, DWA, UW, GradNorm,
FAMO, FairGrad, STCH and MTAN."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from core_mtl import baselines
from core_mtl.config import TaskSpec
from core_mtl.model import MTAN


def _G(seed=0, T=3, P=30):
    return torch.randn(T, P, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_cagrad_with_c_zero_is_the_mean_gradient():
    agg = baselines.make("cagrad", 3)
    agg.c = 0.0
    G = _G()
    torch.testing.assert_close(agg.aggregate(G), G.mean(0))
    agg.c = 0.4  # and c > 0 moves away from it, towards the worst-off task
    d = agg.aggregate(G)
    assert not torch.allclose(d, G.mean(0))
    assert (G @ d).min() >= (G @ G.mean(0)).min() - 1e-9


def test_dwa_weights_are_t_times_softmax_of_loss_ratios():
    agg = baselines.make("dwa", 3)
    agg.end_epoch(np.array([1.0, 1.0, 1.0]))
    torch.testing.assert_close(agg.w, torch.ones(3))  # no history yet: equal weights
    agg.end_epoch(np.array([0.5, 1.0, 2.0]))
    r = np.array([0.5, 1.0, 2.0])
    want = 3 * np.exp(r / 2) / np.exp(r / 2).sum()
    np.testing.assert_allclose(agg.w.numpy(), want, rtol=1e-6)
    assert agg.w[2] > agg.w[1] > agg.w[0]  # the task whose loss fell least gets the most weight


def test_uw_log_variance_converges_to_log_loss():
    agg = baselines.make("uw", 2)
    L = torch.tensor([0.2, 3.0])
    opt = torch.optim.Adam(agg.parameters(), lr=0.1)
    for _ in range(300):
        opt.zero_grad()
        agg.combine(L).backward()
        opt.step()
    # d/ds [exp(-s) L + s] = 0  <=>  s = log L: each task ends weighted by 1 / L
    np.testing.assert_allclose(agg.log_var.detach().numpy(), np.log(L.numpy()), atol=1e-2)


def test_gradnorm_lowers_the_weight_of_the_task_with_the_larger_gradient():
    agg = baselines.make("gradnorm", 2)
    G = torch.tensor([[10.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    losses = torch.tensor([1.0, 1.0], dtype=torch.float64)
    for _ in range(5):
        agg.aggregate(G, losses)
    assert agg.w[0] < 1.0 < agg.w[1]
    assert agg.w.sum() == pytest.approx(2.0)


def test_famo_upweights_the_task_that_improved_least():
    agg = baselines.make("famo", 2)
    agg.observe(torch.tensor([1.0, 1.0]))
    agg.observe(torch.tensor([1.0, 0.5]))  # task 1 halved, task 0 did not move
    z = torch.softmax(agg.xi.detach(), 0)
    assert z[0] > z[1]


def test_fairgrad_alpha_one_is_proportionally_fair():
    G = _G(1)
    d = baselines.aggregate("fairgrad", G)
    w = np.linalg.lstsq(G.numpy().T, d.numpy(), rcond=None)[0]  # d = w G
    K = (G @ G.T).numpy()
    prod = w * (K @ w)  # alpha = 1: w_i (G G^T w)_i is the same for every task
    assert (w > 0).all() and np.ptp(prod) / prod.mean() < 1e-3


def test_stch_starts_at_one_plus_mu_log_t_and_weights_the_worst_task_most():
    agg = baselines.make("stch", 3)
    L = torch.tensor([2.0, 0.5, 1.0], requires_grad=True)
    v = agg.combine(L)  # first call: l0 = L, every normalised loss is 1
    assert float(v.detach()) == pytest.approx(1 + agg.mu * math.log(3))
    L2 = torch.tensor([2.0, 0.5, 1.0]) * torch.tensor([1.5, 1.0, 0.5])
    L2.requires_grad_(True)
    agg.combine(L2).backward()
    scaled = L2.grad * torch.tensor([2.0, 0.5, 1.0])  # gradient per unit of normalised loss
    assert scaled.argmax() == 0  # task 0 is furthest above its start


def test_mtan_each_task_reads_only_its_own_attention():
    tasks = (TaskSpec("seg", "segmentation", "label", 4), TaskSpec("depth", "depth", "depth"))
    torch.manual_seed(0)
    m = MTAN(tasks).eval()
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        a = m(x)["tasks"]
        m.att["seg"][0].weight.add_(1.0)
        b = m(x)["tasks"]
    assert not torch.allclose(a["seg"], b["seg"])
    torch.testing.assert_close(a["depth"], b["depth"])
