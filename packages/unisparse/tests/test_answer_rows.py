"""0.3.4's fix: the *answer rows* (the query-block rows holding the last ``answer_queries``
queries: the question) are scored at query granularity 1. A block's mean query is dominated by
its filler queries; the few question queries that put all their attention on the needle are
averaged away, so the needle block loses to blocks the filler queries like. The true row mass
(the mean over queries of their softmax) keeps it. Planted below: lost with ``answer_queries=0``
(0.3.3's rule), kept by the default, the oracle and A-shape with the answer rows; the other rows
still come from the composite estimate."""

from __future__ import annotations

import math

import pytest
import torch
import unisparse
from unisparse import core

BS, T, D = 16, 256, 32
NEEDLE, DECOYS, N_QUESTION = 3, range(5, 13), 4


def _planted():
    g = torch.Generator().manual_seed(0)
    u, w = torch.zeros(D), torch.zeros(D)
    u[0], w[1] = 1.0, 1.0
    q = 0.05 * torch.randn(1, 1, T, D, generator=g)
    k = 0.05 * torch.randn(1, 1, T, D, generator=g)
    c = 4.0
    q[0, 0, T - BS:T - N_QUESTION] += c * w  # filler queries of the last block look along w
    q[0, 0, T - N_QUESTION:] += c * u  # the question's queries look along u
    k[0, 0, NEEDLE * BS + 7] += (10.0 * math.sqrt(D) / c) * u  # one needle key: logit ~10
    for j in DECOYS:  # decoy blocks: every key at logit ~2 for the filler queries
        k[0, 0, j * BS:(j + 1) * BS] += (2.0 * math.sqrt(D) / c) * w
    return q, k


def _kept(mask, row=-1):
    return mask[0, 0, row].nonzero().flatten().tolist()


def test_answer_rows_keep_the_needle_the_block_mean_query_loses():
    q, k = _planted()
    mass = core.block_attention_mass(q, k, BS)[0, 0, -1]
    assert int(mass[1:-1].argmax()) + 1 == NEEDLE  # the true row mass: the needle leads
    new = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25)
    old = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, answer_queries=0)
    orc = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, method="oracle")
    ash = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, method="ashape")
    ans = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25,
                                        method="ashape_answer")
    assert NEEDLE in _kept(new) and NEEDLE in _kept(orc) and NEEDLE in _kept(ans)
    assert NEEDLE not in _kept(old) and NEEDLE not in _kept(ash)
    assert new.sum() == old.sum() == orc.sum()  # the same per-row budgets
    assert torch.equal(new[..., :-1, :], old[..., :-1, :])  # other rows: the composite estimate


def test_answer_rows_are_the_exact_row_mass_and_only_the_last_ones():
    q, k = _planted()
    valid = core.causal_block_valid(T, T, BS)
    exact = core.normalize_rows(core.block_attention_mass(q, k, BS), valid)
    sc = core.unisparse_scores(q, k, BS, ((BS, 1),), answer_queries=2 * BS + 1)
    base = core.unisparse_scores(q, k, BS, ((BS, 1),))
    r0 = core.answer_rows_start(T, BS, 2 * BS + 1)
    assert r0 == T // BS - 3  # 33 queries span three 16-query rows
    torch.testing.assert_close(sc[..., r0:, :], exact[..., r0:, :], atol=1e-5, rtol=1e-4)
    assert torch.equal(sc[..., :r0, :], base[..., :r0, :])
    assert not torch.allclose(base[..., -1, :], exact[..., -1, :], atol=1e-2)  # pooling differs
    assert core.answer_rows_start(T, BS, 0) == T // BS and core.answer_rows_start(10, BS, 64) == 0


def test_answer_rows_in_a_chunk_and_with_gqa():
    """A chunk (queries aligned to the last keys) and GQA: the answer rows still equal the
    exact mass of those rows."""
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 4, 80, 16, generator=g), torch.randn(1, 2, 112, 16, generator=g)
    valid = core.causal_block_valid(80, 112, BS)
    exact = core.normalize_rows(core.block_attention_mass(q, k, BS), valid)
    sc = core.unisparse_scores(q, k, BS, ((BS, 1),), answer_queries=20)
    torch.testing.assert_close(sc[..., -2:, :], exact[..., -2:, :], atol=1e-5, rtol=1e-4)


