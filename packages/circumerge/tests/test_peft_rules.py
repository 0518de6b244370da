"""Our TA / TIES / magnitude-prune / DARE / DARE-TIES give peft's results (peft.utils.merge_utils),
and the ``peft`` space is peft's own add_weighted_adapter."""

from __future__ import annotations

import pytest
import torch
from circumerge.rules import apply_peft_rule, apply_rule
from circumerge.spaces import merge_layer

pytest.importorskip("peft")


@pytest.mark.parametrize("rule", ["ta", "ties", "magnitude_prune", "dare", "dare_ties"])
def test_rules_equal_peft(rule):
    g = torch.Generator().manual_seed(0)
    mats = torch.randn(5, 12, 9, generator=g, dtype=torch.float64)
    w = torch.tensor([1.0, 0.5, 0.8, 0.3, 1.2], dtype=torch.float64)
    ours = apply_rule(rule, mats, w, density=0.3, generator=torch.Generator().manual_seed(7))
    theirs = apply_peft_rule(rule, mats, w, density=0.3, generator=torch.Generator().manual_seed(7))
    assert torch.allclose(ours, theirs, atol=1e-12)
    if rule != "ta":  # the rule is not a weighted sum
        assert not torch.allclose(ours, apply_rule("ta", mats, w), atol=1e-3)


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
