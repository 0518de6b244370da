"""The dev-only tuning pass (issue 49, item 4): anchors equal the trivial predictors' task losses,
the plateau rule, and a tiny end-to-end pass that never touches test."""

from __future__ import annotations

import numpy as np
import torch
from core_mtl import tuning
from core_mtl.experiments import TASKS, anchor_predictions, to_batch
from core_mtl.losses import task_losses
from core_mtl.synthetic import make_split


def test_anchor_losses_are_the_trivial_predictors_losses():
    tr = to_batch(make_split(24, 16, seed=5))
    dev = to_batch(make_split(12, 16, seed=6))
    a = tuning.anchor_losses(TASKS, tr, dev)
    p = anchor_predictions(tr, len(dev))
    tasks = {t.name: t for t in TASKS}
    L = task_losses(tasks, {"depth": torch.from_numpy(p["depth"]), "normal": torch.from_numpy(p["normal"])},
                    dev.targets)
    np.testing.assert_allclose(a[1:], [float(L["depth"]), float(L["normal"])], rtol=1e-5)
    assert a[0] > 0  # the class-frequency cross-entropy


def test_plateau_budget_is_the_smallest_within_two_percent():
    runs = [{"arm": a, "epochs": b, "best": v, "lr": 1e-3}
            for a, vals in (("ew", (0.9, 0.7, 0.69, 0.688)), ("core", (1.0, 0.8, 0.70, 0.695)))
            for b, v in zip((4, 8, 16, 32), vals)]
    assert tuning.plateau_budget(runs) == 16  # worst arm: 8 -> 16 gains 12%, 16 -> 32 under 1%
    runs[-1]["best"] = 0.60  # core still improving at 32: the plateau is not reached before it
    assert tuning.plateau_budget(runs) == 32


def test_train_data_do_not_depend_on_the_shift():
    """Item 6's premise: one trained model can be scored on both OOD shifts."""
    a = make_split(6, 16, seed=3, split="train", shift="color")
    b = make_split(6, 16, seed=3, split="train", shift="light")
    assert all(np.array_equal(a[k], b[k]) for k in ("image", "label", "depth", "normal"))
    c = make_split(6, 16, seed=3, split="test_ood", shift="light")
    assert not np.array_equal(c["image"], make_split(6, 16, seed=3, split="test", shift="light")["image"])


def test_smoke_reproduction_scores_both_shifts_with_anchors_and_curves(tmp_path):
    from core_mtl.experiments import reproduce

    res = reproduce("smoke", tmp_path)
    ids = {c.claim_id for c in res.claims}
    assert {"ood_delta_m", "ood_delta_m_light", "ood_drop_light"} <= ids
    rows = {(r.method, r.metric) for r in res.rows}
    assert ("core - core-no-cfa", "dm_ood_light") in rows and ("anchor", "id_seg_miou") in rows
    assert ("ew-1:1:1", "dm_id") in rows
    metrics = {(c.method, c.metric, c.split) for c in res.curves}
    assert ("core", "seg dev loss", "dev") in metrics and ("single", "normal train loss", "train") in metrics


def test_tune_runs_the_lr_pass_at_lr_budget_and_picks_the_lowest_dev_loss():
    res = tuning.tune({"ew": {}, "single": {}}, lrs=(1e-3, 1e-2), budgets=(1, 2), budget_arms=("ew",),
                      budget_lrs=(1e-2,), lr_budget=1, seed=11, size=16, n_train=24, n_dev=8, batch_size=8)
    assert res["lr_budget"] == 1 and res["seed"] == 11
    lr_pass = [r for r in res["runs"] if r["epochs"] == 1]
    assert {(r["arm"], r["lr"]) for r in lr_pass} == {("ew", 1e-3), ("ew", 1e-2), ("single", 1e-3), ("single", 1e-2)}
    for arm in ("ew", "single"):
        mine = [r for r in lr_pass if r["arm"] == arm]
        assert res["lr"][arm] == min(mine, key=lambda r: r["best"])["lr"]
    assert "| ew | 0.01 | 2 |" in tuning.table(res)
