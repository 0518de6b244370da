"""run_many: refusals are results, failures do not stop the rest, runs resume, reports tell all."""

import json
import subprocess
import textwrap

import numpy as np
import pytest

from icml26_shared import Claim, ClaimCheck, MethodDescriptor, Paper, Results, registry
from icml26_shared.cli import main
from icml26_shared.eval import paired_interval
from icml26_shared.report import overview_rows, summary_rows
from icml26_shared.results import EnvInfo
from icml26_shared.runner import run_many

FAKE = '''
from pathlib import Path
from icml26_shared import Claim, ClaimCheck, Results, UserError

CLAIM = Claim("c", "fake claim", "score", "higher", paper_value=1.0)
COUNTS = Path(__file__).with_name("counts.txt")
STOP = Path(__file__).with_name("stop-at")


def _count(name):
    with COUNTS.open("a") as f:
        f.write(name + "\\n")


def ok(scale, out_dir, seed):
    _count("ok")
    res = Results(package="fake-ok", version="1.0", scale=scale, seed=seed)
    res.add("toy", "m", "score", [1.0 + seed, 2.0 + seed], seeds=[seed, seed + 1])
    (Path(out_dir) / "fig.txt").write_text("x")
    res.claims.append(ClaimCheck.compare(CLAIM, 1.5, 1.0, "base"))
    return res


def refuse(scale, out_dir, seed):
    _count("refuse")
    raise UserError("needs a CUDA device (set FAKE_MODEL to a local checkpoint)\\nsecond line")


def boom(scale, out_dir, seed):
    _count("boom")
    raise RuntimeError("boom")


def late(scale, out_dir, seed):
    _count("late")
    if STOP.exists():
        STOP.unlink()
        raise KeyboardInterrupt
    res = Results(package="fake-late", version="1.0", scale=scale, seed=seed)
    res.add("toy", "m", "score", 3.0)
    res.claims.append(ClaimCheck.compare(CLAIM, 3.0, 4.0, "base"))
    return res
'''


def _desc(name, fn, minutes=None):
    return MethodDescriptor(name=name, version="1.0", paper=Paper("Fake"),
                            claims=(Claim("c", "fake claim", "score"),),
                            reproduce=f"icml26_fake_pkg:{fn}", quick_minutes=minutes)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    mod = tmp_path / "mod"
    mod.mkdir()
    (mod / "icml26_fake_pkg.py").write_text(textwrap.dedent(FAKE))
    monkeypatch.syspath_prepend(str(mod))
    descs = {d.name: d for d in (_desc("fake-ok", "ok", 1.0), _desc("fake-refuse", "refuse", 0.5),
                                 _desc("fake-boom", "boom"), _desc("fake-late", "late", 2.0))}
    monkeypatch.setattr(registry, "discover", lambda: dict(descs))

    class Fake:
        dir = mod
        d = descs

        @staticmethod
        def counts():
            f = mod / "counts.txt"
            return f.read_text().split() if f.exists() else []

    yield Fake
    import sys
    sys.modules.pop("icml26_fake_pkg", None)


def _status(out, name):
    return json.loads((out / name / "results.json").read_text())


def test_refusal_is_skipped_and_the_rest_runs(fake, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["reproduce", "fake-refuse", "fake-ok", "--scale", "quick", "--out", str(out)])
    assert rc == 0
    skipped, ok = _status(out, "fake-refuse"), _status(out, "fake-ok")
    assert skipped["status"] == "skipped" and ok["status"] == "ok"
    assert skipped["error"] == "needs a CUDA device (set FAKE_MODEL to a local checkpoint)"
    Results.from_json(out / "fake-refuse" / "results.json").validate()
    report = (out / "REPORT.md").read_text()
    assert "fake-refuse" in report and "fake-ok" in report and "skipped" in report
    text = capsys.readouterr().out
    assert "[1/2] fake-refuse" in text and "[2/2] fake-ok" in text and "left" in text


def test_failure_exits_1_and_others_still_run(fake, tmp_path):
    out = tmp_path / "run"
    assert main(["reproduce", "fake-boom", "fake-ok", "--scale", "smoke", "--out", str(out)]) == 1
    assert _status(out, "fake-boom")["status"] == "failed"
    assert _status(out, "fake-ok")["status"] == "ok"
    assert "RuntimeError: boom" in (out / "fake-boom" / "error.txt").read_text()


def test_one_named_refusal_is_exit_2_and_leaves_nothing(fake, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["reproduce", "fake-refuse", "--scale", "full", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("icml26: error: needs a CUDA device")
    assert not out.exists()


def test_existing_out_is_refused_untouched(fake, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    keep = out / "notes.txt"
    keep.write_text("mine")
    before = keep.stat().st_mtime_ns
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert keep.read_text() == "mine" and keep.stat().st_mtime_ns == before
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # --force replaces only an earlier run's folder, never the user's own files
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out), "--force"]) == 2
    assert keep.read_text() == "mine" and fake.counts() == []


