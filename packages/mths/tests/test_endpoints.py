"""Endpoints fail fast: a loopback server answering 401 / 404, or no server, is one line and exit 2
within seconds with nothing written; 429 then 200 is one budgeted call; a failure mid-run stops
the run with its call log written, and ``--resume`` continues it."""

import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from mths.cli import main
from mths.llm import GrammarLLM, LoggedLLM, OpenAILLM


class Server:
    """``plan``: the HTTP status of each request in turn (then 200 forever); 200 answers with the
    grammar operator's reply to the prompt."""

    def __init__(self, plan=(), reply=None):
        self.plan, self.seen = list(plan), []
        answer = reply or (lambda prompt: GrammarLLM(0).complete(prompt))
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append(body)
                code = outer.plan.pop(0) if outer.plan else 200
                if code == 200:
                    prompt = body["messages"][0]["content"]
                    reply = answer(prompt) if "OPERATOR:" in prompt else "OK"
                    data = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": reply}}]}
                else:
                    data = {"error": {"message": f"status {code}", "type": "x", "code": code}}
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if code == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *a):
                pass

        self.srv = HTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_port}/v1"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("MTHS_TEST_KEY", "sk-test")


@pytest.fixture
def inst(tmp_path, capsys):
    d = tmp_path / "inst"
    assert main(["gen-instances", "--task", "tsp", "--n", "8", "--count", "1", "--seed", "0", "--out", str(d)]) == 0
    capsys.readouterr()
    return d


def _run(url, out, inst, *extra):
    return main(["run", "--tasks", "tsp", "--llm", "openai", "--model", "m", "--base-url", url,
                 "--api-key-env", "MTHS_TEST_KEY", "--budget-calls", "6", "--pop", "2", "--instances", str(inst),
                 "--time-limit", "0.05", "--steps", "1", "--sandbox", "process", "--max-retries", "1",
                 "--out", str(out), *extra])


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("case", ["401", "403", "404", "no-server"])
def test_a_bad_endpoint_is_one_line_exit_2_before_anything_is_written(case, key, inst, tmp_path, capsys):
    srv = None if case == "no-server" else Server([int(case)] * 10)
    url = srv.url if srv else f"http://127.0.0.1:{_free_port()}/v1"
    t0 = time.monotonic()
    try:
        rc = _run(url, tmp_path / "out", inst)
    finally:
        if srv:
            srv.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("mths: error: LLM endpoint check failed")
    assert {"401": "refused the key", "403": "refused the key", "404": "not found",
            "no-server": "cannot connect"}[case] in err[0]
    assert "sk-test" not in err[0]
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - t0 < 10
    if srv:
        assert len(srv.seen) == 1 and srv.seen[0]["max_tokens"] == 1  # a minimal request, not retried


def test_429_then_200_is_one_budgeted_call(key):
    srv = Server([429, 503])
    try:
        llm = LoggedLLM(OpenAILLM("m", srv.url, "MTHS_TEST_KEY", max_retries=3, max_tokens=50, temperature=0.2), 5)
        reply = llm("OPERATOR: init_mh\n", "init_mh", None)
    finally:
        srv.close()
    assert "ALGORITHM" in reply and llm.calls == 1 and len(llm.log) == 1 and llm.failures == []
    assert len(srv.seen) == 3 and srv.seen[-1]["max_tokens"] == 50 and srv.seen[-1]["temperature"] == 0.2


def test_a_failure_mid_run_stops_it_with_the_log_written_and_resume_continues(key, inst, tmp_path, capsys):
    out = tmp_path / "out"
    srv = Server([200, 200, 200, 401, 401, 401])  # the check and two calls, then the key is revoked
    try:
        rc = _run(srv.url, out, inst)
    finally:
        srv.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "stopped after 2 calls" in err[-1] and "--resume" in err[-1]
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is False and "refused the key" in run["stopped"]
    assert run["calls"] == 2 and len(run["endpoint_failures"]) == 1
    assert len((out / "calls.jsonl").read_text().splitlines()) == 2
    srv = Server()
    try:
        rc = _run(srv.url, out, inst, "--resume")
    finally:
        srv.close()
    assert rc == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is True and run["calls"] == 6
    assert len(srv.seen) == 1 + 4  # the check, then only the calls the log did not hold


