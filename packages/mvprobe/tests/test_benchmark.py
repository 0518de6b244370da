"""The harder mini jungle (issue 58 item 6): the generator knobs change the zoo, and the benchmark
is chosen from the baselines' val accuracy only."""

from __future__ import annotations

import copy

import numpy as np
import torch
from mvprobe.config import ProbeConfig, TrainConfig, ZooConfig
from mvprobe.experiments import HARD_RULE, choose_benchmark, screen_candidate
from mvprobe.zoo import make_model_zoo, train_ancestor

TINY = dict(n_models=40, ancestor_steps=20, batch=8, hidden=16)


def test_the_generator_knobs_change_the_zoo_and_nothing_else():
    ancestor = train_ancestor(ZooConfig(**TINY), 0)  # the knobs act after the shared ancestor
    base = make_model_zoo(ZooConfig(steps=(4, 8), **TINY), ancestor=ancestor)
    short = make_model_zoo(ZooConfig(steps=(1, 2), **TINY), ancestor=ancestor)
    noisy = make_model_zoo(ZooConfig(steps=(4, 8), weight_noise=0.25, **TINY), ancestor=ancestor)
    for other in (short, noisy):
        assert np.array_equal(other.labels, base.labels)  # same labels and split, other weights
        assert all(np.array_equal(other.split[p], base.split[p]) for p in base.split)
        assert not torch.allclose(other.weights["fc2.weight"], base.weights["fc2.weight"])
    # fewer steps: the children stay closer to the ancestor
    anc = base.weights["fc2.weight"].mean(0, keepdim=True)
    assert (short.weights["fc2.weight"] - anc).norm() < (base.weights["fc2.weight"] - anc).norm()


def test_the_choice_reads_val_only():
    zoo = make_model_zoo(ZooConfig(steps=(2, 6), **TINY))
    probe, train = ProbeConfig(n_probes=4, proj_dim=4, rep_dim=8), TrainConfig(epochs=3, patience=None)
    statnn = dict(grid=({"learning_rate": 0.1, "max_leaf_nodes": 7},), max_iter=5)
    clean = screen_candidate(zoo, "fc2", probe, train, statnn)
    garbage = copy.deepcopy(zoo)  # the test models' weights and labels made nonsense
    te = torch.as_tensor(garbage.split["test"])
    for k in garbage.weights:
        garbage.weights[k][te] = float("nan")
    garbage.labels[garbage.split["test"]] = 7.0
    assert screen_candidate(garbage, "fc2", probe, train, statnn) == clean
    vals = {"a": clean, "b": {**clean, "probex": 0.95}}
    assert choose_benchmark(vals) == choose_benchmark(copy.deepcopy(vals))


def test_the_rule_keeps_the_band_and_picks_the_paper_like_one():
    lo, hi = HARD_RULE["probex_band"]
    v = {"easy": {"probex": 0.97, "statnn": 0.6}, "trivial_trees": {"probex": 0.82, "statnn": 0.85},
         "near": {"probex": 0.80, "statnn": 0.6}, "far": {"probex": 0.72, "statnn": 0.6},
         "chance": {"probex": 0.55, "statnn": 0.5}}
    assert choose_benchmark(v) == "near"
    assert choose_benchmark({k: v[k] for k in ("easy", "chance", "trivial_trees")}) is None
    assert lo > 0.5 and hi <= 0.90  # above the label prior, at or below the ceiling rule


def test_the_long_scale_runs_the_picked_knobs(monkeypatch, tmp_path):
    from mvprobe import experiments as ex
    from mvprobe.registry import DESCRIPTOR

    assert "long" in DESCRIPTOR.scales and ex.HARD_PICK in ex.HARD_CANDIDATES
    assert choose_benchmark(ex.HARD_SCREEN) == ex.HARD_PICK  # the recorded screen gives the pick
    long = ex.SCALES["long"]
    pick = ex.HARD_CANDIDATES[ex.HARD_PICK]
    assert long["layer"] == pick["layer"] and all(long["zoo"][k] == v for k, v in pick["zoo"].items())
    assert {"mvprobe", "probex", "probex4", "prior"} <= set(long["arms"])
    tiny = dict(ex.SCALES["smoke"], zoo=dict(ex.SCALES["smoke"]["zoo"], steps=(1, 3)), arms=long["arms"],
                experiment="hard_jungle_tiny")
    monkeypatch.setitem(ex.SCALES, "long", tiny)
    res = ex._jungle("long", tmp_path, 0)
    assert {r.method for r in res.rows if r.experiment == "hard_jungle_tiny"} >= set(long["arms"])
    assert any(r.experiment == "hard_jungle_screen" and r.extra["split"] == "val" for r in res.rows)
    by_id = {c.claim_id: c for c in res.claims}
    assert by_id["no_std_below"].status == "not evaluated"
