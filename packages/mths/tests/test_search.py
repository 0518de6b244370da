"""The search machinery: sandbox failure modes, budget and evaluation counters, byte-identical
grammar runs, replay, both levels and transfer acting, and the OpenAI client on loopback."""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from mths import grammar as G
from mths.config import SearchConfig
from mths.lineage import summary as lineage_summary
from mths.llm import GrammarLLM, LoggedLLM, OpenAILLM, ReplayLLM
from mths.pipeline import evaluate, run_meta, run_search, save_run
from mths.sandbox import Limits
from mths.search import Evaluator, Search

LIM = Limits(0.3, 2, sandbox="process")  # the search's properties; isolation is test_sandbox.py's
NORM = {"tsp": -0.05, "fssp": -0.05}
HEAD = "class TSPSolver:\n    def __init__(self, time_limit, steps, seed, **kw): pass\n"


def test_sandbox_kills_an_endless_loop_and_marks_a_raising_program_invalid(make_tsp):
    inst = make_tsp(8)
    sleeper = HEAD + "    def solve(self):\n        import time\n        while True: time.sleep(0.01)\n"
    (row,) = evaluate("tsp", sleeper, [inst], Limits(0.2, 1, wall_factor=1.0, wall_extra=0.3))
    assert row["status"] == "timeout" and not row["feasible"] and row["gap"] == math.inf
    loop = HEAD + "    def solve(self):\n        while True: pass\n"  # RLIMIT_CPU ends it (or the wall)
    (row,) = evaluate("tsp", loop, [inst], Limits(0.1, 1, wall_factor=1.0, wall_extra=0.5))
    assert row["status"] in ("timeout", "error") and not row["feasible"] and row["gap"] == math.inf
    boom = HEAD + "    def solve(self):\n        raise ValueError('boom')\n"
    (row,) = evaluate("tsp", boom, [inst], LIM)
    assert row["status"] == "error" and "boom" in row["error"]
    net = HEAD + "    def solve(self):\n        import socket; socket.socket()\n"
    (row,) = evaluate("tsp", net, [inst], LIM)
    assert row["status"] == "error" and "sandbox" in row["error"]
    ev = Evaluator({"tsp": [inst]}, Limits(0.1, 1, wall_factor=1.0, wall_extra=0.5))
    assert ev.scores({"tsp": loop}) == {"tsp": -math.inf}
    ok = HEAD + "    def solve(self):\n        return list(range(8))\n"
    assert math.isfinite(ev.scores({"tsp": ok})["tsp"])  # the run goes on


@pytest.fixture
def train1(tiny_train):
    """One instance per task: every property below is about the search, not the instance count."""
    return {t: v[:1] for t, v in tiny_train.items()}


def _run(train, method="mths", seed=0, budget=14, cfg=None):
    return run_search(method, list(train), train, GrammarLLM(seed), budget, LIM, 2, seed,
                      cfg or SearchConfig(pop=2, eoh_pop=2), NORM)


def test_counters_equal_calls_and_evaluations_and_the_budget_is_exact(train1):
    for method, budget in (("mths", 17), ("eoh", 9), ("random", 5)):
        s, llm, ev = _run(train1, method, budget=budget)
        assert llm.calls == len(llm.log) == budget
        progs = {(t, p) for ind in s.history for t, p in ind.programs.items()
                 if p is not None and t in ind.scores and ind.lineage.get("task", t) == t}
        assert ev.evaluations == len(ev.cache) == len(progs)
        assert len(s.population) <= 2 * (1 if method == "mths" else 2)


