"""The reproduction's dev rule and its mechanism guards: the dev grid runs the full schedule and its
winning run is the first seed's final run (identical weights), a diverging setting loses instead of
crashing the reproduction, and FLAM's per-entity factorisation is on in every scale's FLAM config."""

from __future__ import annotations

import pytest
import torch
from flam_wm import experiments as ex
from flam_wm.config import TrainConfig
from flam_wm.core import WorldModel
from flam_wm.sprites import generate
from flam_wm.train import train

CFG = {
    **ex.CFG["smoke"],
    "lr": (2e-3, 3e-3),
    "beta": (0.01, 0.03),
    "k_offset": (1, 2),
    "steps": 3,
    "grid_steps": 3,
    "unroll": 2,
    "unroll_from": 1,
    "horizon": 3,
}


@pytest.fixture(scope="module")
def data():
    video, acts = generate(2, 12, 5, size=32, seed=3)
    return video, acts, ex._split(12)


def test_grid_winner_is_the_first_seeds_run_and_every_coordinate_is_searched(data):
    video, _, sl = data
    log: list = []
    chosen, won = ex._choose(("flam", "lam"), 2, CFG, video, sl, 0, log)
    # stage 1: both lr; stage 2 around the winner: the other beta (both models) and the other K (FLAM only)
    assert [(r["model"], r["stage"]) for r in log].count(("flam", 1)) == 2 and len(
        log
    ) == 2 + 2 + 2 + 1
    for name in ("flam", "lam"):
        rows = [r for r in log if r["model"] == name]
        best = max(rows, key=lambda r: r["dev_psnr_h"])
        assert {k: best[k] for k in ("lr", "beta", "k_offset", "free_bits")} == chosen[name]
        mcfg = ex._model_cfg(name, 2, CFG["width"], chosen[name], None, CFG["unroll"])
        fresh = train(
            mcfg,
            TrainConfig(
                steps=3,
                batch_size=CFG["batch"],
                window=5,
                lr=chosen[name]["lr"],
                seed=0,
                unroll_from=1,
                **ex._starts(CFG, 3),  # 0.9.4: best-of-2 starts, as the grid ran them
            ),
            video[sl[0]],
        )
        state, cpu, start = won[name]
        assert fresh.train_info["starts"] == 2 and start == fresh.train_info["start"] and cpu > 0 and all(
            torch.equal(torch.from_numpy(state[k]), v) for k, v in fresh.state_dict().items()
        )


def test_one_lr_runs_both_stages_of_the_dev_grid_at_once(data, monkeypatch):
    """0.9 (quick has one lr): stage 2's candidates are known before stage 1 ends, so all five dev
    runs go to the pool in one batch; the same candidates as the two-stage search around that lr."""
    video, _, sl = data
    calls: list = []
    real = ex._map
    monkeypatch.setattr(ex, "_map", lambda pool, fn, jobs: calls.append(len(jobs)) or real(pool, fn, jobs))
    log: list = []
    ex._choose(("flam", "lam"), 2, {**CFG, "lr": (3e-3,)}, video, sl, 0, log)
    assert calls == [5] and all(r["lr"] == 3e-3 for r in log)
    assert [(r["model"], r["stage"], r["beta"], r["k_offset"]) for r in log] == [
        ("flam", 1, 0.01, 1), ("lam", 1, 0.01, 1), ("flam", 2, 0.03, 1), ("flam", 2, 0.01, 2), ("lam", 2, 0.03, 1)]


def test_lams_grid_searches_the_free_bits_floor_and_its_winner_trains_with_it(data):
    """0.9.2: quick's lam gets the floor FLAM got (its candidates 0 and the configured value, one
    coordinate in stage 2); the winning floor reaches lam's ModelConfig; lam-vq (no KL) gets none."""
    video, _, sl = data
    cfg = {**CFG, "lr": (3e-3,), "beta": (0.01,), "free_bits": (0.0, 6.4)}
    assert [c["free_bits"] for c in ex._candidates("lam-vq", cfg, {"lr": 3e-3})] == []
    log: list = []
    chosen, _ = ex._choose(("lam",), 2, cfg, video, sl, 0, log)
    assert [(r["stage"], r["free_bits"]) for r in log] == [(1, 0.0), (2, 6.4)]
    best = max(log, key=lambda r: r["dev_psnr_h"])
    assert chosen["lam"]["free_bits"] == best["free_bits"]
    m = ex._model_cfg("lam", 2, CFG["width"], {**chosen["lam"], "free_bits": 6.4}, None, 2)
    assert m.model == "lam" and m.slots == 1 and m.free_bits == 6.4 and m.local_sigma == 0
    assert ex._model_cfg("lam", 2, CFG["width"], {"beta": 0.01}, None).free_bits == 0.0


