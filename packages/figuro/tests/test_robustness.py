"""Issue 63 item 6: robustness over configurations × seeds, with intervals (wiring and
arithmetic on a scripted fit; the real study is a documented command, too costly for tests)."""

from types import SimpleNamespace

import numpy as np
from figuro import experiments
from figuro.config import FiGuROConfig


def test_robustness_study_spreads_and_claims(monkeypatch):
    # FiGuRO's shared estimate: 2 at every setting except λ = 0.1 (→ 3): spread 1 in every unit
    def fake_fig(base, views, seed, **over):
        return SimpleNamespace(shared_dim_=3 if over.get("distortion_threshold") == 0.1 else 2)

    # MLE-IE's shared estimate grows with K: spread (50 - 5) / 10 = 4.5 in every unit
    def fake_estimate(name, views, seed=0, params=None):
        assert name == "mle"
        return {"shared": params["K"] / 10, "private": [0.0, 0.0]}

    monkeypatch.setattr(experiments, "_fig", fake_fig)
    monkeypatch.setattr(experiments.baselines, "estimate", fake_estimate)
    res = experiments.robustness_study(base=FiGuROConfig(), n=40, dim=5)
    spread = res.get("robustness_grid", "figuro", "shared_spread")
    assert spread.value == 1.0 and len(spread.seeds) == 3
    assert res.get("robustness_grid", "mle-ie", "shared_spread").value == np.float64(4.5)
    units = [r for r in res.rows if r.metric == "shared_estimates" and r.method == "figuro"]
    assert len(units) == 9  # 3 configurations × 3 seeds
    assert units[0].extra["settings"] == [[0.05, 32], [0.1, 32], [0.05, 16], [0.05, 64]]
    claims = {c.claim_id: c for c in res.claims}
    assert claims["robust_spread"].held is True            # 1 <= 1, zero-width interval
    assert claims["robust_vs_skdim"].held is True          # 1 - 0.5 × 4.5 < 0
