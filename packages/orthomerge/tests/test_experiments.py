"""The reproduction's bookkeeping: nothing chosen on test."""

from __future__ import annotations

import math

from orthomerge.experiments import _equal_accuracy


def _rows(dev, test, forget):
    return [{"scale": s, "density": 0.2, "dev_norm": d, "test_norm": t, "test_base": 0.9 - f}
            for s, d, t, f in zip((0.5, 1.0, 2.0), dev, test, forget, strict=True)]


def test_equal_accuracy_level_comes_from_dev_and_test_never_caps_it():
    run = {"base": {"test": 0.9}, "oft": {
        "orthomerge": _rows((0.6, 0.8, 0.9), (0.6, 0.7, 0.75), (0.0, 0.1, 0.2)),  # test tops out at 0.75
        "ta": _rows((0.5, 0.85, 0.95), (0.6, 0.85, 0.95), (0.0, 0.2, 0.4)),
    }}
    chosen = {"oft:orthomerge": {"i": 2}, "oft:ta": {"i": 2}}
    f_om, f_ta, levels = _equal_accuracy([run], chosen, "oft", "orthomerge", "ta")
    assert levels == [90.0]  # min over the two methods of their best dev accuracy, not capped at 75
    assert math.isnan(f_om[0])  # not reached on test: no verdict from a test-capped level
    # TA reaches 0.9 on test between 0.85 (forgetting 0.2) and 0.95 (0.4): interpolated 0.3
    assert abs(f_ta[0] - 30.0) < 1e-9
