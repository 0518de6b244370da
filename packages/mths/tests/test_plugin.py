"""A task plugin (single-machine weighted completion time, Smith's rule as reference) through
``run_search`` with a stub LLM and through ``mths run/eval/baselines --plugin``; the offline
grammar refuses it in one line; a broken plugin is one line."""

import json
import math
from pathlib import Path

import pytest
from mths.cli import main
from mths.config import SearchConfig
from mths.pipeline import run_search
from mths.sandbox import Limits
from mths.tasks import TASKS, Task, load_instances, load_plugin, register

from .test_endpoints import Server

PLUGIN = Path(__file__).with_name("wct_plugin.py")
LIM = Limits(0.1, 1, sandbox="process")


def _reply(prompt: str) -> str:
    """A stub LLM: a metaheuristic for metaheuristic operators, Smith's rule for program operators."""
    from mths.llm import OPERATORS_MH

    from .wct_plugin import SMITH

    op = next(ln.split(": ", 1)[1] for ln in prompt.splitlines() if ln.startswith("OPERATOR: "))
    if op in OPERATORS_MH:
        return "ALGORITHM: order by ratio\nPURPOSE: schedule\nINPUT: jobs\nOUTPUT: order\n"
    return "Thought: WSPT.\n```python\n" + SMITH + "```\n"


@pytest.fixture
def wct(tmp_path):
    load_plugin(str(PLUGIN))
    from .wct_plugin import write_instances

    yield write_instances(tmp_path / "wct")


def test_a_plugin_task_runs_through_run_search_with_a_stub_llm(wct):
    class Stub:
        name = "stub"

        def complete(self, prompt):
            return _reply(prompt)

    train = {"wct": load_instances(TASKS["wct"], wct)}
    assert all(i.reference_source.startswith("Smith") for i in train["wct"])
    s, llm, ev = run_search("mths", ["wct"], train, Stub(), 6, LIM, 1, 0, SearchConfig(pop=2))
    assert llm.calls == 6 and s.invalid == 0
    assert s.archive["wct"][0] == 0.0  # Smith's rule is optimal: gap 0
    prog = s.best_programs()["wct"]
    assert "class WCTSolver" in prog


def test_mths_run_eval_baselines_with_plugin_and_the_grammar_refuses(wct, tmp_path, capsys, monkeypatch):
    base = ["--plugin", str(PLUGIN)]
    rc = main(["run", *base, "--tasks", "wct", "--budget-calls", "4", "--instances", str(wct),
               "--out", str(tmp_path / "g")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--llm openai|hf|replay" in err[0] and "'wct'" in err[0]
    assert not (tmp_path / "g").exists()
    monkeypatch.setenv("MTHS_TEST_KEY", "sk-test")
    srv = Server(reply=_reply)
    try:
        rc = main(["run", *base, "--tasks", "wct", "--llm", "openai", "--model", "m", "--base-url", srv.url,
                   "--api-key-env", "MTHS_TEST_KEY", "--budget-calls", "4", "--pop", "2", "--instances", str(wct),
                   "--time-limit", "0.1", "--steps", "1", "--sandbox", "process", "--out", str(tmp_path / "r")])
    finally:
        srv.close()
    assert rc == 0, capsys.readouterr().err
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["tasks"] == ["wct"] and run["archive"]["wct"]["score"] == 0.0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "r" / "best" / "wct.py"), *base, "--task", "wct", "--instances", str(wct),
                 "--sandbox", "process", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["mean_gap"] == 0.0 and len(res["instances"]) == 2
    assert main(["baselines", *base, "--task", "wct", "--instances", str(wct), "--sandbox", "process", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["baseline"]["mean_gap"] > 0  # FIFO is not optimal


def test_a_broken_plugin_or_task_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    assert main(["eval", "x.py", "--plugin", str(bad), "--task", "tsp", "--instances", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.py" in err[0] and "boom" in err[0]
    assert main(["eval", "x.py", "--plugin", "no_such_module_xyz", "--task", "tsp", "--instances", str(tmp_path)]) == 2
    assert "no_such_module_xyz" in capsys.readouterr().err
    t = TASKS["tsp"]
    with pytest.raises(Exception, match="solver_class"):
        register(Task("mine", "not a class", "", "", (".x",), t.read, t.check, t.cost, t.write))
    with pytest.raises(Exception, match="built in"):
        register(Task("tsp", "TSPSolver", "", "class TSPSolver", (".tsp",), t.read, t.check, t.cost, t.write))
    assert math.isfinite(1.0)
