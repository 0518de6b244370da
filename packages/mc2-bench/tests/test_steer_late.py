"""The late toy (``ToyConfig(arch="late")``) decides its answer source at the answer position in
its last layer, so the answer-contrast direction fitted at the last prompt position after the
content-blind gather layer steers it in the signed direction; a flipped sign steers it the other
way, and a random direction of the same norm does not. A 4-layer toy trained here (450 steps,
~25 CPU-s: smaller late toys, 3 layers or width 32, did not learn the instruction in 400 steps)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mc2_bench.baselines import direction
from mc2_bench.config import ToyConfig
from mc2_bench.offline.toy import N_PATCH, ToyVLM, load_digits
from mc2_bench.protocol import alpha_sweep, amps_stats, hidden_pairs

LAYER = 2  # the gather layer's output: what the deciding last layer reads with


def test_late_layers_attend_as_built():
    torch.manual_seed(0)
    model = ToyVLM(ToyConfig(arch="late", n_layers=3, d_model=16, n_heads=2)).eval()
    assert [b.attend for b in model.layers] == ["segment", "mean", "decide"]
    X, _ = load_digits()
    a, pa = model.encode(1, X[0], 3, 5, "single", 0, None)
    b, pb = model.encode(1, X[1], 3, 5, "single", 0, None)
    with torch.no_grad():
        _, ha = model(torch.from_numpy(a[None]), torch.from_numpy(pa[None]), hidden=True)
        _, hb = model(torch.from_numpy(b[None]), torch.from_numpy(pb[None]), hidden=True)
    ctx = slice(1 + N_PATCH, 4 + N_PATCH)  # a segment layer keeps the image out of the context
    assert torch.equal(ha[0][0, ctx], hb[0][0, ctx]) and not torch.equal(ha[0][0, 1], hb[0][0, 1])
    assert not torch.equal(ha[1][0, -1], hb[1][0, -1])  # the gather layer brings it to the answer


@pytest.fixture(scope="module")
def trained(toy_on_digits):
    cfg = ToyConfig(vision_preference=0.5, d_model=48, n_layers=4, n_heads=4, steps=450, batch=64,
                    arch="late")
    ad, dev, test = toy_on_digits(cfg)
    hv, ht = hidden_pairs(ad, dev, LAYER, "answer")  # last prompt position, fitted on dev
    v = direction("diffmean", hv, ht, 0)
    cv, ct = hidden_pairs(ad, dev, 0, "answer", at="context")  # quick chose layer 0 (0.2.5) and 1 (0.2.6) here
    return ad, test, v, hv.shape[1], amps_stats(hv, ht, v), direction("diffmean", cv, ct, 0)


def _sweep(ad, test, v):
    rows = alpha_sweep(ad, test, [LAYER], v, (-0.6, 0.0, 0.6), positions="all", accuracy=False)
    return [r["vision_ratio"] for r in rows], rows


def test_the_late_toy_is_steered_in_the_signed_direction(trained):
    ad, test, v, _, _, _ = trained
    (neg, zero, pos), rows = _sweep(ad, test, v)
    assert pos >= zero + 0.25 and neg <= zero - 0.25, (neg, zero, pos)
    assert rows[2]["hook"]["touched_positions"][LAYER] > 0 and rows[1]["hook"]["touched_positions"][LAYER] == 0
    (neg, zero, pos), _ = _sweep(ad, test, -v)  # a flipped sign moves it the other way
    assert pos <= zero - 0.25 and neg >= zero + 0.25, (neg, zero, pos)


def test_a_random_direction_does_not_steer_the_late_toy(trained):
    ad, test, v, d, _, _ = trained
    r = np.random.default_rng(5).standard_normal(d)
    (neg, zero, pos), _ = _sweep(ad, test, r)
    assert abs(pos - neg) < 0.15 and abs(pos - zero) < 0.15, (neg, zero, pos)


def test_amps_steers_the_late_toy_toward_vision_and_the_sign_matters(trained):
    # per-instance scaling must keep the shift (a flipped weight sign or an unclipped w would not)
    ad, test, v, _, stats, _ = trained
    rows = alpha_sweep(ad, test, [LAYER], v, (0.0, 0.6), positions="all", adaptive="amps",
                       amps_stats=stats, accuracy=False)
    zero, pos = (r["vision_ratio"] for r in rows)
    assert pos >= zero + 0.25, (zero, pos)
    rows = alpha_sweep(ad, test, [LAYER], v, (0.0, -0.6), positions="all", adaptive="amps",
                       amps_stats=stats, accuracy=False)
    zero, neg = (r["vision_ratio"] for r in rows)
    assert neg <= zero - 0.25, (zero, neg)


def test_the_context_tokens_at_layer_0_steer_it_too_and_only_they_are_touched(trained):
    ad, test, _, _, _, vc = trained
    rows = alpha_sweep(ad, test, [0], vc, (-0.6, 0.0, 0.6), positions="context", accuracy=False)
    neg, zero, pos = (r["vision_ratio"] for r in rows)
    assert pos >= zero + 0.25 and neg <= zero - 0.25, (neg, zero, pos)
    assert rows[2]["hook"]["positions"] == "context" and rows[1]["hook"]["touched_positions"][0] == 0
    assert rows[2]["hook"]["touched_positions"][0] == 3 * 2 * len(test)  # CTX, source, digit; 2 orders
    rows = alpha_sweep(ad, test, [0], -vc, (-0.6, 0.0, 0.6), positions="context", accuracy=False)
    neg, zero, pos = (r["vision_ratio"] for r in rows)  # a flipped sign: the other way
    assert pos <= zero - 0.25 and neg >= zero + 0.25, (neg, zero, pos)
