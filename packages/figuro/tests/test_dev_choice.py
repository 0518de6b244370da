"""The inclusion–exclusion baseline is chosen on the dev simulations, never on the reported grid."""

from figuro import experiments
from figuro.experiments import CFG, dev_ie_choice


def _fake_estimate(bias):
    """An IE estimator answering a fixed shared rank per estimator."""
    def est(name, views, seed):
        return {"shared": bias[name], "private": [0.0, 0.0]}
    return est


def test_ie_choice_is_the_dev_minimiser(monkeypatch):
    cfg = {**CFG["quick"], "n": 200, "dim": 10}
    # shared 3 in the first dev sim, 1 in the second: an estimator answering 2 is off by 1 on
    # shared each time; one answering 30 is far off
    monkeypatch.setattr(experiments.baselines, "estimate",
                        _fake_estimate({"twonn": 30.0, "mle": 2.0, "lpca": 40.0, "danco": 20.0}))
    best, err = dev_ie_choice(cfg, seed=0)
    assert best == "mle-ie"
    assert set(err) == {"twonn-ie", "mle-ie", "lpca-ie", "danco-ie"}
    assert all(len(v) == len(experiments.DEV_SIMS) for v in err.values())


def test_ie_choice_does_not_read_the_reported_grid(monkeypatch):
    cfg = {**CFG["quick"], "n": 200, "dim": 10, "classical": ("twonn", "lpca")}
    ref = dev_ie_choice(cfg, seed=0)
    garbage = {**cfg, "grid": (("garbage", None, -1),), "seeds": "garbage"}
    monkeypatch.setattr(experiments, "GRID", (("garbage",),))
    again = dev_ie_choice(garbage, seed=0)
    assert again[0] == ref[0]
    assert again[1] == ref[1]


def test_no_classical_estimators_falls_back_to_ajive():
    assert dev_ie_choice({**CFG["smoke"]}, seed=0) == ("ajive", {})
