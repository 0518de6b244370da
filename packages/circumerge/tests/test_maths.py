"""The identities the merge spaces guarantee (float64, small generic shapes)."""

from __future__ import annotations

import pytest
import torch
from circumerge.core import (
    apply_circulant,
    circulant_matrix,
    circulant_params,
    effective_rank,
    sketched_gram,
)
from circumerge.gram import whiten
from circumerge.spaces import SpaceOptions, compress, merge_layer

from icml26_shared.merge import RULES

SPACES = ("full", "knots", "core", "core_svd", "circulant")
ALL_RULES = ("ta", "ties", "magnitude_prune", "dare_linear", "dare_ties", "tsv", "iso")
NONE = SpaceOptions(sketch_size="none")


def factors(T=4, ranks=(3, 5, 2, 4), m=40, n=33, seed=0):
    g = torch.Generator().manual_seed(seed)
    As = [torch.randn(r, n, generator=g, dtype=torch.float64) for r in ranks[:T]]
    Bs = [torch.randn(m, r, generator=g, dtype=torch.float64) for r in ranks[:T]]
    return As, Bs


def delta(A, B):
    return B @ A


def rel(X, Y):
    return float((X - Y).norm() / Y.norm())


def test_rules_registry_matches_issue():
    assert set(ALL_RULES) <= set(RULES)


def test_task_arithmetic_core_equals_full():
    As, Bs = factors()
    w = [1.0, 0.5, -0.3, 2.0]
    truth = sum(wt * B @ A for wt, A, B in zip(w, As, Bs, strict=True))
    for space in SPACES:
        A, B = merge_layer(As, Bs, space=space, rule="ta", weights=w)
        assert rel(delta(A, B), truth) < 1e-10, space
    Ac, Bc = merge_layer(As, Bs, space="core", rule="ta", weights=w)
    Af, Bf = merge_layer(As, Bs, space="full", rule="ta", weights=w)
    assert rel(delta(Ac, Bc), delta(Af, Bf)) < 1e-10


@pytest.mark.parametrize("rule", ALL_RULES)
def test_circulant_without_sampling_equals_core(rule):
    As, Bs = factors()
    Ac, Bc = merge_layer(As, Bs, space="core", rule=rule, seed=3)
    Az, Bz = merge_layer(As, Bs, space="circulant", rule=rule, seed=3, opts=NONE)
    assert rel(delta(Az, Bz), delta(Ac, Bc)) < 1e-9


def test_circulant_equals_core_on_rank_deficient_stack():
    As, Bs = factors()
    As, Bs = As + [As[0].clone()], Bs + [Bs[0].clone()]  # a repeated adapter: rank(A_s) < R
    for rule in ("ta", "ties"):
        Ac, Bc = merge_layer(As, Bs, space="core", rule=rule)
        Az, Bz = merge_layer(As, Bs, space="circulant", rule=rule, opts=NONE)
        k = sum(a.shape[0] for a in As) - As[0].shape[0]
        assert merge_layer(As, Bs, space="core_svd", rule=rule)[0].shape[0] == k
        assert int(torch.linalg.matrix_rank(delta(Ac, Bc))) <= k
        assert int(torch.linalg.matrix_rank(delta(Az, Bz))) == int(torch.linalg.matrix_rank(delta(Ac, Bc)))
        assert rel(delta(Az, Bz), delta(Ac, Bc)) < 1e-8, rule


def test_sampled_circulant_keeps_task_arithmetic_exact():
    """Our reconstruction: coordinates are exact, only the whitening is sketched."""
    As, Bs = factors(T=4, ranks=(4, 4, 4, 4), m=300, n=260)
    truth = sum(B @ A for A, B in zip(As, Bs, strict=True))
    for s in ("auto", 40):
        A, B = merge_layer(As, Bs, space="circulant", rule="ta", opts=SpaceOptions(sketch_size=s))
        assert rel(delta(A, B), truth) < 1e-9, s


def test_single_adapter_is_returned():
    As, Bs = factors(T=1, ranks=(5,))
    for space in SPACES:
        for rule in ("ta", "ties", "tsv"):
            A, B = merge_layer(As, Bs, space=space, rule=rule, density=1.0)
            assert rel(delta(A, B), Bs[0] @ As[0]) < 1e-9, (space, rule)


def test_circulant_is_orthogonal_and_fft_matches_dense():
    for d in (16, 17):  # even (Nyquist term) and odd
        signs, lam = circulant_params(d, torch.Generator().manual_seed(1))
        C = circulant_matrix(signs, lam)
        assert torch.allclose(C @ C.T, torch.eye(d, dtype=C.dtype), atol=1e-12)
        X = torch.randn(d, 3, dtype=torch.float64)
        assert torch.allclose(apply_circulant(X, signs, lam), C @ X, atol=1e-12)
        assert not torch.allclose(C.abs(), torch.eye(d, dtype=C.dtype))  # it does mix