def test_both_levels_and_transfer_act_and_notransfer_never_transfers(train1):
    s, _, _ = _run(train1, "mths", budget=22, cfg=SearchConfig(pop=2, p_transfer=1.0))
    ops = {i.lineage["op"] for i in s.history}
    assert {"init", "transfer"} <= ops and ops & {"crossover", "mutation"}
    s2, _, _ = _run(train1, "mths-notransfer", budget=16, cfg=SearchConfig(pop=2, p_transfer=1.0))
    ops2 = {i.lineage["op"] for i in s2.history}
    assert "transfer" not in ops2 and ops2 & {"refine", "keyfn"}
    for i in s.history:  # transfer copied its donor's genes
        if i.lineage["op"] == "transfer":
            cfg = G.parse_configs(i.programs[i.lineage["task"]])[0]
            donor = G.parse_configs(s.history[i.lineage["parents"][1]].programs[i.lineage["donor"]])[0]
            assert any(cfg[g] == donor[g] for g in ("accept", "temp", "strength", "improve", "credit", "pool"))


def test_archive_keeps_each_tasks_best_ever_and_selection_keeps_n(train1):
    s, _, _ = _run(train1, "mths", budget=20)
    for t in train1:
        best = max(i.scores[t] for i in s.history if t in i.scores)
        assert s.archive[t][0] == best and s.history[s.archive[t][1]].scores[t] == best
    assert len(s.population) == 2


def test_grammar_runs_are_byte_identical_for_a_seed_and_replay_reproduces_them(train1, tmp_path):
    outs = []
    for k in range(2):
        s, llm, ev = _run(train1, seed=3)
        save_run(tmp_path / f"r{k}", s, llm, ev, run_meta("mths", list(train1), 14, LIM, 2, 3, SearchConfig(pop=2), "grammar"))
        outs.append(s)
    for f in ("calls.jsonl", "lineage.jsonl", "lineage.json", "lineage.dot", "run.json"):
        assert (tmp_path / "r0" / f).read_bytes() == (tmp_path / "r1" / f).read_bytes()
    g = json.loads((tmp_path / "r0" / "lineage.json").read_text())  # the lineage graph = the history
    s0 = outs[0]
    assert [n["op"] for n in g["nodes"]] == [i.lineage["op"] for i in s0.history]
    assert sorted((e["source"], e["target"]) for e in g["edges"]) == sorted(
        (p, i.id) for i in s0.history for p in i.lineage.get("parents", []))
    sm = lineage_summary(g)
    assert sm["elites_from_transfer"] == s0.transfer_elites()
    assert {t: e["individual"] for t, e in sm["elites"].items()} == {t: i for t, (_, i) in s0.archive.items()}
    assert (tmp_path / "r0" / "lineage.dot").read_text().count("->") == len(g["edges"])
    s3, _, _ = _run(train1, seed=4, budget=3)  # another seed: other programs from the first calls on
    assert [i.programs for i in s3.history] != [i.programs for i in outs[0].history[:len(s3.history)]]
    records = [json.loads(x) for x in (tmp_path / "r0" / "calls.jsonl").read_text().splitlines()]
    rep, llm, _ = run_search("mths", list(train1), train1, ReplayLLM(records), 14, LIM, 1, 3,
                             SearchConfig(pop=2), NORM)
    assert [(i.programs, i.scores, i.lineage) for i in rep.history] == \
           [(i.programs, i.scores, i.lineage) for i in outs[0].history]
    with pytest.raises(Exception, match="diverged"):
        run_search("mths", list(train1), train1, ReplayLLM(records), 14, LIM, 1, 3,
                   SearchConfig(pop=3), NORM)


def test_an_unusable_reply_is_an_invalid_individual_and_the_run_goes_on(train1):
    class Junk:
        name = "junk"

        def complete(self, prompt):
            return "I cannot help with that."
    llm = LoggedLLM(Junk(), 12)
    s = Search(list(train1), llm, Evaluator(train1, LIM), SearchConfig(pop=2), NORM, 0, "mths")
    s.run()
    assert llm.calls == 12 and s.invalid == 12 and all(i.fitness == -math.inf for i in s.history)


