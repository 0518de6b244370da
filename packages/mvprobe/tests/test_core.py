"""What the paper guarantees about the probe views: equivariance / invariance under neuron
permutations, right-to-left Gram products, standardisation, Theorems 1 and 3, and ProbeX as the
one-branch special case."""

from __future__ import annotations

import pytest
import torch
from mvprobe.baselines import ProbeX
from mvprobe.core import (
    MVProbe,
    branch_norm_report,
    branch_response,
    standardize,
    theorem1_pair,
    theorem3_monte_carlo,
    theorem3_ratio,
)

D_H, D_W = 7, 11  # non-square on purpose


@pytest.fixture
def probe():
    torch.manual_seed(0)
    return MVProbe((D_H, D_W), n_probes=5, proj_dim=4, rep_dim=8, n_outputs=3).double()


def _X(seed=1, b=3):
    return torch.randn(b, D_H, D_W, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_branch_shapes_single_and_batch(probe):
    X = _X()
    out = probe.branch_outputs(X)
    assert {k: tuple(v.shape) for k, v in out.items()} == {
        "xu": (3, D_H, 5), "xtu": (3, D_W, 5), "xxtu": (3, D_H, 5), "xtxu": (3, D_W, 5)}
    one = probe.branch_outputs(X[1])
    for k in out:
        assert torch.allclose(one[k], out[k][1])


def test_row_permutation_permutes_s1_and_leaves_s4(probe):
    X = _X()
    perm = torch.randperm(D_H, generator=torch.Generator().manual_seed(3))
    a = probe.branch_outputs(X, standardized=False)
    b = probe.branch_outputs(X[:, perm], standardized=False)
    assert torch.allclose(b["xu"], a["xu"][:, perm])
    assert torch.allclose(b["xtxu"], a["xtxu"], atol=1e-12)
    assert not torch.allclose(b["xtu"], a["xtu"])  # XᵀV is not invariant to row permutations


def test_column_permutation_permutes_s2_and_leaves_s3(probe):
    X = _X()
    perm = torch.randperm(D_W, generator=torch.Generator().manual_seed(4))
    a = probe.branch_outputs(X, standardized=False)
    b = probe.branch_outputs(X[:, :, perm], standardized=False)
    assert torch.allclose(b["xtu"], a["xtu"][:, perm])
    assert torch.allclose(b["xxtu"], a["xxtu"], atol=1e-12)
    assert not torch.allclose(b["xu"], a["xu"])


def test_right_to_left_equals_explicit_gram(probe):
    X = _X()
    W, Z = probe.probes["xxtu"], probe.probes["xtxu"]
    out = probe.branch_outputs(X, standardized=False)
    assert torch.allclose(out["xxtu"], (X @ X.transpose(1, 2)) @ W, atol=1e-12)
    assert torch.allclose(out["xtxu"], (X.transpose(1, 2) @ X) @ Z, atol=1e-12)
    assert torch.allclose(out["xtu"], X.transpose(1, 2) @ probe.probes["xtu"])
    with pytest.raises(ValueError, match="unknown branch"):
        branch_response(X, W, "xxx")


def test_standardised_branch_has_mean_zero_and_unit_energy(probe):
    X = 50.0 * _X()  # a scale far from 1, so an unstandardised branch would fail the check
    for name, S in probe.branch_outputs(X, standardized=True).items():
        n = S.shape[-2] * S.shape[-1]
        assert torch.allclose(S.mean(dim=(-2, -1)), torch.zeros(3, dtype=S.dtype), atol=1e-10), name
        assert torch.allclose(S.pow(2).sum(dim=(-2, -1)), torch.full((3,), float(n), dtype=S.dtype),
                              rtol=1e-6), name
    raw = probe.branch_outputs(X, standardized=False)
    assert raw["xxtu"].pow(2).sum() > 1e3 * raw["xu"].pow(2).sum()  # Thm 3: the Gram views dominate
    report = branch_norm_report(probe, X)
    assert report["xtxu"]["std_sq_norm"] == pytest.approx(report["xtxu"]["entries"], rel=1e-6)
    assert report["xtxu"]["raw_sq_norm"] > report["xtu"]["raw_sq_norm"]


def test_standardize_is_per_sample_population_std():
    S = torch.arange(12.0, dtype=torch.float64).reshape(2, 3, 2)
    S[1] *= 10
    T = standardize(S, eps=0.0)
    assert torch.allclose(T[0], T[1])  # each sample standardised on its own
    assert torch.allclose(T.std(dim=(1, 2), correction=0), torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize("n, m, sigma", [(24, 40, 0.3), (40, 16, 1.5)])
def test_theorem3_ratio_monte_carlo(n, m, sigma):
    mc = theorem3_monte_carlo(n, m, sigma, trials=3000, seed=0)
    assert mc == pytest.approx(theorem3_ratio(n, m, sigma), rel=0.05)
    # the formula's n-dependence is real: the wrong (swapped) formula is far off
    assert abs(mc / theorem3_ratio(m, n, sigma) - 1) > 0.1


def test_theorem1_first_order_collision_separated_by_gram():
    m, r = 9, 4
    g = torch.Generator().manual_seed(5)
    U = torch.zeros(m, r, dtype=torch.float64)
    U[:r] = torch.randn(r, r, generator=g, dtype=torch.float64)  # rank r < m, rows r.. exactly 0
    X1 = torch.randn(6, m, generator=g, dtype=torch.float64)
    X2 = X1.clone()
    X2[:, r:] += torch.randn(6, m - r, generator=g, dtype=torch.float64)  # N U = 0 exactly
    assert not torch.equal(X1, X2)
    assert torch.equal(X1 @ U, X2 @ U)
    assert not torch.allclose((X1.T @ X1) @ U, (X2.T @ X2) @ U)
    # the general construction (any U of rank r < m), to rounding error
    U2 = torch.randn(m, r, generator=g, dtype=torch.float64)
    A, B = theorem1_pair(U2, seed=1)
    assert torch.allclose(A @ U2, B @ U2, atol=1e-10)
    assert ((A.T @ A) @ U2 - (B.T @ B) @ U2).abs().max() > 1e-3
    with pytest.raises(ValueError):
        theorem1_pair(torch.randn(3, 3, dtype=torch.float64))


def test_one_branch_unstandardised_is_probex():
    torch.manual_seed(0)
    mv = MVProbe((D_H, D_W), branches=("xu",), standardize=False, n_probes=5, proj_dim=4, rep_dim=8,
                 n_outputs=3)
    px = ProbeX((D_H, D_W), 5, 4, 8, 3)
    with torch.no_grad():
        px.U.copy_(mv.probes["xu"])
        px.proj.weight.copy_(mv.proj["xu"].weight)
        px.encoder.load_state_dict(mv.encoder.state_dict())
        px.head.load_state_dict(mv.head.state_dict())
    X = _X().float()
    assert torch.allclose(mv(X), px(X), atol=1e-6)
    # ... and standardisation or a second branch change the function
    std = MVProbe((D_H, D_W), branches=("xu",), standardize=True, n_probes=5, proj_dim=4, rep_dim=8,
                  n_outputs=3)
    std.load_state_dict(mv.state_dict())
    assert not torch.allclose(std(3 * X), px(3 * X), atol=1e-3)


def test_zeroshot_logits_are_cosines(probe):
    zs = MVProbe((D_H, D_W), n_probes=3, proj_dim=2, rep_dim=6, text_dim=5).double()
    text = torch.randn(4, 5, dtype=torch.float64)
    logits = zs.zeroshot_logits(_X(), text)
    assert logits.shape == (3, 4) and logits.abs().max() <= 1 + 1e-9
    rep, t = zs.encode(_X()), zs.text_proj(text)
    cos = torch.nn.functional.cosine_similarity(rep[:, None], t[None], dim=-1)
    assert torch.allclose(logits, cos)


def test_standardised_encoder_is_scale_free_and_every_branch_matters():
    torch.manual_seed(0)
    X = _X().float()
    on = MVProbe((D_H, D_W), n_probes=5, proj_dim=4, rep_dim=8, n_outputs=3)
    off = MVProbe((D_H, D_W), standardize=False, n_probes=5, proj_dim=4, rep_dim=8, n_outputs=3)
    off.load_state_dict(on.state_dict())
    # every view is standardised per sample, so a global rescaling of the layer changes nothing
    assert torch.allclose(on.encode(7.5 * X), on.encode(X), atol=1e-4)
    assert not torch.allclose(off.encode(7.5 * X), off.encode(X), atol=1e-2)
    on(X).sum().backward()
    for b, p in on.probes.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, b