def test_a_diverging_setting_loses_on_dev_and_is_logged(data, monkeypatch):
    video, _, sl = data
    real = ex.train

    def flaky(mcfg, tcfg, *a, **k):
        if tcfg.lr == 3e-3:
            raise FloatingPointError("training diverged: non-finite gradient at step 2")
        return real(mcfg, tcfg, *a, **k)

    monkeypatch.setattr(ex, "train", flaky)
    log: list = []
    cfg = {**CFG, "beta": (0.01,), "k_offset": (1,)}
    chosen, _ = ex._choose(("lam",), 2, cfg, video, sl, 0, log)
    assert chosen["lam"]["lr"] == 2e-3
    assert [r["diverged"] != "" for r in log] == [False, True]
    monkeypatch.setattr(
        ex, "train", lambda *a, **k: (_ for _ in ()).throw(FloatingPointError("nan"))
    )
    with pytest.raises(FloatingPointError, match="every dev-grid run of lam diverged"):
        ex._choose(("lam",), 2, cfg, video, sl, 0, [])


@pytest.mark.parametrize("scale", ["smoke", "quick", "full"])
def test_every_scale_runs_flam_with_per_entity_slots_and_latents(scale):
    cfg = ex.CFG[scale]
    for e in cfg["entities"]:
        for k in cfg["k_offset"]:
            for beta in cfg["beta"]:
                m = ex._model_cfg(
                    "flam",
                    e,
                    cfg["width"],
                    {"beta": beta, "k_offset": k},
                    None,
                    cfg.get("unroll", 1),
                )
                assert m.model == "flam" and m.slots == e + k > 1 and m.temporal and m.beta > 0
                assert m.slot_latent * m.slots == m.latent_dim and m.slot_latent < m.latent_dim


def test_each_slots_latent_action_depends_on_that_slot_only():
    """Per-entity factorisation: slot k's posterior and next state see slot k's own states and latent
    (other slots reach the FDM's state only through its cross-slot attention), so a monolithic IDM
    (one latent from every slot) or a K = 1 model fails here."""
    model = WorldModel(ex._model_cfg("flam", 2, 16, {"beta": 0.01, "k_offset": 1}, None))
    s = torch.randn(2, 3, model.cfg.slots, model.cfg.width + 2)  # a slot's features and position (0.7)
    s2 = s.clone()
    s2[:, :, 0] += 1.0  # move slot 0 only
    mu, _ = model.infer(s)
    mu2, _ = model.infer(s2)
    change = (mu - mu2).abs().amax((0, 1, 3))
    assert model.cfg.slots == 3 and mu.shape[-2:] == (3, model.cfg.latent_dim // 3)
    assert change[0] > 1e-3 and torch.all(change[1:] == 0)


def test_every_model_of_every_scale_trains_with_best_of_2_starts(monkeypatch):
    """0.9.4 (README, "Dev check of best-of-R starts"): quick's final runs 2 x 200 steps, its dev grid the
    same share of its 400 steps, full a quarter of 3000; every model the same (the rule is the runner's)."""
    assert ex._starts(ex.CFG["quick"], 800) == {"starts": 2, "start_steps": 200}
    assert ex._starts(ex.CFG["quick"], 400) == {"starts": 2, "start_steps": 100}
    assert ex._starts(ex.CFG["full"], 3000) == {"starts": 2, "start_steps": 750}
    assert ex._starts({"steps": 10}, 10) == {}
    seen = []

    def fake(mcfg, tcfg, *a, **k):
        seen.append((mcfg.model, tcfg.steps, tcfg.starts, tcfg.start_steps))
        raise FloatingPointError("stop here")

    monkeypatch.setattr(ex, "train", fake)
    q = ex.CFG["quick"]
    for name in ("flam", "lam"):
        ex._grid_run(name, 4, q, {"lr": 3e-3, "beta": 0.01}, torch.zeros(2), (slice(0, 1),) * 3, 0, None)
        mcfg = ex._model_cfg(name, 4, q["width"], {"lr": 3e-3, "beta": 0.01})
        with pytest.raises(FloatingPointError):
            ex._one_run(name, 4, 0, mcfg, 3e-3, q, torch.zeros(2), None, (slice(0, 1),) * 3, None, False)
    assert seen == [("flam", 400, 2, 100), ("flam", 800, 2, 200), ("lam", 400, 2, 100), ("lam", 800, 2, 200)]
