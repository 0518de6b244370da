"""``full`` (the GPU recipe) with training and timing stubbed: it times the paper preset at
Craftax's goal counts, not the CPU preset, and trains every method at its script's defaults."""

import numpy as np
from leo_craftax import bench, experiments, train
from leo_craftax.config import ALGO_DEFAULTS


def test_full_uses_the_paper_preset(monkeypatch, tmp_path):
    import jax

    calls, trained = [], []

    def speed_table(ks, *, preset="cpu", **kw):
        calls.append(("per_update", tuple(ks), preset))
        return [{"K": k, **{f"{a}_s": 1.0 for a in bench.ARMS},
                 **{f"per_update_ratio_{a}": 300.0 for a in bench.ARMS if a != "leo"},
                 "recompute_cost": 1.2,
                 **bench.cost_model(k, obs_dim=8268, width=1024, layers=4, num_actions=43,
                                    batch=512)} for k in ks]

    def train_step_table(sides, **kw):
        calls.append(("train_step", tuple(sides), kw.get("width"), kw.get("num_envs")))
        return []

    def train_seeds(cfg, seeds, *a, **kw):
        trained.append(cfg)
        return {"success": np.full((len(seeds), cfg.num_evals + 1, 4), 0.5)}

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(bench, "speed_table", speed_table)
    monkeypatch.setattr(bench, "train_step_table", train_step_table)
    monkeypatch.setattr(train, "train_seeds", train_seeds)
    res = experiments._full(tmp_path, 0)
    assert ("per_update", (136, 512), "paper") in calls
    assert ("train_step", (12, 23), 1024, 1024) in calls  # leo.py's sizes for the whole step
    speed = next(c for c in res.claims if c.claim_id == "speedup")
    assert "paper preset" in speed.note and speed.ours == 300.0
    for cfg in trained:  # each at its script's defaults [C]
        for key, value in ALGO_DEFAULTS.get(cfg.algo, {}).items():
            assert getattr(cfg, key) == value, (cfg.algo, key)
    assert {c.algo for c in trained} >= {"leo", "pqn", "pqn_her"}
