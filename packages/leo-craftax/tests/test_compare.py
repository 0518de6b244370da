"""``leo-craftax compare`` on tiny synthetic checkpoints (no training, nothing compiled): method A
is better than B by construction, so both paired intervals of A − B must lie above 0, and below 0
with A and B swapped; runs of other experiments are refused (exit 2, nothing written)."""

import json

import numpy as np
import pytest
from leo_craftax.cli import main
from leo_craftax.compare import compare_runs
from leo_craftax.experiments import smoke_config
from leo_craftax.io import save_checkpoint

K = 12
NAMES = tuple(f"cell/{i}" for i in range(K))


def _success(better: bool, seed: int) -> np.ndarray:
    """Per-goal success of one seed: B's is random; A's is B's plus 0.1–0.3 on every goal."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.0, 0.6, K)
    return base + rng.uniform(0.1, 0.3, K) if better else base


def _live(better: bool, seed: int) -> list[float]:
    """A seed's live success after each of 4 updates (A's above B's on every seed)."""
    return [0.1 * u + 0.02 * seed + (0.3 if better else 0.0) for u in range(4)]


def _ckpt(path, algo, seeds, better, names=NAMES, live=True, **cfg):
    """A checkpoint as ``train`` writes it: every seed's (here dummy) variables stacked, the final
    per-goal success of every seed and its live success curve in the metadata."""
    success = [_success(better, s).tolist() for s in seeds]
    params = {"params": {"w": np.zeros((len(seeds), 1), np.float32)}}
    extra = {"success": success, **({"live_success": [_live(better, s) for s in seeds]}
                                    if live else {})}
    return save_checkpoint(path, smoke_config(algo).replace(**cfg), params, names, extra,
                           seeds=list(seeds))


@pytest.fixture
def runs(tmp_path):
    """A = LEO as three single-seed runs; B = PQN + HER as one stacked 3-seed run."""
    a = [str(_ckpt(tmp_path / f"leo-s{s}.msgpack", "leo", [s], True)) for s in (0, 1, 2)]
    b = [str(_ckpt(tmp_path / "her.msgpack", "pqn_her", [0, 1, 2], False))]
    return a, b


def _compare(capsys, tmp_path, a, b):
    out = tmp_path / "cmp.json"
    assert main(["compare", "-a", *a, "-b", *b, "--json", str(out), "--resamples", "999"]) == 0
    text = capsys.readouterr().out
    return json.loads(out.read_text()), text


def test_better_method_has_positive_intervals_and_swapping_flips_them(capsys, tmp_path, runs):
    a, b = runs
    fig, text = _compare(capsys, tmp_path, a, b)
    assert fig["a"]["label"] == "leo" and fig["b"]["label"] == "pqn_her (mixed)"
    assert fig["seeds"] == [0, 1, 2] and fig["num_goals"] == K
    want = [float(np.mean(_success(True, s))) for s in (0, 1, 2)]
    np.testing.assert_allclose(fig["a"]["per_seed"], want)
    np.testing.assert_allclose(fig["a"]["mean"], np.mean(want))
    np.testing.assert_allclose(fig["a"]["std"], np.std(want, ddof=1))
    for key in ("diff_over_seeds", "diff_over_goals"):
        d = fig[key]
        assert 0 < d["low"] <= d["mean"] <= d["high"], (key, d)
    assert fig["diff_over_seeds"]["n"] == 3 and fig["diff_over_goals"]["n"] == K
    assert "A - B over seeds" in text and "A - B over goals" in text
    live = fig["live_success"]  # the authors' training metric, after the last update
    assert live["per_seed"]["a"] == pytest.approx([_live(True, s)[-1] for s in (0, 1, 2)])
    assert live["per_seed"]["b"] == pytest.approx([_live(False, s)[-1] for s in (0, 1, 2)])
    assert live["diff_over_seeds"]["mean"] == pytest.approx(0.3)
    assert "live success (the authors' training metric" in text
    swapped, _ = _compare(capsys, tmp_path, b, a)
    for key in ("diff_over_seeds", "diff_over_goals"):
        d, s = fig[key], swapped[key]
        assert s["high"] < 0
        assert s["mean"] == pytest.approx(-d["mean"])


def test_one_seed_has_no_interval_over_seeds():
    fig = compare_runs({3: np.array([0.5, 0.2])}, {3: np.array([0.1, 0.0])}, n_resamples=99)
    assert fig["diff_over_seeds"] is None and fig["a"]["std"] is None
    assert fig["diff_over_goals"]["mean"] == pytest.approx(0.3)


