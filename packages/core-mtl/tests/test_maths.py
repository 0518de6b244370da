"""Exact identities of the maths: linear CKA, SH shading and the renderer, the generator's
geometry, gradient conflict, and the aggregators (EW, PCGrad, MGDA)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from core_mtl import baselines
from core_mtl.core import (
    C0,
    angle_degrees,
    gradient_conflict,
    linear_cka,
    normals_from_depth,
    render,
    sh_shading,
)
from core_mtl.synthetic import make_split


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(0)


def test_cka_identities(rng):
    X = rng.normal(size=(50, 6))
    Y = rng.normal(size=(50, 4))
    assert linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    c = linear_cka(X, Y)
    assert 0 < c < 1
    assert linear_cka(3.7 * X, Y) == pytest.approx(c, rel=1e-10)  # isotropic scaling
    assert linear_cka(X @ Q, Y) == pytest.approx(c, rel=1e-10)  # orthogonal map
    assert linear_cka(X, Y * 0.01) == pytest.approx(c, rel=1e-10)
    # not invariant to a non-isotropic scaling: the test would catch a wrong normalisation
    assert abs(linear_cka(X * np.arange(1, 7), Y) - c) > 1e-4
    # zero cross-covariance: orthogonal centred columns
    H = np.linalg.qr(rng.normal(size=(50, 10)) - 0)[0]
    H = H - H.mean(0)
    Qh = np.linalg.qr(H)[0]
    A, B = Qh[:, :3], Qh[:, 3:7]
    A, B = A - A.mean(0), B - B.mean(0)
    B = B - A @ np.linalg.lstsq(A, B, rcond=None)[0]
    assert linear_cka(A, B) == pytest.approx(0.0, abs=1e-12)


def test_cka_torch_matches_numpy_and_is_differentiable(rng):
    X = rng.normal(size=(20, 5)).astype(np.float32)
    Y = (X[:, :3] + 0.5 * rng.normal(size=(20, 3))).astype(np.float32)
    xt = torch.tensor(X, requires_grad=True)
    c = linear_cka(xt, torch.tensor(Y))
    assert float(c.detach()) == pytest.approx(linear_cka(X, Y), rel=1e-4)
    c.backward()
    assert xt.grad is not None and torch.isfinite(xt.grad).all() and xt.grad.abs().sum() > 0


def test_band0_shading_is_constant():
    n = np.random.default_rng(1).normal(size=(3, 8, 8))
    n /= np.linalg.norm(n, axis=0, keepdims=True)
    L = np.zeros((3, 9))
    L[:, 0] = [0.5, 1.0, 2.0]
    S = sh_shading(n, L)
    assert np.allclose(S, (np.array([0.5, 1.0, 2.0]) * C0)[:, None, None], atol=1e-12)
    L[0, 2] = 1.0  # a band-1 term makes it vary with the normal
    assert np.ptp(sh_shading(n, L)[0]) > 0.1
    # torch and NumPy agree
    St = sh_shading(torch.tensor(n), torch.tensor(L))
    assert np.allclose(St.numpy(), sh_shading(n, L))


@pytest.fixture(scope="module")
def scenes():
    return make_split(6, 24, seed=3, split="train")


def test_renderer_rebuilds_the_image_exactly(scenes):
    img = render(scenes["albedo"].astype(np.float64), scenes["normal"].astype(np.float64),
                 scenes["light"].astype(np.float64))
    assert np.abs(img - scenes["image"]).max() < 1e-5
    wrong = render(scenes["albedo"], scenes["normal"], scenes["light"][::-1])  # other images' light
    assert np.abs(wrong - scenes["image"]).max() > 0.05
    flipped = scenes["normal"] * np.array([-1, -1, 1], dtype=np.float32)[None, :, None, None]
    assert np.abs(render(scenes["albedo"], flipped, scenes["light"]) - scenes["image"]).max() > 0.05


def test_normals_from_depth_match_stored(scenes):
    spacing = 2 / (24 - 1)
    checked = 0
    for i in range(len(scenes["image"])):
        n_fd = normals_from_depth(scenes["depth"][i], spacing)
        lab = scenes["label"][i]
        same = np.ones_like(lab, dtype=bool)  # 3x3 neighbourhood inside one segment, off the border
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                same &= np.roll(np.roll(lab, dy, 0), dx, 1) == lab
        same[[0, -1], :] = same[:, [0, -1]] = False
        ang = angle_degrees(n_fd, scenes["normal"][i])[same]
        assert np.median(ang) < 3.0
        checked += int((lab[same] > 0).sum())
    assert checked > 50  # the check covers object pixels, not only the flat plane


def test_conflict_of_identical_and_opposite_gradients():
    g = np.random.default_rng(0).normal(size=(1, 30))
    assert gradient_conflict(np.repeat(g, 3, 0)) == pytest.approx((1.0, 0.0))
    cos, neg = gradient_conflict(np.concatenate([g, -g]))
    assert cos == pytest.approx(-1.0) and neg == 1.0


def test_ew_is_the_sum():
    G = torch.randn(3, 40, dtype=torch.float64)
    assert torch.allclose(baselines.aggregate("ew", G), G.sum(0))


def test_pcgrad_leaves_non_conflicting_gradients_unchanged():
    base = torch.randn(40, dtype=torch.float64)
    G = torch.stack([base + 0.1 * torch.randn(40, dtype=torch.float64) for _ in range(3)])
    assert (G @ G.T > 0).all()
    assert torch.allclose(baselines.aggregate("pcgrad", G), G.sum(0))
    C = torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)  # conflicting pair
    d = baselines.aggregate("pcgrad", C)
    assert not torch.allclose(d, C.sum(0))
    assert torch.allclose(d, torch.tensor([0.5, 1.5], dtype=torch.float64))  # both projected


def test_mgda_two_task_closed_form():
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        G = torch.randn(2, 25, generator=gen, dtype=torch.float64)
        g1, g2 = G
        gamma = float(torch.clamp((g2 - g1) @ g2 / (g1 - g2).pow(2).sum(), 0, 1))
        expect = gamma * g1 + (1 - gamma) * g2
        assert torch.allclose(baselines.aggregate("mgda", G), expect, atol=1e-6)
        K = (G @ G.T).numpy()  # the general SLSQP solver agrees with the closed form
        w = baselines._simplex_qp(lambda w, K=K: w @ K @ w, 2)
        assert np.allclose(w, [gamma, 1 - gamma], atol=1e-4)


def test_mgda_is_the_min_norm_point_of_the_hull():
    G = torch.randn(4, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    d = baselines.aggregate("mgda", G)
    # KKT: every g_i . d >= ||d||^2 (d is the hull point nearest 0); random hull points are longer
    assert (G @ d >= d @ d - 1e-6).all()
    w = torch.distributions.Dirichlet(torch.ones(4, dtype=torch.float64)).sample((200,))
    assert ((w @ G).norm(dim=1) >= d.norm() - 1e-6).all()


def test_nashmtl_solves_the_bargaining_equations():
    G = torch.randn(3, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    d = baselines.aggregate("nashmtl", G)
    proj = (G @ d).numpy()  # G d = 1 / alpha up to one scale: alpha_i * (G d)_i is constant
    K = (G @ G.T).numpy()
    alpha = np.linalg.lstsq(G.numpy().T, d.numpy(), rcond=None)[0]
    assert np.allclose(K @ alpha, proj)
    prod = alpha * proj
    assert np.ptp(prod) / prod.mean() < 1e-3 and (alpha > 0).all()


def test_loss_methods_have_no_gradient_aggregation():
    with pytest.raises(ValueError):
        baselines.aggregate("uw", torch.randn(2, 3))
    with pytest.raises(KeyError):
        baselines.make("nope", 2)