def test_a_tiny_hf_model_without_a_chat_template_gets_the_plain_prompt(tmp_path):
    """A random 1-layer Llama with SmolLM2's tokenizer minus its chat template (no download)."""
    import shutil

    from icml26_shared.data import cache_dir

    tok_dir = cache_dir() / "smollm2-135m-instruct"
    if not (tok_dir / "tokenizer.json").is_file():
        pytest.skip("SmolLM2's tokenizer is not in the local cache")
    torch = pytest.importorskip("torch")
    from mths.llm import HFLLM
    from transformers import LlamaConfig, LlamaForCausalLM

    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, tmp_path / f)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    llm = HFLLM(str(tmp_path), max_new_tokens=3, device="cpu", temperature=0.7)
    assert llm.chat is False
    reply = LoggedLLM(llm, 1)("OPERATOR: init_mh\nWrite a metaheuristic.", "init_mh", None)
    assert isinstance(reply, str) and 1 <= llm.generated_tokens <= 3


def test_the_real_llm_row_counts_each_failure_kind_against_a_loopback_endpoint(key, make_tsp):
    """What quick's SmolLM2 search (and `full`'s served model) reports, with a fake endpoint whose
    replies fail in each way in turn: a grammar-initialised population, then one individual per
    reply; an unusable reply never stops the run."""
    import re

    from mths.config import SearchConfig
    from mths.llmrow import FAILURES, real_llm_search
    from mths.sandbox import Limits

    head = "```python\nclass TSPSolver:\n    def __init__(self, time_limit, steps, seed, **kw): self.n = len(kw['distance_matrix'])\n"
    replies = iter([
        "I would use simulated annealing.",                                   # no code block
        "```python\nprint('hello')\n```",                                     # no solver class
        "```python\nclass TSPSolver(:\n    pass\n```",                        # syntax
        head + "    def solve(self):\n        raise ValueError('boom')\n```",  # raised
        head + "    def solve(self):\n        return [0] * self.n\n```",       # infeasible
        head + "    def solve(self):\n        while True: pass\n```",          # timeout
        None,                                                                 # valid (grammar)
    ])

    def answer(prompt):
        r = next(replies)
        return GrammarLLM(0).complete(prompt) if r is None else r

    srv = Server(reply=answer)
    train = {"tsp": [make_tsp(8, 1, "a")]}
    lim = Limits(0.2, 2, wall_factor=1.0, wall_extra=0.4, sandbox="process")
    try:
        out = real_llm_search(OpenAILLM("m", srv.url, "MTHS_TEST_KEY", max_retries=0), ["tsp"], train, train, 7,
                              lim, lim, 2, 0, SearchConfig(pop=2), {"tsp": -0.05})
    finally:
        srv.close()
    assert out["calls"] == 7 and len(srv.seen) == 7  # the 4 population calls went to the grammar
    assert out["failures"] == dict.fromkeys(FAILURES, 1)
    assert out["parsable"] == 4 and out["valid"] == 1
    assert [c["outcome"] for c in out["per_call"]] == [*FAILURES, "valid"]
    assert math.isfinite(out["best_test_gap"]["tsp"]) and out["model"] == "openai:m"
    assert all(re.search(r"^OPERATOR: (refine|keyfn)", r["prompt"], re.M) for r in out["log"])
    # a reply cut off by the token cap inside its code block (what SmolLM2 does at 160 tokens)
    from mths.llmrow import reply_failure

    assert reply_failure("```python\nimport numpy as np\ndef tsp(x):\n    return", "tsp") == "no_solver_class"
    assert reply_failure("```python\nclass TSPSolver:\n    def solve(self):\n        return", "tsp") == "syntax"


def test_mths_llm_row_writes_the_classified_replies_and_refuses_the_grammar(key, tmp_path, capsys):
    srv = Server()
    args = ["llm-row", "--tasks", "tsp", "--model", "m", "--base-url", srv.url, "--api-key-env", "MTHS_TEST_KEY",
            "--calls", "2", "--pop", "2", "--time-limit", "0.05", "--steps", "1", "--test-time-limit", "0.05",
            "--test-steps", "1", "--sandbox", "process", "--workers", "2", "--json"]
    try:
        assert main([*args, "--llm", "grammar", "--out", str(tmp_path / "g")]) == 2
        assert "--llm openai|hf|replay" in capsys.readouterr().err
        rc = main([*args, "--llm", "openai", "--out", str(tmp_path / "row")])
    finally:
        srv.close()
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    row = json.loads(cap.out)
    assert row["calls"] == 2 and row["valid"] == 2 and sum(row["failures"].values()) == 0
    assert json.loads((tmp_path / "row" / "row.json").read_text())["valid"] == 2
    lines = (tmp_path / "row" / "calls.jsonl").read_text().splitlines()
    assert [json.loads(x)["outcome"] for x in lines] == ["valid", "valid"] and not (tmp_path / "g").exists()
    assert len(srv.seen) == 1 + 2  # the endpoint check, then the two steps