def test_force_replaces_an_earlier_run(fake, tmp_path):
    out = tmp_path / "run"
    assert main(["reproduce", "fake-ok", "fake-late", "--scale", "smoke", "--out", str(out)]) == 0
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out), "--force"]) == 0
    assert not (out / "fake-late").exists() and fake.counts() == ["ok", "late", "ok"]


def test_force_and_resume_never_delete_a_file_put_inside_a_package_folder(fake, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out)]) == 0
    mine = out / "fake-ok" / "notes.txt"
    mine.write_text("mine")
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out), "--force"]) == 2
    assert "fake-ok/notes.txt" in capsys.readouterr().err and mine.read_text() == "mine"
    # a resumed run at another seed would rerun fake-ok into its folder: refused, file kept
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out), "--resume",
                 "--seed", "1"]) == 2
    assert mine.read_text() == "mine"


def test_interrupted_run_resumes_and_matches_an_uninterrupted_one(fake, tmp_path):
    names = ["fake-ok", "fake-late", "fake-refuse"]
    full = tmp_path / "full"
    assert main(["reproduce", *names, "--scale", "quick", "--out", str(full)]) == 0
    ref = Results.from_json(full / "fake-late" / "results.json")

    out = tmp_path / "run"
    (fake.dir / "stop-at").write_text("")
    (fake.dir / "counts.txt").unlink()
    descs = [fake.d[n] for n in names]
    with pytest.raises(KeyboardInterrupt):
        run_many(descs, "quick", out, 0, log=lambda s: None)
    report = (out / "REPORT.md").read_text()
    assert "not run" in report and "fake-refuse" in report  # listed as not run
    assert (out / "fake-ok" / "results.json").is_file()
    assert fake.counts() == ["ok", "late"]

    assert main(["reproduce", *names, "--scale", "quick", "--out", str(out), "--resume"]) == 0
    assert fake.counts() == ["ok", "late", "late", "refuse"]  # fake-ok was reused, not rerun
    resumed = [Results.from_json(out / n / "results.json") for n in names]
    fresh = [Results.from_json(full / n / "results.json") for n in names]
    assert summary_rows(resumed) == summary_rows(fresh)
    assert [r[:5] + r[6:] for r in overview_rows(resumed)] == \
        [r[:5] + r[6:] for r in overview_rows(fresh)]
    assert resumed[1].rows[0].value == ref.rows[0].value


def test_resume_reruns_a_different_seed(fake, tmp_path):
    out = tmp_path / "run"
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out)]) == 0
    assert main(["reproduce", "fake-ok", "--scale", "smoke", "--out", str(out), "--resume",
                 "--seed", "3"]) == 0
    assert fake.counts() == ["ok", "ok"] and _status(out, "fake-ok")["seed"] == 3


def test_list_shows_quick_minutes(fake, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fake-ok 1.0" in out and "quick ≈ 1 min" in out and "quick: not timed" in out


def test_claim_interval_must_clear_the_target():
    claim = Claim("c", "d", "m", "higher")
    assert ClaimCheck.compare(claim, 0.6, 0.5, "b").held is True
    straddles = ClaimCheck.compare(claim, 0.6, 0.5, "b", interval=(-0.02, 0.22))
    assert straddles.held is False and straddles.interval == [-0.02, 0.22]
    assert ClaimCheck.compare(claim, 0.6, 0.5, "b", interval=(0.01, 0.2)).held is True
    lower = Claim("c", "d", "m", "lower")
    assert ClaimCheck.compare(lower, 0.4, threshold=0.5, interval=(0.3, 0.55)).held is False
    assert ClaimCheck.compare(lower, 0.4, threshold=0.5, interval=(0.3, 0.45)).held is True


def test_paired_interval_covers_the_mean_and_sees_the_pairing():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 5, 40)  # large unit-to-unit spread, shared by both methods
    a, b = base + 0.3 + rng.normal(0, 0.1, 40), base
    iv = paired_interval(a, b)
    assert iv.low < iv.mean < iv.high and iv.clears(0.0)
    assert 0.2 < iv.low and iv.high < 0.4
    assert not paired_interval(b, a).clears(0.0)
    flat = paired_interval([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
    assert (flat.low, flat.high) == (0.5, 0.5)


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                   check=True, capture_output=True)


def test_env_records_the_source_tree_commit_and_dirt(tmp_path):
    repo = tmp_path / "repo"
    src = repo / "pkg"
    src.mkdir(parents=True)
    (src / "a.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    env = EnvInfo.capture(source=src)
    assert env.git_commit and len(env.git_commit) == 40 and env.git_dirty is False
    (src / "a.py").write_text("x = 2\n")
    assert EnvInfo.capture(source=src).git_dirty is True
    outside = tmp_path / "plain"
    outside.mkdir()
    env = EnvInfo.capture(source=outside)
    assert env.git_commit is None and env.git_dirty is None