def test_exact_gram_gives_orthonormal_bases():
    As, Bs = factors()
    B_s = torch.cat(Bs, 1)
    G, s = sketched_gram(B_s, "none", torch.Generator().manual_seed(0))
    assert s == B_s.shape[0]
    assert torch.allclose(G, B_s.T @ B_s, atol=1e-10)
    Q, lam = whiten(G, 1e-5)
    U = B_s @ (Q / lam.sqrt())
    assert torch.allclose(U.T @ U, torch.eye(U.shape[1], dtype=U.dtype), atol=1e-9)


def test_sketch_error_shrinks_with_sketch_size():
    As, Bs = factors(T=4, ranks=(4, 4, 4, 4), m=2048, n=64)
    B_s = torch.cat(Bs, 1)
    exact = B_s.T @ B_s
    errs = []
    for s in (32, 128, 512, 2048):
        G, used = sketched_gram(B_s, s, torch.Generator().manual_seed(0))
        assert used == s
        errs.append(rel(G, exact))
    assert errs[0] > errs[1] > errs[2] > errs[3]
    assert errs[3] < 1e-12


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("rule", ALL_RULES)
def test_merged_rank_bounded_and_out_rank(space, rule):
    As, Bs = factors()
    R = sum(a.shape[0] for a in As)
    A, B = merge_layer(As, Bs, space=space, rule=rule)
    assert A.shape[0] == B.shape[1] <= R
    assert int(torch.linalg.matrix_rank(delta(A, B))) <= R
    A3, B3 = merge_layer(As, Bs, space=space, rule=rule, out_rank=3)
    assert A3.shape[0] <= 3 and int(torch.linalg.matrix_rank(delta(A3, B3))) <= 3


def test_compress_is_best_low_rank_approximation():
    As, Bs = factors()
    A, B = torch.cat(As), torch.cat(Bs, 1)
    A4, B4 = compress(A, B, 4)
    U, S, Vh = torch.linalg.svd(B @ A)
    assert torch.allclose(B4 @ A4, (U[:, :4] * S[:4]) @ Vh[:4], atol=1e-9)


@pytest.mark.parametrize("rule", ("ta", "ties"))
def test_task_order_does_not_matter(rule):
    As, Bs = factors(ranks=(4, 4, 4, 4))
    w = [1.0, 0.7, 0.4, 0.2]
    perm = [2, 0, 3, 1]
    A1, B1 = merge_layer(As, Bs, space="core", rule=rule, weights=w)
    A2, B2 = merge_layer([As[i] for i in perm], [Bs[i] for i in perm], space="core", rule=rule,
                         weights=[w[i] for i in perm])
    assert rel(delta(A2, B2), delta(A1, B1)) < 1e-9


def test_same_seed_bit_identical_and_seed_is_used():
    As, Bs = factors(T=4, ranks=(4, 4, 4, 4), m=300, n=260)
    opts = SpaceOptions(sketch_size=48)
    for rule in ("dare_linear", "ties"):
        a = merge_layer(As, Bs, space="circulant", rule=rule, seed=5, opts=opts)
        b = merge_layer(As, Bs, space="circulant", rule=rule, seed=5, opts=opts)
        c = merge_layer(As, Bs, space="circulant", rule=rule, seed=6, opts=opts)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert rel(delta(*c), delta(*a)) > 1e-6  # the seed drives the sketch / the masks


def test_effective_rank():
    assert effective_rank(torch.eye(7)) == pytest.approx(7.0)
    assert effective_rank(torch.outer(torch.arange(1.0, 6), torch.ones(4))) == pytest.approx(1.0)
    assert 1.0 < effective_rank(torch.tensor([3.0, 1.0, 0.1])) < 3.0


def test_iso_flattens_the_spectrum():
    As, Bs = factors()
    A, B = merge_layer(As, Bs, space="core", rule="iso")
    S = torch.linalg.svdvals(delta(A, B))
    k = sum(a.shape[0] for a in As)
    assert torch.allclose(S[:k], S[:k].mean().expand(k), rtol=1e-8)
    At, Bt = merge_layer(As, Bs, space="core", rule="ta")
    assert effective_rank(S) > effective_rank(delta(At, Bt))


def test_bad_inputs_raise():
    As, Bs = factors()
    with pytest.raises(ValueError, match="space"):
        merge_layer(As, Bs, space="nope")
    with pytest.raises(ValueError, match="rule"):
        merge_layer(As, Bs, rule="nope")
    with pytest.raises(ValueError, match="weights"):
        merge_layer(As, Bs, weights=[1.0])
    with pytest.raises(ValueError, match="LoRA pair"):
        merge_layer([As[0]], [Bs[1]])
