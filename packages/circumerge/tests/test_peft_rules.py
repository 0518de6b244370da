"""TA / TIES / magnitude-prune / DARE / DARE-TIES run peft's ``merge_utils`` in every space and give
the numbers of our former implementation (the oracle); seeded DARE is reproducible; the ``peft``
space is peft's own add_weighted_adapter."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from circumerge import rules
from circumerge.rules import PEFT_RULE_FUNCTIONS, RULES, apply_rule, peft_merge_utils
from circumerge.spaces import SpaceOptions, merge_layer


def _load_oracle():
    spec = importlib.util.spec_from_file_location("circumerge_oracle_rules",
                                                  Path(__file__).with_name("oracle_rules.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ORACLE


ORACLE = _load_oracle()
pytest.importorskip("peft")
PEFT_RULES = tuple(PEFT_RULE_FUNCTIONS)


def _stack(seed=0, shape=(5, 12, 9)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


W = torch.tensor([1.0, 0.5, 0.8, 0.3, 1.2], dtype=torch.float64)


@pytest.mark.parametrize("rule", PEFT_RULES)
def test_registered_rules_equal_former_implementation(rule):
    mats = _stack()
    ours = apply_rule(rule, mats, W, density=0.3, generator=torch.Generator().manual_seed(7))
    oracle = ORACLE[rule](mats, W, density=0.3, generator=torch.Generator().manual_seed(7))
    assert torch.allclose(ours, oracle, atol=1e-12)
    if rule != "ta":  # the rule is not a weighted sum
        assert not torch.allclose(ours, apply_rule("ta", mats, W), atol=1e-3)


def test_registered_rules_run_peft_code(monkeypatch):
    mu = peft_merge_utils()
    assert mu.__file__.endswith("peft/utils/merge_utils.py")
    assert "transformers" not in sys.modules or "peft" in sys.modules  # loading it pulled nothing
    for rule, fn_name in PEFT_RULE_FUNCTIONS.items():
        calls = []
        real = getattr(mu, fn_name)
        monkeypatch.setattr(mu, fn_name, lambda *a, real=real, calls=calls, **k: calls.append(1) or real(*a, **k))
        apply_rule(rule, _stack(), W, density=0.5)
        assert calls, rule


def test_seeded_dare_is_reproducible_and_leaves_global_rng_alone():
    mats = _stack(1)
    for rule in ("dare", "dare_ties"):
        torch.manual_seed(123)
        before = torch.random.get_rng_state()
        a = apply_rule(rule, mats, W, density=0.5, generator=torch.Generator().manual_seed(3))
        b = apply_rule(rule, mats, W, density=0.5, generator=torch.Generator().manual_seed(3))
        c = apply_rule(rule, mats, W, density=0.5, generator=torch.Generator().manual_seed(4))
        assert torch.equal(a, b)
        assert not torch.allclose(a, c)
        assert torch.equal(torch.random.get_rng_state(), before)
    # the generator advances: two draws in a row differ (layers of one merge get distinct masks)
    g = torch.Generator().manual_seed(3)
    assert not torch.equal(apply_rule("dare", mats, W, generator=g), apply_rule("dare", mats, W, generator=g))


SPACE_OPTS = {"full": None, "knots": None, "core": None, "core_svd": None,
              "circulant": SpaceOptions(sketch_size=24)}  # sketch coordinates, sampling engaged


@pytest.mark.parametrize("space", list(SPACE_OPTS))
def test_every_space_merges_with_peft_rules_as_with_oracle(space, monkeypatch):
    g = torch.Generator().manual_seed(2)
    As = [torch.randn(3, 40, generator=g, dtype=torch.float64) for _ in range(4)]
    Bs = [torch.randn(50, 3, generator=g, dtype=torch.float64) for _ in range(4)]
    w = [1.0, 0.6, 0.8, 0.4]
    opts = SPACE_OPTS[space]
    with_peft = {r: merge_layer(As, Bs, space=space, rule=r, weights=w, seed=5, opts=opts) for r in PEFT_RULES}
    for r in PEFT_RULES:
        monkeypatch.setitem(RULES, r, ORACLE[r])
    for r in PEFT_RULES:
        A0, B0 = with_peft[r]
        A1, B1 = merge_layer(As, Bs, space=space, rule=r, weights=w, seed=5, opts=opts)
        assert torch.allclose(B0 @ A0, B1 @ A1, atol=1e-9), (space, r)
    assert rules.RULES is RULES


def test_peft_space_is_dense_rule_then_truncated_svd():
    g = torch.Generator().manual_seed(1)
    As = [torch.randn(3, 20, generator=g) for _ in range(3)]
    Bs = [torch.randn(24, 3, generator=g) for _ in range(3)]
    w = [1.0, 0.5, 0.7]
    A, B = merge_layer(As, Bs, space="peft", rule="ties", weights=w, density=0.4)
    dense = apply_rule("ties", torch.stack([b @ a for a, b in zip(As, Bs, strict=True)]),
                       torch.tensor(w), density=0.4)
    U, S, Vh = torch.linalg.svd(dense)
    best9 = (U[:, :9] * S[:9]) @ Vh[:9]
    assert A.shape == (9, 20)
    assert torch.allclose(B @ A, best9, atol=1e-4)
    At, Bt = merge_layer(As, Bs, space="peft", rule="ta", weights=w)
    truth = sum(wt * b @ a for wt, a, b in zip(w, As, Bs, strict=True))
    assert torch.allclose(Bt @ At, truth, atol=1e-4)
