"""CLI: collect -> fit -> null-test -> ablate on a tiny in-process Llama, and the one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from decodeshare.cli import main
from decodeshare.tasks import make_tasks

torch.set_num_threads(1)


def _write(path, items):
    path.write_text("".join(json.dumps(it) + "\n" for it in items))
    return path


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decodeshare: error:") and match in err[0], err


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    tasks = _write(d / "tasks.jsonl", make_tasks(3, seed=2, tasks=("parity", "truefalse", "larger")))
    assert main(["collect", "--model", "tiny-llama", "--tasks", str(tasks), "--layer", "1",
                 "--max-new-tokens", "4", "--out", str(d / "states")]) == 0
    assert main(["fit", str(d / "states"), "--out", str(d / "basis"), "--var", "0.9"]) == 0
    return d, tasks


def test_collect_fit_null_ablate(pipeline, capsys):
    d, tasks = pipeline
    man = json.loads((d / "states" / "manifest.json").read_text())
    assert man["layer"] == 1 and man["phase"] == "decode" and set(man["counts"]) == {"parity", "truefalse", "larger"}
    meta = json.loads((d / "basis" / "basis.json").read_text())
    assert meta["shared_dim"] == len(meta["shared_idx"]) and meta["tau_k"] == pytest.approx(1e-3 * meta["k"])
    capsys.readouterr()
    assert main(["null-test", str(d / "states"), "--basis", str(d / "basis"), "--null", "perm",
                 "--trials", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["p"] >= 1 / 20 and out["trials"] == 20
    assert main(["ablate", "--model", "tiny-llama", "--tasks", str(tasks), "--basis", str(d / "basis"),
                 "--controls", "alpha,k,random", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {"baseline", "shared", "alpha", "k", "random"} <= set(res)
    assert res["shared"]["ci_low"] <= res["shared"]["drop"] <= res["shared"]["ci_high"]
    assert res["alpha"]["energy_ratio"] == pytest.approx(1.0, rel=1e-6)
    assert all(c["prefill"] == 0 and c["decode"] > 0 for c in res["calls"])


def test_bad_answer_index(tmp_path, capsys):
    items = make_tasks(2, tasks=("parity",))
    items[1]["answer"] = 5
    tasks = _write(tmp_path / "t.jsonl", items)
    assert main(["collect", "--model", "tiny-llama", "--tasks", str(tasks), "--layer", "0",
                 "--max-new-tokens", "3", "--out", str(tmp_path / "s")]) == 2
    _one_line_error(capsys, "not an option index")
    assert not (tmp_path / "s").exists()


def test_layer_beyond_depth(tmp_path, capsys):
    tasks = _write(tmp_path / "t.jsonl", make_tasks(2, tasks=("parity", "larger")))
    assert main(["collect", "--model", "tiny-llama", "--tasks", str(tasks), "--layer", "9",
                 "--max-new-tokens", "3", "--out", str(tmp_path / "s")]) == 2
    _one_line_error(capsys, "out of range")
    assert not (tmp_path / "s").exists() and not list(tmp_path.glob(".s.*"))


def test_basis_of_another_width(pipeline, tmp_path, capsys):
    from safetensors.numpy import save_file

    d, tasks = pipeline
    bad = tmp_path / "basis"
    bad.mkdir()
    save_file({"Q": np.zeros((32, 3), np.float32), "shared": np.zeros((32, 2), np.float32)},
              str(bad / "basis.safetensors"))
    (bad / "basis.json").write_text(json.dumps({"layer": 1, "states": str(d / "states"), "tau": 1e-3, "m": "all"}))
    assert main(["ablate", "--model", "tiny-llama", "--tasks", str(tasks), "--basis", str(bad)]) == 2
    _one_line_error(capsys, "width 32")


def test_existing_output_and_bad_numbers(pipeline, capsys):
    d, _ = pipeline
    before = (d / "basis" / "basis.json").read_text()
    assert main(["fit", str(d / "states"), "--out", str(d / "basis")]) == 2
    _one_line_error(capsys, "already exists")
    assert (d / "basis" / "basis.json").read_text() == before
    for argv, match in ((["fit", str(d / "states"), "--out", str(d / "b2"), "--var", "nan"], "--var"),
                        (["fit", str(d / "states"), "--out", str(d / "b2"), "--m", "0"], "--m"),
                        (["null-test", str(d / "states"), "--basis", str(d / "basis"), "--null", "x"], "--null")):
        assert main(argv) == 2
        _one_line_error(capsys, match)
    assert not (d / "b2").exists()


def test_corrupt_states_and_missing_tasks(tmp_path, capsys):
    s = tmp_path / "s"
    s.mkdir()
    (s / "a.safetensors").write_bytes(b"garbage")
    (s / "b.safetensors").write_bytes(b"garbage")
    assert main(["fit", str(s), "--out", str(tmp_path / "b")]) == 2
    _one_line_error(capsys, "cannot read states")
    assert main(["collect", "--model", "tiny-llama", "--tasks", str(tmp_path / "nope.jsonl"), "--layer", "0",
                 "--max-new-tokens", "3", "--out", str(tmp_path / "o")]) == 2
    _one_line_error(capsys, "does not exist")


def test_reproduce_full_says_what_it_needs(tmp_path, capsys):
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "full scale")


def test_ablate_generation_items_and_steer_audit_refuses_them(pipeline, tmp_path, capsys):
    d, _ = pipeline
    gen = _write(tmp_path / "gen.jsonl", [{"id": str(i), "task": f"g{i % 2}", "prompt": p, "target": "4"}
                                          for i, p in enumerate(["2+2=", "1+3=", "3+1=", "0+4="])])
    capsys.readouterr()
    assert main(["ablate", "--model", "tiny-llama", "--tasks", str(gen), "--basis", str(d / "basis"),
                 "--controls", "random", "--max-new-tokens", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {"baseline", "shared", "random"} <= set(res) and 0.0 <= res["shared"]["accuracy"] <= 1.0
    assert all(c == {"prefill": 0, "decode": 2} for c in res["calls"])  # 3 new tokens: 2 decode passes
    vec = tmp_path / "v.safetensors"
    from safetensors.numpy import save_file

    save_file({"v": np.ones(64, np.float32)}, str(vec))
    assert main(["steer-audit", "--model", "tiny-llama", "--tasks", str(gen), "--basis", str(d / "basis"),
                 "--vectors", str(vec)]) == 2
    _one_line_error(capsys, "forced-choice")
