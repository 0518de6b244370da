"""``nbcg tune`` (issue 48 item 3): each arm's learning rate chosen on dev of tuning seeds disjoint
from the reported ones, no test split read; quick reads the shipped choice."""

import json

import numpy as np
import pytest
from nbcg import experiments


def test_tune_picks_each_arms_best_dev_lr_and_reads_no_test(monkeypatch):
    calls = []

    def fake_run(recs, seed, spec, feats, extra, world, emb, lrs, score_tests):
        calls.append((seed, score_tests, dict(lrs)))
        lr = next(iter(lrs.values()))
        # arm a peaks at 0.03, arm b at the smallest rate; nbcg / lstar are not rows of their own
        f = {"a": 1 - abs(lr - 0.03), "b": 1 - lr, "nbcg": 9.0, "lstar": 9.0}
        return {"arms": {k: {"dev_macro_f1": v, "best_epoch": 3, "curve": {"stopped_at": 5}}
                         for k, v in f.items()}}

    import nbcg.runs

    monkeypatch.setattr(nbcg.runs, "run_dataset_seed", fake_run)
    monkeypatch.setattr(experiments, "_datasets", lambda spec, s: [("synthetic", [], {"epochs": 7}, {}, None)])
    out = experiments.tune(("synthetic",), lrs=(0.01, 0.03, 0.1), seeds=(100,), scale="smoke")
    assert {c[0] for c in calls} == {100} and not any(c[1] for c in calls)     # tuning seed, no test split
    assert all(len(set(c[2].values())) == 1 for c in calls)                     # one rate for every arm per run
    assert out["chosen"]["synthetic"]["a"]["lr"] == 0.03 and out["chosen"]["synthetic"]["b"]["lr"] == 0.01
    assert "nbcg" not in out["chosen"]["synthetic"] and len(out["rows"]) == 6


def test_run_dataset_seed_tuning_mode_scores_no_test_split(monkeypatch):
    import nbcg.core
    from nbcg.runs import run_dataset_seed, synthetic_records

    def boom(*a, **k):
        raise AssertionError("a test split was scored while tuning")

    monkeypatch.setattr(nbcg.core, "multilabel_scores", boom)
    recs, world = synthetic_records(400, world_seed=7, seed=8)
    spec = {**experiments.SCALES["smoke"], "epochs": 1}
    out = run_dataset_seed(recs, 7, spec, "tfidf", {}, world, None, lrs={"bce": 0.05}, score_tests=False)
    assert out["arms"]["bce"]["lr"] == 0.05 and out["arms"]["asl"]["lr"] == 1e-2
    assert all("iid" not in r and 0 <= r["dev_macro_f1"] <= 1 for r in out["arms"].values())


def test_shipped_tuning_covers_every_arm_and_its_curves_end_before_the_cap():
    tuned = experiments.load_tuned()
    assert tuned is not None, "nbcg/tuned_quick.json is missing"
    assert set(tuned["seeds"]).isdisjoint(range(3))          # apart from quick's reported seeds 0, 1, 2
    assert tuned["grid"]["lr"] == list(experiments.LR_GRID) and tuned["patience"] == experiments.SCALES["quick"]["patience"]
    for ds, cap in (("synthetic", experiments.SCALES["quick"]["epochs"]),
                    ("pyapi", experiments.SCALES["quick"]["pyapi_epochs"])):
        assert set(tuned["chosen"][ds]) == set(experiments._tuned_arms())
        for arm, c in tuned["chosen"][ds].items():
            rows = [r for r in tuned["rows"] if r["dataset"] == ds and r["arm"] == arm]
            assert c["dev_macro_f1"] == pytest.approx(max(np.mean([r["dev_macro_f1"] for r in rows if r["lr"] == lr])
                                                          for lr in tuned["grid"]["lr"]), abs=1e-4)
            assert max(c["best_epoch"]) < cap, (ds, arm)      # the chosen rate plateaued before the cap


def test_quick_refuses_seeds_that_overlap_the_tuning_seeds(tmp_path):
    from icml26_shared import UserError

    with pytest.raises(UserError, match="tuning seeds"):
        experiments.reproduce("quick", tmp_path, 99)        # 99, 100, 101 overlap 100
    assert json.loads(json.dumps(experiments.load_tuned()["chosen"]))   # plain JSON
