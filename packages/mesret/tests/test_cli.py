"""CLI: bench writes a valid results folder; every user mistake is one line, exit 2, no output."""

from __future__ import annotations

import json

import pytest
from mesret.cli import main

from icml26_shared import Results


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mesret: error:") and match in err[0], err


def test_bench_writes_results(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["bench", "--tasks", "3", "--dims", "4", "--algos", "mesret,indep-cma", "--fe-per-task",
                 "100", "--seeds", "2", "--out", str(out)]) == 0
    res = Results.from_json(out / "results.json")
    res.validate()
    rows = [r for r in res.rows if r.metric == "error" and r.method == "mesret"]
    assert len(rows) == 3 and all(len(r.extra["per_seed"]) == 2 for r in rows)
    assert "mesret" in capsys.readouterr().out
    assert main(["report", str(out)]) == 0


def test_workers_do_not_change_results(tmp_path):
    args = ["bench", "--tasks", "2", "--dims", "3", "--algos", "mesret,mfea", "--fe-per-task", "80", "--seeds", "2",
            "--popsize", "8"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--workers", "2", "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "results.json").read_text())["rows"] for x in "ab")
    assert [r["value"] for r in a] == [r["value"] for r in b]


SUITE = """
from mesret import TaskSpec
import numpy as np
def bad_dim():
    return [TaskSpec(3, lambda X: X.sum(1), name="ok"), TaskSpec(0, lambda X: X.sum(1), name="zero")]
def bad_bounds():
    return [TaskSpec(2, lambda X: X.sum(1), lower=1.0, upper=1.0)]
def good():
    return [TaskSpec(2, lambda X: np.sum(np.asarray(X) ** 2, 1), name="np-sphere")]
def all_nan():
    return [TaskSpec(2, lambda X: X.sum(1), name="ok"), TaskSpec(3, lambda X: np.full(len(X), np.nan), name="blank")]
"""


@pytest.mark.parametrize("argv, match", [
    (["bench", "--suite", "nosuch"], "unknown suite"),
    (["bench", "--algos", "mesret,cmaes9"], "unknown algo"),
    (["bench", "--suite", "{f}:bad_dim"], "zero: dim must be"),
    (["bench", "--suite", "{f}:bad_bounds"], "task 0: lower must be < upper"),
    (["bench", "--suite", "{f}:good", "--fe-per-task", "3"], "one generation per task"),
    (["bench", "--suite", "{f}:good", "--backend", "jax"], "unrecognized arguments"),
    (["bench", "--suite", "{f}:nofunc"], "no function"),
    (["bench", "--tasks", "3", "--dims", "4", "--algos", "mfea", "--fe-per-task", "300"], "Initialization_MF"),
    (["bench", "--suite", "{f}:all_nan", "--algos", "mesret,indep-cma,mfea,openai-es"], "blank: fn returned no finite"),
    (["bench", "--suite", "{f}:all_nan", "--algos", "mfea", "--seeds", "2", "--workers", "2"], "blank: fn returned"),
    (["bench", "--suite", "missing.py:good"], "does not exist"),
    (["bench", "--fe-per-task", "nan"], "--fe-per-task"),
    (["bench", "--tasks", "-3"], "--tasks"),
    (["bench", "--similarity", "odd"], "--similarity"),
    (["policy", "--envs", "Humanoid-v5"], "unknown env"),
    (["report", "{tmp}/nothing"], "does not exist"),
])
def test_user_errors_one_line_exit_2_no_output(tmp_path, capsys, argv, match):
    suite = tmp_path / "suite.py"
    suite.write_text(SUITE)
    argv = [a.format(f=suite, tmp=tmp_path) for a in argv]
    out = tmp_path / "out"
    if argv[0] != "report":
        argv += ["--out", str(out)]
    assert main(argv) == 2
    _one_line_error(capsys, match)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["suite.py"]


def test_existing_output_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("keep")
    assert main(["bench", "--tasks", "2", "--dims", "3", "--fe-per-task", "50", "--seeds", "1",
                 "--out", str(out)]) == 2
    _one_line_error(capsys, "already exists")
    assert (out / "keep.txt").read_text() == "keep"


def test_corrupt_results_file(tmp_path, capsys):
    (tmp_path / "results.json").write_text("{not json")
    assert main(["report", str(tmp_path)]) == 2
    _one_line_error(capsys, "not a valid results file")


def test_full_scale_says_what_it_needs(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MESRET_FULL", raising=False)
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "MESRET_FULL=1")


def test_smoke_claims_say_what_smoke_ran(tmp_path):
    from mesret.experiments import reproduce

    res = reproduce("smoke", tmp_path / "s")
    assert res.claims and all("smoke ran wcci20 T=4" in c.note for c in res.claims)