@pytest.mark.parametrize("b_kw, text", [
    ({"names": NAMES[:-1] + ("cell/x",)}, "different goal sets"),
    ({"total_timesteps": 64 * 16 * 48}, "differ in env_steps"),
    ({"test_repeats": 4}, "differ in test_repeats"),
    ({"env_size": 6}, "differ in env"),
    ({"seeds": [0, 1]}, "different seeds"),
])
def test_other_experiments_are_refused(capsys, tmp_path, runs, b_kw, text):
    a, _ = runs
    kw = {"seeds": [0, 1, 2], **b_kw}
    seeds, names = kw.pop("seeds"), kw.pop("names", NAMES)
    b = _ckpt(tmp_path / "b.msgpack", "pqn_her", seeds, False, names, **kw)
    out = tmp_path / "cmp.json"
    assert main(["compare", "-a", *a, "-b", str(b), "--json", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text in err, err
    assert not out.exists()


def test_bad_sets_of_runs_are_refused(capsys, tmp_path, runs):
    a, b = runs
    other = _ckpt(tmp_path / "lr.msgpack", "leo", [3], True, lr=1e-3)
    for argv, text in (([*a, a[0]], "seed 0 appears twice"),
                       ([*a, str(other)], "not runs of one method (they differ in lr)"),
                       ([str(tmp_path / "none.msgpack")], "does not exist")):
        assert main(["compare", "-a", *argv, "-b", *b]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and text in err, err
    bare = save_checkpoint(tmp_path / "bare.msgpack", smoke_config("leo"),
                           {"params": {"w": np.zeros((1, 1), np.float32)}}, NAMES, seeds=[0])
    assert main(["compare", "-a", str(bare), "-b", *b]) == 2
    assert "holds no final per-goal success" in capsys.readouterr().err


def test_exported_result_files_compare_like_their_checkpoints(capsys, tmp_path, runs):
    """``export`` writes one seed's final per-goal success; ``compare`` over those files gives the
    checkpoints' figures exactly (same seeds, same goals, same intervals)."""
    a, b = runs
    want, _ = _compare(capsys, tmp_path, a, b)
    files = {"a": [], "b": []}
    for side, ckpts in (("a", a), ("b", b)):
        for s in (0, 1, 2):
            ckpt = ckpts[s] if side == "a" else ckpts[0]
            out = tmp_path / f"{side}-s{s}.json"
            argv = ["export", ckpt, "--out", str(out)] + (["--run-seed", str(s)] if side == "b"
                                                          else [])
            assert main(argv) == 0
            files[side].append(str(out))
    rec = json.loads(open(files["b"][1]).read())
    assert rec["seed"] == 1 and rec["algo"] == "pqn_her"
    np.testing.assert_allclose(rec["success_per_goal"], _success(False, 1))
    assert rec["live_success_curve"] == pytest.approx(_live(False, 1))
    assert rec["live_success"] == pytest.approx(_live(False, 1)[-1])
    got, _ = _compare(capsys, tmp_path, files["a"], files["b"])
    assert got["live_success"] == want["live_success"]
    for key in ("per_seed", "mean", "std"):
        assert got["a"][key] == want["a"][key] and got["b"][key] == want["b"][key]
    assert got["diff_over_seeds"] == want["diff_over_seeds"]
    assert got["diff_over_goals"] == want["diff_over_goals"]
    mixed, _ = _compare(capsys, tmp_path, files["a"][:2] + [a[2]], b)  # files and checkpoints mix
    assert mixed["diff_over_goals"] == want["diff_over_goals"]


def test_export_and_result_files_refuse_bad_input(capsys, tmp_path, runs):
    a, b = runs
    out = tmp_path / "r.json"
    for argv, text in ((["export", b[0], "--out", str(out)], "pick one with --run-seed"),
                       (["export", b[0], "--out", str(out), "--run-seed", "7"], "not 7"),
                       (["export", a[0], "--out", str(tmp_path / "r.txt")], "must end in .json")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and text in err, err
        assert not out.exists()
    assert main(["export", a[0], "--out", str(out)]) == 0
    before = out.read_text()
    assert main(["export", a[1], "--out", str(out)]) == 2  # no silent overwrite
    assert "exists" in capsys.readouterr().err and out.read_text() == before
    rec = json.loads(before)
    for bad in ("{not json", json.dumps({**rec, "success_per_goal": rec["success_per_goal"][:-1]}),
                json.dumps({**rec, "success_per_goal": [float("nan")] * K}),
                json.dumps({k: v for k, v in rec.items() if k != "config"})):
        broken = tmp_path / "broken.json"
        broken.write_text(bad)
        assert main(["compare", "-a", str(broken), "-b", *b]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is not a leo-craftax result file" in err, err


def test_runs_without_live_success_still_compare(capsys, tmp_path, runs):
    """Checkpoints written before 0.4.3 hold no live success: compared as before, said so."""
    a, _ = runs
    old = [str(_ckpt(tmp_path / "old.msgpack", "pqn_her", [0, 1, 2], False, live=False))]
    fig, text = _compare(capsys, tmp_path, a, old)
    assert fig["live_success"] is None and "live success: not stored" in text
    assert fig["diff_over_goals"]["low"] > 0
