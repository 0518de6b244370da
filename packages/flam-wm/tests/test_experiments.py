"""The reproduction's dev rule and its mechanism guards: the dev grid runs the full schedule and its
winning run is the first seed's final run (identical weights), a diverging setting loses instead of
crashing the reproduction, and FLAM's per-entity factorisation is on in every scale's FLAM config."""

from __future__ import annotations

import numpy as np
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
                **ex._starts(CFG, 3),  # best-of-2 starts and the floor, as the grid ran them
            ),
            video[sl[0]],
        )
        state, cpu, info = won[name]
        assert fresh.train_info["starts"] >= 2 and info == fresh.train_info and cpu > 0 and all(
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


@pytest.mark.parametrize("scale", ["smoke", "quick", "long", "full"])
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
    """Quick's final runs 2 x 200 steps, its dev grid the same share of its 400 steps, full a quarter of 3000,
    each with the floor and at most 3 candidates; every model the same (the rule is the runner's)."""
    rule = {"start_floor": ex.START_FLOOR, "start_max": 3}
    assert ex._starts(ex.CFG["quick"], 800) == {"starts": 2, "start_steps": 200, **rule}
    assert ex._starts(ex.CFG["quick"], 400) == {"starts": 2, "start_steps": 100, **rule}
    assert ex._starts(ex.CFG["full"], 3000) == {"starts": 2, "start_steps": 750, **rule}
    assert ex._starts(ex.CFG["long"], 800) == ex._starts(ex.CFG["quick"], 800)
    assert ex._starts({"steps": 10}, 10) == {}
    seen = []

    def fake(mcfg, tcfg, *a, **k):
        seen.append((mcfg.model, tcfg.steps, tcfg.starts, tcfg.start_steps))
        raise FloatingPointError("stop here")

    monkeypatch.setattr(ex, "train", fake)
    q, clips = ex.CFG["quick"], np.zeros((2, 6, 32, 32, 3), np.uint8)
    for name in ("flam", "lam"):
        ex._grid_run(name, 4, q, {"lr": 3e-3, "beta": 0.01}, clips, (slice(0, 1),) * 3, 0, None)
        mcfg = ex._model_cfg(name, 4, q["width"], {"lr": 3e-3, "beta": 0.01})
        with pytest.raises(FloatingPointError):
            ex._one_run(name, 4, 0, mcfg, 3e-3, q, clips, None, (slice(0, 1),) * 3, None, False)
    assert seen == [("flam", 400, 2, 100), ("flam", 800, 2, 200), ("lam", 400, 2, 100), ("lam", 800, 2, 200)]


def test_long_is_wired_runs_its_own_config_and_never_full(tmp_path, monkeypatch):
    """Issue 57 item 8: ``reproduce("long", ...)`` runs ``CFG["long"]`` (here shrunk to smoke's sizes, its
    structure kept): E = 1 beside E = 4's stand-in, lam-token, no-temporal, identifiable data, 10% labels,
    the longer schedule; its dev grid on a seed apart from the reported ones; ``full`` is never read."""
    from flam_wm.registry import DESCRIPTOR

    from icml26_shared import UserError

    long = ex.CFG["long"]
    assert "long" in DESCRIPTOR.scales and long["device"] == "cpu" and long is not ex.CFG["full"]
    assert long["steps"] == ex.CFG["quick"]["steps"] and set(long["models"]) >= {"flam", "lam", "lam-token"}
    assert {"flam-one-latent", "flam-no-temporal"} <= set(long["arms"]) and long["identifiable"]
    assert 1 in long["entities"] and 0.1 in long["labels"] and long["schedule_x"] > 1
    assert 1 not in ex.CFG["quick"]["entities"] and ex.CFG["quick"]["labels"] == (0.01,)
    tiny = {**ex.CFG["smoke"], "models": long["models"], "arms": long["arms"], "identifiable": True,
            "schedule_x": 2, "grid_seed_offset": 100, "labels": (0.01, 0.1), "seeds": 2, "clips": 16, "frames": 5,
            "steps": 2, "grid_steps": 2, "starts": 1, "episodes": 4, "bc_steps": 2, "horizon": 3,
            "tok": {**ex.CFG["smoke"]["tok"], "steps": 2}, "curve_every": 1}
    monkeypatch.setitem(ex.CFG, "long", tiny)
    seen_bc: list = []  # BC stubbed (its own tests cover it): which environment each call is given

    def fake_bc(*a, identifiable=False, **k):
        seen_bc.append(identifiable)
        return {"labelled": 5, "decoder_c": 1.0, "decoder_factor": -1, "decoder_cv_acc": 0.5,
                "pseudo_test_acc": 0.5, "success": 0.5, "success_episodes": [1.0, 0.0]}

    monkeypatch.setattr(ex, "pseudo_label_bc", fake_bc)
    monkeypatch.setattr(ex, "true_action_bc", lambda *a, identifiable=False, **k: seen_bc.append(identifiable) or [1.0, 0.0])
    monkeypatch.setitem(ex.CFG, "full", None)  # reading full would fail
    res = ex.reproduce("long", tmp_path, seed=0)
    exps = {r.experiment for r in res.rows}
    assert {"sprites_E2", "sprites_E1", "sprites_E2_identifiable"} <= exps
    assert {r.method for r in res.rows if r.experiment == "sprites_E2"} >= {
        "flam", "lam", "lam-token", "flam-one-latent", "flam-no-temporal", "flam-x2"}
    import csv

    runs = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert {r["steps"] for r in runs if r["model"] == "flam-x2"} == {"4"}
    grid = list(csv.DictReader(open(tmp_path / "dev_grid.csv")))
    assert {r["grid_seed"] for r in grid} == {"100"} and {r["model"] for r in grid} >= {"lam", "lam-token"}
    bc = list(csv.DictReader(open(tmp_path / "bc.csv")))
    assert {r["labels"] for r in bc if r["model"] == "lam-token"} == {"0.01", "0.1"}
    assert any(r["data"] == "sprites_E2_identifiable" for r in bc) and True in seen_bc and False in seen_bc
    gap = next(c for c in res.claims if c.claim_id == "gap_grows")
    assert "no E = 1" not in gap.note
    assert any(c.method == "flam" and c.split == "train" for c in res.curves)
    # item 6: dev PSNR-h and latent-use-gap curves per model and seed, the weights the checkpoint rule scored
    assert {(c.metric, c.split) for c in res.curves if c.method == "flam"} >= {
        ("psnr_3", "dev"), ("latent_use_gap", "train"), ("train_pred_loss", "train")}
    assert all("weights_at" in r and "rule_armed_at" in r for r in runs if r["model"] == "flam")
    # a package scale that does not exist is one line
    with pytest.raises(UserError):
        ex.reproduce("huge", tmp_path)


def test_quick_claims_use_clustered_intervals_and_leave_the_gap_to_long():
    """Item 6 / 8: at a scale with one E (quick) gap_grows is "not evaluated" (E = 1 runs in long); the
    PSNR claim's interval is over test clips nested in seeds (paired per clip), BC's over episodes."""
    from flam_wm import report

    cfg = {**ex.CFG["quick"], "seeds": 3}
    rng = torch.Generator().manual_seed(0)
    recs, bc = [], []
    for s in range(3):
        for m, shift in (("flam", 3.0), ("lam", 0.0), ("flam-one-latent", 0.0)):
            clips = (torch.randn(30, generator=rng) + 15 + shift).tolist()
            recs.append({"entities": 4, "model": m, "seed": s, "psnr_h": sum(clips) / 30, "dev_psnr_h": 15 + shift,
                         "dev_copy_h": 10.0, "copy_h": 10.0, "psnr_clips_h": clips, "copy_clips_h": [10.0] * 30,
                         "corr": 0.5, "corr_matched": 0.5 if m != "flam-one-latent" else 0.3,
                         "corr_matched_pos": 0.5, "corr_matched_ratio": 0.6, "ceiling": 0.89, "start_met": s != 1,
                         "corr_visible": 0.5, "best_probe": 0.3, "ratio_clips": [0.6] * 30,
                         "matched_clips": (torch.rand(30, generator=rng) * 0.2 + 0.4).tolist(),
                         "best_probe_clips": (torch.rand(30, generator=rng) * 0.2 + 0.2).tolist()})
        for m, p in (("flam", 1.0), ("lam", 0.0)):
            bc.append({"entities": 4, "model": m, "seed": s, "labels": 0.01, "success": p, "decoder_cv_acc": 0.5,
                       "pseudo_test_acc": 0.5, "success_episodes": [p] * 10})
        bc.append({"entities": 4, "model": "true-actions", "seed": s, "labels": 1.0, "success": 1.0,
                   "success_episodes": [1.0] * 10})
    from icml26_shared import Results

    res = Results(package="flam-wm", version="0", scale="quick", seed=0)
    report.claims(res, recs, bc, cfg, 0)
    by = {c.claim_id: c for c in res.claims}
    assert by["gap_grows"].status == "not evaluated" and "long" in by["gap_grows"].note
    from icml26_shared.eval import paired_interval_clustered

    rows = {(r["model"], r["seed"]): r for r in recs}
    d = [a - b for s in range(3) for a, b in zip(rows[("flam", s)]["psnr_clips_h"], rows[("lam", s)]["psnr_clips_h"])]
    iv = paired_interval_clustered(d, [s for s in range(3) for _ in range(30)])
    assert "nested in seeds" in by["psnr10_gap_E4"].note
    assert by["psnr10_gap_E4"].interval == pytest.approx([iv.low, iv.high]) and iv.low < 3.0 < iv.high
    assert by["bc_vs_lam"].held and by["bc_vs_lam"].interval == [1.0, 1.0]
    # corr_vs_lam: per test clip (FLAM matched - the baseline's best probe), nested in seeds
    d = [a - b for s in range(3) for a, b in zip(rows[("flam", s)]["matched_clips"], rows[("lam", s)]["best_probe_clips"])]
    iv = paired_interval_clustered(d, [s for s in range(3) for _ in range(30)])
    assert by["corr_vs_lam"].interval == pytest.approx([iv.low, iv.high]) and "nested in seeds" in by["corr_vs_lam"].note
    # factored_vs_one_latent (item 3): both matched, per test clip, nested in seeds; the floor's misses said
    d = [a - b for s in range(3) for a, b in zip(rows[("flam", s)]["matched_clips"],
                                                 rows[("flam-one-latent", s)]["matched_clips"])]
    iv = paired_interval_clustered(d, [s for s in range(3) for _ in range(30)])
    f = by["factored_vs_one_latent"]
    assert f.interval == pytest.approx([iv.low, iv.high]) and f.ours == pytest.approx(0.5) and f.baseline == pytest.approx(0.3)
    assert "floor in 2 of 3 seeds" in f.note
    # bc_ratio: FLAM succeeds in every episode true-action BC does -> ratio 1, interval [1, 1], episodes nested
    assert by["bc_ratio"].interval == pytest.approx([1.0, 1.0]) and "nested in seeds" in by["bc_ratio"].note


def test_curve_probe_reads_frames_only_and_leaves_the_run_unchanged():
    """Item 6: recording the dev PSNR / latent-use-gap curves during training changes no weight (it consumes
    no training stream); the gap is 0 when the FDM ignores the latents and the stop rule is the core's."""
    from flam_wm.config import ModelConfig, TrainConfig
    from flam_wm.evaluate import latent_use_gap
    from flam_wm.sprites import generate
    from flam_wm.train import train

    video, _ = generate(2, 12, 6, size=16, seed=3)
    mcfg = ModelConfig(model="flam", slots=3, latent_dim=6, width=16, size=16)
    tcfg = TrainConfig(steps=4, batch_size=4, window=5, starts=2, start_steps=2)
    sl = (slice(0, 8), slice(8, 12), slice(8, 12))
    probe = ex._CurveProbe(video, sl, 3, 1)
    a = train(mcfg, tcfg, video[:8])
    b = train(mcfg, tcfg, video[:8], on_step=probe)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert [p[0] for p in probe.points] == [1, 2, 1, 2, 3, 4] and {p[1] for p in probe.points} == {0, 1, None}
    curves = ex._dev_curves(probe.points, b.train_info["start"])
    assert curves["steps"] == [1, 2, 3, 4] and len(curves["gap"]) == 4
    z = b.tokenize(video[:8, :5])
    infer = b.infer
    b.infer = lambda s: (infer(s)[0] * 1e3, None)  # latents far apart: the FDM's output depends on them
    assert abs(latent_use_gap(b, z)) > 1e-4
    fdm = b.fdm.forward
    b.fdm.forward = lambda s, act: fdm(s, torch.zeros_like(act))  # an FDM that ignores its latents
    assert latent_use_gap(b, z) == pytest.approx(0.0, abs=1e-7)
    # the checkpoint rule: the best dev PSNR among the points from the first whose relative gap reaches the floor
    used = ex.START_FLOOR
    flat = [(50 * (i + 1), None, 10.0 + (i if i < 5 else 4.0), 0.0, used) for i in range(16)]
    got = ex._dev_curves(flat, 0)
    assert got["best_at"] == 250 and got["armed_at"] == 50 and got["gap_rel"] == [used] * 16
    # FLAM's dip: the PSNR falls while the latents come into use, then climbs, never back to the copy-like start;
    # the rule armed at the floor scores the end, one armed from the first point would score the copy-like start
    dip = [(50 * (i + 1), None, 16.0 - 3 * i if i < 4 else 1.0 + (i - 4), 0.0, 0.0 if i < 6 else used)
           for i in range(16)]
    got = ex._dev_curves(dip, 0)
    assert got["armed_at"] == 350 and got["best_at"] == 800
    never = [(st, r, p, g, 0.0) for st, r, p, g, _ in dip]   # never armed: the best of every point
    assert ex._dev_curves(never, 0)["armed_at"] is None and ex._dev_curves(never, 0)["best_at"] == 50
    # a candidate's points count for the run that continued from it, another candidate's never
    mixed = [(50, 0, 30.0, 0.0, used), (50, 1, 12.0, 0.0, used), (100, None, 11.0, 0.0, used)]
    assert ex._dev_curves(mixed, 1)["best_at"] == 50 and ex._dev_curves(mixed, 1)["psnr"] == [12.0, 11.0]


def test_the_checkpoint_rule_is_applied_in_the_real_loop(monkeypatch):
    """Item 6: ``_one_run`` scores the weights at the rule's best point, not the final ones (the PSNR of the final
    weights kept beside, ``psnr_h_final``)."""
    from flam_wm.sprites import generate

    cfg = {**ex.CFG["smoke"], "steps": 4, "starts": 1}
    video, acts = generate(2, 20, 6, seed=4)
    sl = ex._split(20)
    real = ex._dev_curves
    monkeypatch.setattr(ex, "_dev_curves", lambda points, start: {**real(points, start), "best_at": 1})
    mcfg = ex._model_cfg("flam", 2, cfg["width"], {"lr": 3e-3, "beta": 0.01}, None)
    rec, _ = ex._one_run("flam", 2, 0, mcfg, 3e-3, cfg, video, acts, sl, None, False)
    assert rec["weights_at"] == 1 and rec["psnr_h"] != pytest.approx(rec["psnr_h_final"], abs=1e-6)
    monkeypatch.setattr(ex, "_dev_curves", lambda points, start: {**real(points, start), "best_at": 4})
    rec, _ = ex._one_run("flam", 2, 0, mcfg, 3e-3, cfg, video, acts, sl, None, False)
    assert rec["weights_at"] == 4 and rec["psnr_h"] == pytest.approx(rec["psnr_h_final"], abs=1e-6)
