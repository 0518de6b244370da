"""CLI: collect -> fit -> null-test -> ablate on a tiny in-process Llama, and the one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from decodeshare.cli import main
from decodeshare.tasks import make_tasks, split_items

torch.set_num_threads(1)


def _write(path, items):
    path.write_text("".join(json.dumps(it) + "\n" for it in items))
    return path


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decodeshare: error:") and match in err[0], err


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """Calibration items collect the states and fit the basis; disjoint evaluation items are
    scored (the fixture returns the evaluation file)."""
    d = tmp_path_factory.mktemp("cli")
    calib, evals = split_items(make_tasks(6, seed=2, tasks=("parity", "truefalse", "larger")), 3)
    cal = _write(d / "calib.jsonl", calib)
    tasks = _write(d / "eval.jsonl", evals)
    assert main(["collect", "--model", "tiny-llama", "--calib", str(cal), "--layer", "1",
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
    assert main(["ablate", "--model", "tiny-llama", "--eval", str(tasks), "--basis", str(d / "basis"),
                 "--controls", "alpha,k,random,prefill", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {"baseline", "shared", "alpha", "k", "random", "prefill"} <= set(res)
    assert res["shared"]["ci_low"] <= res["shared"]["drop"] <= res["shared"]["ci_high"]
    assert res["alpha"]["energy_ratio"] == pytest.approx(1.0, rel=1e-6)
    assert res["random"]["energy_ratio"] == pytest.approx(1.0, rel=1e-6)  # energy-matched random
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
    assert main(["ablate", "--model", "tiny-llama", "--eval", str(tasks), "--basis", str(bad)]) == 2
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
    assert main(["ablate", "--model", "tiny-llama", "--eval", str(gen), "--basis", str(d / "basis"),
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


def test_evaluation_on_calibration_items_is_refused(pipeline, tmp_path, capsys):
    d, tasks = pipeline
    cal = d / "calib.jsonl"
    capsys.readouterr()
    # --eval equal to --calib
    assert main(["ablate", "--model", "tiny-llama", "--calib", str(cal), "--eval", str(cal),
                 "--basis", str(d / "basis"), "--controls", "k"]) == 2
    _one_line_error(capsys, "is the --calib file")
    # a copy of the calibration items: caught by the fingerprints in the states' manifest
    copy = tmp_path / "copy.jsonl"
    copy.write_text(cal.read_text())
    for verb in ("ablate", "patchback"):
        assert main([verb, "--model", "tiny-llama", "--eval", str(copy), "--basis", str(d / "basis")]) == 2
        _one_line_error(capsys, "evaluation items are calibration prompts")
    # one calibration item mixed into the evaluation file
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(tasks.read_text() + cal.read_text().splitlines(keepends=True)[0])
    assert main(["ablate", "--model", "tiny-llama", "--eval", str(mixed), "--basis", str(d / "basis")]) == 2
    _one_line_error(capsys, "1 of 10 evaluation items")
    assert main(["ablate", "--model", "tiny-llama", "--eval", str(copy), "--basis", str(d / "basis"),
                 "--controls", "k", "--allow-overlap", "--json"]) == 0


def test_dtype_and_device_reach_the_model(tmp_path, capsys):
    from decodeshare.cli import _model, build_parser

    args = build_parser().parse_args(["ablate", "--model", "tiny-llama", "--eval", "x.jsonl", "--basis", "b",
                                      "--dtype", "bf16", "--device", "cpu"])
    model, _ = _model(args)
    assert {(p.dtype, p.device.type) for p in model.parameters()} == {(torch.bfloat16, "cpu")}
    tasks = _write(tmp_path / "t.jsonl", make_tasks(2, tasks=("parity", "larger")))
    assert main(["collect", "--model", "tiny-llama", "--calib", str(tasks), "--layer", "0",
                 "--max-new-tokens", "3", "--dtype", "bf16", "--device", "cpu", "--out", str(tmp_path / "s")]) == 0
    for flag, value, match in (("--dtype", "int8", "unknown dtype"), ("--device", "tpu", "unknown device")):
        assert main(["collect", "--model", "tiny-llama", "--calib", str(tasks), "--layer", "0",
                     "--max-new-tokens", "3", flag, value, "--out", str(tmp_path / "o")]) == 2
        _one_line_error(capsys, match)
    assert not (tmp_path / "o").exists()


def test_fit_on_the_stringency_scale(pipeline, capsys):
    d, _ = pipeline
    assert main(["fit", str(d / "states"), "--out", str(d / "basis_tk"), "--var", "0.9", "--tau-k", "2.8"]) == 0
    meta = json.loads((d / "basis_tk" / "basis.json").read_text())
    assert meta["tau_k"] == pytest.approx(2.8) and meta["tau"] == pytest.approx(2.8 / meta["k"])
    assert meta["tau_k_rule"] == 2.8
    capsys.readouterr()
    assert main(["fit", str(d / "states"), "--out", str(d / "b3"), "--tau", "0.01", "--tau-k", "2"]) == 2
    _one_line_error(capsys, "not allowed with")
    assert not (d / "b3").exists()
