"""Steering must move the model's answers, not just its states: on a small toy trained here
(2 layers, 400 steps, seconds), the answer-contrast direction fitted on the text-context tokens
and added there moves the vision ratio toward vision for alpha > 0 and toward text for alpha < 0.
Switching the hook off, flipping the direction's sign, or steering at all positions instead
(where this toy does not decide) fails these tests.

``slow`` since 0.2.5: ``test_steer_late.py`` covers the same properties by default on the late toy
that ``quick`` steers (the signed direction at the context tokens and at all positions, a
flipped sign, a random direction, only the named positions touched)."""

from __future__ import annotations

import numpy as np
import pytest
from mc2_bench.baselines import direction
from mc2_bench.config import ToyConfig
from mc2_bench.protocol import alpha_sweep, hidden_pairs, state_position

pytestmark = pytest.mark.slow

POS = "context"


@pytest.fixture(scope="module")
def trained(toy_on_digits):
    cfg = ToyConfig(vision_preference=0.5, d_model=32, n_layers=2, n_heads=2, steps=400, batch=64)
    ad, dev, test = toy_on_digits(cfg)
    hv, ht = hidden_pairs(ad, dev, 0, "answer", at=state_position(POS))  # fitted on dev
    return ad, test, direction("diffmean", hv, ht, 0), hv.shape[1]


def _sweep(ad, test, v, positions=POS):
    rows = alpha_sweep(ad, test, [0], v, (-1.0, 0.0, 1.0), positions=positions, accuracy=False)
    return [r["vision_ratio"] for r in rows], rows


def test_the_direction_moves_the_preference_both_ways_at_the_context(trained):
    ad, test, v, _ = trained
    (neg, zero, pos), rows = _sweep(ad, test, v)
    assert pos >= zero + 0.15 and neg <= zero - 0.08, (neg, zero, pos)
    assert rows[2]["hook"]["positions"] == POS and rows[2]["hook"]["touched_positions"][0] > 0
    assert rows[1]["hook"]["touched_positions"][0] == 0  # alpha = 0 adds nothing


def test_a_flipped_sign_moves_it_the_other_way(trained):
    ad, test, v, _ = trained
    (neg, zero, pos), _ = _sweep(ad, test, -v)
    assert pos <= zero - 0.08 and neg >= zero + 0.15, (neg, zero, pos)


def test_a_random_direction_and_all_positions_do_not_steer(trained):
    ad, test, v, d = trained
    (neg, zero, pos), _ = _sweep(ad, test, np.random.default_rng(5).standard_normal(d))
    assert abs(pos - neg) < 0.15, (neg, zero, pos)
    (neg, zero, pos), _ = _sweep(ad, test, v, positions="all")  # this toy decides at the context
    assert not (pos >= zero + 0.15 and neg <= zero - 0.08), (neg, zero, pos)