def test_negative_answer_queries_is_refused():
    from icml26_shared import UserError

    q, k = _planted()
    with pytest.raises(UserError, match="answer_queries"):
        unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, answer_queries=-1)


@pytest.mark.parametrize("method", ["xattention", "flexprefill", "minference"])
def test_baseline_answer_rows_change_only_the_answer_rows(method):
    """0.3.5: ``baseline_answer_rows`` re-picks a baseline's answer rows by their exact row mass
    (forced blocks first), each row keeping the count the baseline's own rule gave it; every
    other row is the baseline's own selection."""
    q, k = _planted()
    kw = dict(block_size=BS, density=0.25, method=method, last_q=64)
    own = unisparse.estimate_block_mask(q, k, **kw)
    ans = unisparse.estimate_block_mask(q, k, baseline_answer_rows=True, **kw)
    r0 = core.answer_rows_start(T, BS, 64)
    assert r0 == T // BS - 4
    assert torch.equal(ans[..., :r0, :], own[..., :r0, :])
    assert torch.equal(ans[..., r0:, :].sum(-1), own[..., r0:, :].sum(-1))  # same budget per row
    valid = core.causal_block_valid(T, T, BS)
    forced = core.forced_blocks(T, T, BS, 1, 1) & valid
    mass = core.block_attention_mass(q, k, BS)[0, 0]
    for r in range(r0, T // BS):
        n = int(own[0, 0, r].sum()) - int(forced[r].sum())
        top = mass[r].masked_fill(forced[r] | ~valid[r], -1.0).topk(n).indices
        want = forced[r].clone()
        want[top] = True
        assert torch.equal(ans[0, 0, r], want), r
    assert NEEDLE in _kept(ans)


def test_baseline_answer_rows_rescue_a_needle_a_baseline_loses():
    """The option is not a no-op here: at least one baseline loses the planted needle in the
    last row on its own and keeps it with the answer rows."""
    q, k = _planted()
    kw = dict(block_size=BS, density=0.25, last_q=64)
    lost = [m for m in ("xattention", "flexprefill", "minference")
            if NEEDLE not in _kept(unisparse.estimate_block_mask(q, k, method=m, **kw))]
    assert lost
    for m in lost:
        ans = unisparse.estimate_block_mask(q, k, method=m, baseline_answer_rows=True, **kw)
        assert NEEDLE in _kept(ans), m


def test_baseline_answer_rows_refused_without_own_selection():
    from icml26_shared import UserError

    q, k = _planted()
    with pytest.raises(UserError, match="baseline_answer_rows"):
        unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, method="ashape",
                                      baseline_answer_rows=True)


def test_the_comparison_runs_every_estimator_baseline_with_the_answer_row_rule():
    """Item 2 of issue 45: the fidelity and needle comparisons run XAttention, FlexPrefill and
    MInference by default with the answer-row rule, through the configs the studies build
    (``arm_config``, ``unit_metrics``): the rule-equipped arms keep the planted needle in the
    last row, and at least one published arm (no rule) loses it."""
    from unisparse.fidelity import ANSWER_BASELINES, DEFAULT_ARMS, arm_config, unit_metrics
    from unisparse.needle import NEEDLE_METHODS

    assert set(ANSWER_BASELINES) <= set(DEFAULT_ARMS) and set(ANSWER_BASELINES) <= set(NEEDLE_METHODS)
    assert "ashape_answer" in DEFAULT_ARMS and "ashape_answer" in NEEDLE_METHODS
    from unisparse.experiments import QUICK_ARMS, SCALES

    # quick's own comparison: the fidelity arms and every needle study's arms
    for arms in (QUICK_ARMS, *(q["methods"] for q in SCALES["quick"]["needles"])):
        assert {*ANSWER_BASELINES, "ashape_answer", "unisparse"} <= set(arms), arms
    for arm in ANSWER_BASELINES:
        assert arm_config(arm, BS, 0.25).baseline_answer_rows, arm
    q, k = _planted()
    arms = [*ANSWER_BASELINES, *(a.removesuffix("_answer") for a in ANSWER_BASELINES)]
    res = unit_metrics(q, k, k, arms, (0.25,), BS, [NEEDLE])
    for arm in ANSWER_BASELINES:
        assert res[(arm, 0.25)]["needle_hit"] == [1.0], arm
    assert any(res[(a.removesuffix("_answer"), 0.25)]["needle_hit"] == [0.0]
               for a in ANSWER_BASELINES)