def test_openai_client_on_a_loopback_server(monkeypatch, tmp_path, tiny_train):
    seen = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization"), body))
            reply = GrammarLLM(0).complete(body["messages"][0]["content"])
            data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": reply}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass
    srv = HTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        monkeypatch.setenv("MTHS_TEST_KEY", "sk-secret-123")
        client = OpenAILLM("coder-7b", f"http://127.0.0.1:{srv.server_port}/v1", "MTHS_TEST_KEY")
        s, llm, ev = run_search("mths", ["tsp"], tiny_train, client, 4, LIM, 1, 0, SearchConfig(pop=2), NORM)
        save_run(tmp_path / "run", s, llm, ev, run_meta("mths", ["tsp"], 4, LIM, 1, 0, SearchConfig(pop=2), "openai"))
    finally:
        srv.shutdown()
    assert len(seen) == 4 and all(p == "/v1/chat/completions" for p, _, _ in seen)
    assert all(a == "Bearer sk-secret-123" for _, a, _ in seen)
    assert seen[0][2]["model"] == "coder-7b" and seen[0][2]["messages"][0]["role"] == "user"
    assert math.isfinite(s.archive["tsp"][0])
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            assert "sk-secret-123" not in f.read_text()


def test_lineage_summary_counts_transfer_elites_and_transfer_ancestors():
    from mths.lineage import build, to_dot

    rows = [{"id": 0, "scores": {"tsp": -0.1, "cvrp": -0.2}, "fitness": -1.0, "lineage": {"op": "init"}},
            {"id": 1, "scores": {"tsp": -0.1, "cvrp": -0.1}, "fitness": -0.8,
             "lineage": {"op": "transfer", "parents": [0, 0], "task": "cvrp", "donor": "tsp"}},
            {"id": 2, "scores": {"tsp": -0.1, "cvrp": -0.05}, "fitness": -0.6,
             "lineage": {"op": "refine", "parents": [1], "task": "cvrp"}},
            {"id": 3, "scores": {"tsp": -0.01, "cvrp": -0.05}, "fitness": -0.5,
             "lineage": {"op": "keyfn", "parents": [2], "task": "tsp"}}]
    g = build(rows, {"tsp": {"score": -0.01, "individual": 3}, "cvrp": {"score": -0.05, "individual": 2}}, 3)
    sm = summary = lineage_summary(g)
    assert summary["elites_by_operator"] == {"keyfn": 1, "refine": 1}
    assert sm["elites_from_transfer"] == 0
    # cvrp's elite descends from a transfer into cvrp; tsp's elite has it only into another task
    assert sm["elites_with_transfer_ancestor"] == 1
    g2 = build(rows, {"tsp": {"score": -0.1, "individual": 0}, "cvrp": {"score": -0.1, "individual": 1}}, 1)
    assert lineage_summary(g2)["elites_from_transfer"] == 1
    assert 'style=dashed' in to_dot(g) and to_dot(g).count("->") == 4


TRANSFER_GENES = ("accept", "temp", "strength", "improve", "credit", "pool", "init", "polish", "restart_after")


def test_transfer_between_configs_differing_on_every_gene_moves_donor_genes():
    """A recipient and a donor that differ on every gene: every child differs from its recipient and
    carries at least one donor gene (transfer as a no-op, ``return dict(cfg)``, fails here)."""
    import numpy as np

    mh_r = {k: v[0] for k, v in G.MH_SPACE.items()}
    mh_d = {k: v[1] for k, v in G.MH_SPACE.items()}  # a different value on every gene
    rng = np.random.default_rng(0)
    rec = G.instantiate("tsp", mh_r, rng)
    donor = G.instantiate("fssp", mh_d, rng)
    assert all(rec[g] != donor[g] for g in TRANSFER_GENES)
    for seed in range(20):
        child = G.transfer("tsp", rec, "fssp", donor, np.random.default_rng(seed))
        assert child != rec
        assert any(child[g] == donor[g] for g in TRANSFER_GENES)


