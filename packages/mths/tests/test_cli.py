"""CLI error paths (one line on stderr, exit 2, nothing written) and the happy paths."""

import json
import subprocess
import sys

import numpy as np
import pytest
from mths import io as mio
from mths.cli import main


def _err(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("mths: error: ") and "Traceback" not in err
    return err


@pytest.fixture
def tsp_dir(tmp_path):
    d = tmp_path / "tsp"
    rng = np.random.default_rng(0)
    for k in range(2):
        mio.write_tsp(d / f"a{k}.tsp", f"a{k}", rng.uniform(0, 100, (10, 2)).round())
    (d / "references.json").write_text(json.dumps({"a0": 250.0, "a1": 260.0}))
    return d


def test_unknown_task_budget_zero_bad_numbers(capsys, tmp_path, tsp_dir):
    assert "unknown task 'tsq'" in _err(capsys, ["run", "--tasks", "tsp,tsq", "--budget-calls", "4", "--out", str(tmp_path / "r")])
    assert "--budget-calls" in _err(capsys, ["run", "--tasks", "tsp", "--budget-calls", "0", "--out", str(tmp_path / "r")])
    assert "--time-limit" in _err(capsys, ["baselines", "--task", "tsp", "--instances", str(tsp_dir), "--time-limit", "nan"])
    assert "--workers" in _err(capsys, ["baselines", "--task", "tsp", "--instances", str(tsp_dir), "--workers", "0"])
    assert "unknown task" in _err(capsys, ["eval", "x.py", "--task", "knapsack", "--instances", str(tsp_dir)])
    assert not (tmp_path / "r").exists()


def test_malformed_instance_names_file_and_line(capsys, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "b.tsp").write_text("NAME : b\nTYPE : TSP\nDIMENSION : 2\nEDGE_WEIGHT_TYPE : EUC_2D\n"
                             "NODE_COORD_SECTION\n1 0 0\n2 x 1\nEOF\n")
    prog = tmp_path / "p.py"
    prog.write_text("class TSPSolver: pass\n")
    err = _err(capsys, ["eval", str(prog), "--task", "tsp", "--instances", str(d)])
    assert f"{d / 'b.tsp'}:7" in err and "'x'" in err
    (d / "b.tsp").unlink()
    (d / "c.txt").write_text("number of jobs, number of machines, initial seed, upper bound and lower bound :\n"
                             " 3 2 0 10 0\nprocessing times :\n1 2 3\n4 5\n")
    err = _err(capsys, ["baselines", "--task", "fssp", "--instances", str(d)])
    assert "c.txt:5" in err and "expected 3" in err


def test_demand_above_capacity(capsys, tmp_path):
    d = tmp_path / "v"
    mio.write_vrp(d / "v.vrp", "v", np.array([[0, 0], [1, 1], [2, 2]], float), [0, 3, 12], 10)
    err = _err(capsys, ["baselines", "--task", "cvrp", "--instances", str(d)])
    assert "v.vrp" in err and "customer 3 demands 12 > capacity 10" in err


def test_existing_out_without_resume_and_missing_key(capsys, tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "already exists" in _err(capsys, ["run", "--tasks", "tsp", "--budget-calls", "4", "--out", str(out)])
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    # --resume swaps the run in at the end: never over a file no run wrote (refused before any work)
    assert "no run wrote (keep.txt)" in _err(capsys, ["run", "--tasks", "tsp", "--budget-calls", "4",
                                                      "--out", str(out), "--resume"])
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    err = _err(capsys, ["run", "--tasks", "tsp", "--llm", "openai", "--model", "m", "--api-key-env", "NO_SUCH_KEY_VAR",
                        "--budget-calls", "4", "--out", str(tmp_path / "r2")])
    assert "NO_SUCH_KEY_VAR" in err and not (tmp_path / "r2").exists()
    assert "not an mths run" in _err(capsys, ["report", str(out)])
    assert "no 'ALGORITHM'" in _err(capsys, ["port", str(out / "keep.txt"), "--task", "bpp", "--instances", str(tmp_path),
                                             "--out", str(tmp_path / "p")])


def test_eval_json_gen_instances_and_save_solutions(capsys, tmp_path, tsp_dir):
    from mths import baselines

    prog = tmp_path / "nn.py"
    prog.write_text(baselines.programs("tsp")["nn+2opt+oropt"])
    assert main(["eval", str(prog), "--task", "tsp", "--instances", str(tsp_dir), "--json",
                 "--save-solutions", str(tmp_path / "sol")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["instance"] for r in out["instances"]] == ["a0", "a1"]
    r = out["instances"][0]
    assert r["feasible"] and r["gap"] == pytest.approx((r["cost"] - 250) / 250) and "cpu_s" in r
    assert out["mean_gap"] == pytest.approx(np.mean([x["gap"] for x in out["instances"]]))
    assert sorted(p.name for p in (tmp_path / "sol").iterdir()) == [".icml26-manifest.json", "a0.tour",
                                                                    "a1.tour"]
    assert main(["gen-instances", "--task", "bpp", "--n", "20", "--count", "2", "--seed", "1", "--out", str(tmp_path / "g")]) == 0
    refs = json.loads((tmp_path / "g" / "references.json").read_text())
    assert len(refs) == 2 and all(v >= 1 for v in refs.values())
    assert "already exists" in _err(capsys, ["gen-instances", "--task", "bpp", "--n", "20", "--count", "2", "--seed", "1",
                                             "--out", str(tmp_path / "g")])


def test_run_replay_report_end_to_end(tmp_path, tsp_dir, capsys):
    run = tmp_path / "run"
    base = ["run", "--tasks", "tsp", "--budget-calls", "6", "--pop", "2", "--instances", str(tsp_dir),
            "--time-limit", "0.3", "--steps", "2", "--workers", "2", "--seed", "1", "--out"]
    assert main(base + [str(run)]) == 0
    for f in ("best/metaheuristic.md", "best/tsp.py", "calls.jsonl", "lineage.jsonl", "lineage.json", "lineage.dot",
              "results.json", "run.json"):
        assert (run / f).is_file(), f
    assert len((run / "calls.jsonl").read_text().splitlines()) == 6
    assert main(["replay", str(run), "--out", str(tmp_path / "again")]) == 0
    assert "identical" in capsys.readouterr().out
    assert main(["report", str(run)]) == 0
    rep = capsys.readouterr().out
    assert "calls 6 / 6" in rep and "archive elites from transfer: 0 of 1" in rep and "lineage.dot" in rep


def test_subprocess_error_is_one_line():
    out = subprocess.run([sys.executable, "-m", "mths", "run", "--tasks", "nope", "--budget-calls", "1", "--out", "/tmp/x-mths-never"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stdout == ""


def test_full_refuses_at_once_naming_its_needs(monkeypatch, tmp_path):
    from mths.experiments import reproduce

    from icml26_shared import UserError

    for v in ("MTHS_TSPLIB", "MTHS_CVRPLIB", "MTHS_TAILLARD", "MTHS_MODEL", "MTHS_BASE_URL"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(UserError, match="MTHS_TSPLIB.*MTHS_MODEL"):
        reproduce("full", tmp_path, 0)
    assert not any(tmp_path.iterdir())


def test_resume_replays_the_log_then_continues(tmp_path, tsp_dir):
    run = tmp_path / "run"
    base = ["run", "--tasks", "tsp", "--pop", "2", "--instances", str(tsp_dir), "--time-limit", "0.3",
            "--steps", "2", "--seed", "2", "--out", str(run)]
    assert main(base + ["--budget-calls", "4"]) == 0
    first = (run / "calls.jsonl").read_text().splitlines()
    assert main(base + ["--budget-calls", "6", "--resume"]) == 0
    again = (run / "calls.jsonl").read_text().splitlines()
    assert len(again) == 6 and again[:4] == first


@pytest.mark.parametrize("bad", ["0", "NaN", "-5", "Infinity", "true"])
def test_a_reference_that_is_not_a_finite_positive_cost_is_one_line_naming_file_and_key(capsys, tmp_path, tsp_dir, bad):
    refs = tmp_path / "refs.json"
    refs.write_text('{"a0": 250.0, "a1": ' + bad + "}")
    prog = tmp_path / "p.py"
    prog.write_text("class TSPSolver: pass\n")
    for argv in (["eval", str(prog), "--task", "tsp", "--instances", str(tsp_dir), "--references", str(refs)],
                 ["baselines", "--task", "tsp", "--instances", str(tsp_dir), "--references", str(refs)]):
        err = _err(capsys, argv)
        assert str(refs) in err and "'a1'" in err
    (tsp_dir / "references.json").write_text('{"a0": ' + bad + "}")  # the folder's own file too
    err = _err(capsys, ["baselines", "--task", "tsp", "--instances", str(tsp_dir)])
    assert str(tsp_dir / "references.json") in err and "'a0'" in err
