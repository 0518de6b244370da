"""`quick` trains each toy until its DEV figures meet the toy targets or a step cap (0.2.4): a warm
restart continues the given toy, the rule stops as soon as dev meets the targets, and it never
reads beyond the items it is given (dev). Seconds: toys of a few steps."""

from __future__ import annotations

import numpy as np
import torch
from mc2_bench.config import ToyConfig
from mc2_bench.offline import experiments
from mc2_bench.offline.digits import digits_items
from mc2_bench.offline.experiments import _split, _train_to_dev_targets
from mc2_bench.offline.toy import load_digits, train_toy

CFG = dict(steps=3, batch=8, arch="late", restarts=2, restart_steps=2)


def _data():
    X, y = load_digits()
    tr, dv, _ = _split(len(y))
    pairs = digits_items(X, y, dv[:6], 1, prefix="dev")
    return X[tr], y[tr], [p[0] for p in pairs], {it.image: im for it, im in pairs}


def test_restart_continues_the_given_toy():
    X, y, _, _ = _data()
    cfg = ToyConfig(steps=2, batch=8, arch="late")
    toy = train_toy(cfg, X, y, seed=0)
    before = [p.detach().clone() for p in toy.parameters()]
    fresh = train_toy(cfg, X, y, seed=0, round_=1)
    cont = train_toy(cfg, X, y, seed=0, init=toy, round_=1)
    assert cont is toy and not cont.training
    moved = [(p - b).abs().max().item() for p, b in zip(cont.parameters(), before)]
    assert max(moved) > 0 and max(moved) < 0.1  # small steps away from the init
    assert any(not torch.equal(p, q) for p, q in zip(cont.parameters(), fresh.parameters()))


def test_rule_restarts_until_dev_targets_then_stops(monkeypatch):
    X, y, dev, images = _data()
    seen = []
    real = experiments.evaluate

    def fake(ad, items, mode, **kw):  # dev misses the targets on the first check only
        seen.append(items)
        out = real(ad, items, mode, **kw)
        good = len(seen) > 2
        out["vision_ratio"] = 0.5 if good else 0.9
        out["order_consistency"] = 1.0
        out["instruction_following"] = 1.0 if good else 0.5
        return out

    monkeypatch.setattr(experiments, "evaluate", fake)
    _, steps, fit, curve = _train_to_dev_targets(0.5, CFG, X, y, dev, images, seed=0)
    assert steps == 3 + 2 and fit["instruction_following"] == 1.0
    assert curve["dev_steps"] == [3, 5] and curve["dev"] == [0.4, 0.0]  # the dev curve per round
    assert all(items is dev for items in seen)


def test_rule_stops_at_the_step_cap():
    X, y, dev, images = _data()
    _, steps, fit, curve = _train_to_dev_targets(0.5, CFG, X, y, dev, images, seed=0)
    assert curve["loss_steps"][0] == 1 and len(curve["loss"]) == len(curve["loss_steps"]) >= 3
    assert steps == 3 + 2 * 2  # a 3-step toy misses the targets: every restart runs, then the cap
    assert np.isfinite(fit["vision_ratio"]) and set(fit) == {
        "vision_ratio", "order_consistency", "instruction_following"}
