"""The numerics issue 12 asks for: fp32 shared-init adapters, the fastest exact Core Space against
its published SVD route, factored KnOTS against the literal one, and an ``auto`` sketch that
really samples."""

from __future__ import annotations

import pytest
import torch
from circumerge.core import choose_sketch_size, sketch_sizes, sketched_gram
from circumerge.gram import merge_from_grams
from circumerge.spaces import SpaceOptions, merge_layer
from circumerge.synthetic import relative_error, shared_init_factors

RULES = ("ta", "ties", "magnitude_prune", "dare_linear", "dare_ties", "tsv", "iso")
NONE = SpaceOptions(sketch_size="none")


@pytest.fixture(scope="module")
def shared32():
    return shared_init_factors(4, 8, 150, 170, seed=3)  # float32, A_t = A₀ + 1e-3 noise


@pytest.mark.parametrize("rule", RULES)
def test_fp32_shared_init_circulant_without_sampling_equals_core(shared32, rule):
    As, Bs = shared32
    assert As[0].dtype == torch.float32
    core = merge_layer(As, Bs, space="core", rule=rule, seed=2)
    circ = merge_layer(As, Bs, space="circulant", rule=rule, seed=2, opts=NONE)
    ref = merge_layer([a.double() for a in As], [b.double() for b in Bs], space="core_svd", rule=rule, seed=2)
    assert circ[0].dtype == torch.float32
    assert relative_error(*circ, *core) <= 1e-4
    assert relative_error(*core, *ref) <= 1e-4


def test_fp32_gram_route_drifts_on_shared_init(shared32):
    """The failure mode the float64 Grams fix: a float32 Gram loses the 1e-3 directions."""
    As, Bs = shared32
    A_s, B_s = torch.cat(As), torch.cat(Bs, 1)
    ref = merge_layer([a.double() for a in As], [b.double() for b in Bs], space="core_svd", rule="tsv")
    g32 = merge_from_grams(As, Bs, (A_s @ A_s.T).double(), (B_s.T @ B_s).double(), rule="tsv",
                           weights=torch.ones(4), density=None, generator=torch.Generator().manual_seed(0),
                           rank_tol=1e-5)
    assert relative_error(*g32, *ref) > 1e-2


def generic(T=4, r=5, m=60, n=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    As = [torch.randn(r, n, generator=g, dtype=torch.float64) for _ in range(T)]
    Bs = [torch.randn(m, r, generator=g, dtype=torch.float64) for _ in range(T)]
    return As, Bs


@pytest.mark.parametrize("rule", RULES)
def test_fast_core_equals_published_svd_route(rule):
    As, Bs = generic()
    a = merge_layer(As, Bs, space="core", rule=rule, seed=4)
    b = merge_layer(As, Bs, space="core_svd", rule=rule, seed=4)
    assert relative_error(*a, *b) < 1e-9


@pytest.mark.parametrize("rule", RULES)
def test_factored_knots_equals_literal_knots(rule):
    As, Bs = generic()
    a = merge_layer(As, Bs, space="knots", rule=rule, seed=4)
    b = merge_layer(As, Bs, space="knots_dense", rule=rule, seed=4)
    assert relative_error(*a, *b) < 1e-9


def test_auto_samples_and_the_sample_is_used():
    As, Bs = generic(T=4, r=4, m=2000, n=1500)  # R = 16: auto wants 256 rows of 1500 / 2000
    opts = SpaceOptions()  # auto
    s_a, s_b = sketch_sizes(As, Bs, opts)
    assert s_a == s_b == choose_sketch_size(16, 1500, 0.25) == 256
    G, s = sketched_gram(torch.cat(Bs, 1), "auto", torch.Generator().manual_seed(0))
    exact = torch.cat(Bs, 1).T @ torch.cat(Bs, 1)
    assert s == 256
    err = float((G - exact).norm() / exact.norm())
    assert 1e-3 < err < 0.6  # a real sketch: not exact, but close
    core = merge_layer(As, Bs, space="core", rule="ties")
    circ = merge_layer(As, Bs, space="circulant", rule="ties", opts=opts)
    assert relative_error(*circ, *core) > 1e-3  # the sketch changes the nonlinear rule's basis
    ta = merge_layer(As, Bs, space="circulant", rule="ta", opts=opts)
    truth = sum(B @ A for A, B in zip(As, Bs, strict=True))
    assert float((ta[1] @ ta[0] - truth).norm() / truth.norm()) < 1e-9  # coordinates stay exact


def test_sketch_size_rule():
    assert choose_sketch_size(100, 10**6, 0.1) == 10_000
    assert choose_sketch_size(100, 5000, 0.1) == 5000  # capped at d: transform without sampling
    assert choose_sketch_size(100, 10**6, 0.9) == 200  # never below 2R
    with pytest.raises(ValueError):
        choose_sketch_size(10, 100, 1.5)


def test_sketch_error_falls_with_target():
    As, Bs = generic(T=4, r=4, m=3000, n=40)
    core = merge_layer(As, Bs, space="core", rule="tsv")
    errs = [relative_error(*merge_layer(As, Bs, space="circulant", rule="tsv",
                                        opts=SpaceOptions(sketch_target=eps)), *core)
            for eps in (0.5, 0.1)]
    assert errs[1] < errs[0]


def test_bf16_factors_are_merged_and_returned_in_bf16():
    As, Bs = generic()
    A16, B16 = [a.to(torch.bfloat16) for a in As], [b.to(torch.bfloat16) for b in Bs]
    A, B = merge_layer(A16, B16, space="circulant", rule="ties")
    assert A.dtype == B.dtype == torch.bfloat16
    ref = merge_layer([a.double() for a in A16], [b.double() for b in B16], space="core", rule="ties")
    assert relative_error(A.double(), B.double(), *ref) < 2e-2


def test_non_finite_weights_raise():
    As, Bs = generic()
    with pytest.raises(ValueError, match="finite"):
        merge_layer(As, Bs, weights=[1.0, float("nan"), 1.0, 1.0])