def test_in_the_real_loop_no_transfer_child_equals_its_recipient(train1):
    """The loop with p_transfer = 1, one individual A, and the fssp archive elite a constructed
    donor D whose metaheuristic differs from A's on every gene: every transfer into tsp (from D)
    differs from its recipient and carries a donor gene."""
    import numpy as np
    from mths.llm import LoggedLLM
    from mths.search import Individual

    rng = np.random.default_rng(0)
    mh_a = {k: v[0] for k, v in G.MH_SPACE.items()}
    mh_d = {k: v[1] for k, v in G.MH_SPACE.items()}
    ev = Evaluator(train1, LIM)
    progs_a = {t: G.render_program(t, G.instantiate(t, mh_a, rng), "A") for t in train1}
    progs_d = {t: G.render_program(t, G.instantiate(t, mh_d, rng), "D") for t in train1}
    s = Search(list(train1), LoggedLLM(GrammarLLM(0), 16), ev, SearchConfig(pop=1, p_transfer=1.0), NORM, 0, "mths")
    a = Individual(0, G.render_mh(mh_a), progs_a, ev.scores(progs_a), lineage={"op": "init"})
    d = Individual(1, G.render_mh(mh_d), progs_d, {"tsp": -math.inf, "fssp": 1.0}, lineage={"op": "init"})
    a.fitness, d.fitness = 0.0, -math.inf
    s.history += [a, d]
    s.population.append(a)
    s.archive.update({"tsp": (a.scores["tsp"], 0), "fssp": (1.0, 1)})  # D stays fssp's elite
    s.run()
    moved = 0
    for i in s.history:
        if i.lineage["op"] != "transfer" or not i.programs.get(i.lineage["task"]):
            continue
        t, dt = i.lineage["task"], i.lineage["donor"]
        child = G.parse_configs(i.programs[t])[0]
        recipient = G.parse_configs(s.history[i.lineage["parents"][0]].programs[t])[0]
        donor = G.parse_configs(s.history[i.lineage["parents"][1]].programs[dt])[0]
        differ = [g for g in TRANSFER_GENES if donor[g] != recipient[g]]
        if differ:  # (a donor equal on every gene has nothing to give)
            moved += 1
            assert child != recipient, i.id
            assert any(child[g] == donor[g] for g in differ), i.id
    assert moved >= 2


def test_a_new_metaheuristic_is_what_its_programs_follow(train1):
    """Upper level: the programs of a crossover / mutation child are instantiated from the child's
    new metaheuristic (not its parent's): every metaheuristic gene reaches every task's CONFIG."""
    s, _, _ = _run(train1, "mths", budget=30, cfg=SearchConfig(pop=2, p_transfer=0.0))
    upper = [i for i in s.history if i.lineage["op"] in ("crossover", "mutation") and i.metaheuristic]
    assert upper and any(i.lineage["op"] == "mutation" for i in upper)
    for i in upper:
        genome = G.parse_genomes(i.metaheuristic)[0]
        for t, prog in i.programs.items():
            if prog is None:
                continue
            cfg = G.parse_configs(prog)[0]
            assert {k: cfg[k] for k in G.MH_SPACE if k in cfg} == {k: genome[k] for k in G.MH_SPACE if k in cfg}, (i.id, t)


def test_random_search_is_one_fresh_program_per_call_and_the_curves_are_best_so_far(train1):
    s, llm, ev = _run(train1, "random", budget=6)
    assert [r["operator"] for r in llm.log] == ["eoh_init"] * 6
    assert [r["task"] for r in llm.log] == ["tsp", "fssp"] * 3
    assert all("--- PROGRAM" not in r["prompt"] for r in llm.log)  # no parent: nothing to improve on
    for t in train1:
        curve = s.best_so_far(t, 6)
        assert len(curve) == 6 and all(b >= a for a, b in zip(curve, curve[1:]))
        assert curve[-1] == s.archive[t][0]
        assert curve[0] == (max(sc for c, tt, sc in s.trace if tt == t and c <= 1) if t == "tsp" else -math.inf)
    m, _, _ = _run(train1, "mths", budget=9)
    assert [c for c, _, _ in m.trace] == sorted(c for c, _, _ in m.trace) and m.trace[-1][0] <= 9
    assert m.best_so_far("tsp", 9)[-1] == m.archive["tsp"][0]
