"""The CLI: distill → evaluate round trip, fit-slopes on a planted run, and one-line errors (exit 2,
nothing written or changed)."""

from __future__ import annotations

import json

import pytest
from dd_multiindex.cli import main

P = "dd-multiindex: error:"


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(P) and match in err[0], err


def _planted_run(path, axes_values, law):
    path.mkdir()
    (path / "spec.json").write_text(json.dumps({"spec": {}, "distill_lr": 0.1}))
    rows = []
    for k, (d, r, L) in enumerate(axes_values):
        rows.append({"d": d, "r": r, "L": L, "seed": k, "stages": "12", "flags": [], **law(d, r, L)})
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_distill_then_evaluate(tmp_path, capsys):
    out = tmp_path / "s.safetensors"
    assert main(["distill", "--d", "8", "--r", "1", "--L", "8", "--m1", "4", "--steps", "3",
                 "--teacher-seed", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["memory_stage1"] == 4 * 9 and got["memory_stage2"] == 8 + 1 and got["memory"] == 45
    assert set(got) == {"test_mse", "alignment", "memory_stage1", "memory_stage2", "memory", "reference_test_mse",
                        "predict_0_test_mse", "reference_memory"}
    assert 1.5 < got["predict_0_test_mse"] < 2.5 and 0 < got["reference_test_mse"] < got["predict_0_test_mse"]
    assert 0 <= got["alignment"] <= 1 and got["test_mse"] > 0
    before = out.read_bytes()
    assert main(["distill", "--d", "8", "--r", "1", "--L", "8", "--m1", "4", "--teacher-seed", "1",
                 "--out", str(out)]) == 2
    _one_line(capsys, "already exists")
    assert out.read_bytes() == before


def test_fit_slopes_on_a_planted_run(tmp_path, capsys):
    cells = [(d, r, 64) for d in (16, 32, 64) for r in (1, 2, 4)]
    run = _planted_run(tmp_path / "run", cells, lambda d, r, L: {"m1_star": 5 * r**2, "memory_stage2": None,
                                                                  "compression": d**2})
    assert main(["fit-slopes", str(run), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert abs(got["m1_star"]["r"]["exponent"] - 2) < 1e-6 and abs(got["m1_star"]["d"]["exponent"]) < 1e-6
    assert abs(got["compression"]["d"]["exponent"] - 2) < 1e-6
    assert main(["fit-slopes", str(run), "--target", "m1_star", "--over", "L"]) == 2
    _one_line(capsys, "fewer than 2 distinct values of L")


@pytest.mark.parametrize("argv, match", [
    (["distill", "--d", "4", "--r", "5", "--L", "8", "--m1", "2", "--teacher-seed", "0"], "r=5 must be <= d=4"),
    (["distill", "--d", "4", "--r", "1", "--L", "0", "--m1", "2", "--teacher-seed", "0"], "--L"),
    (["distill", "--d", "4", "--r", "1", "--L", "8", "--m1", "0", "--teacher-seed", "0"], "--m1"),
    (["distill", "--d", "4", "--r", "1", "--L", "8", "--m1", "2", "--teacher-seed", "0", "--lr", "nan"], "lr"),
    (["distill", "--d", "4", "--r", "1", "--L", "8", "--m1", "2", "--teacher-seed", "0", "--distiller", "x"],
     "--distiller"),
    (["sweep", "--grid", "d=8;r=1"], "malformed --grid"),
    (["sweep", "--grid", "d=8;r=9;L=4"], "r <= d"),
    (["sweep", "--grid", "smoke", "--seeds", "0"], "--seeds"),
    (["bogus"], "invalid choice"),
])
def test_user_mistakes_are_one_line_and_write_nothing(tmp_path, capsys, argv, match):
    out = tmp_path / "o"
    assert main([*argv, "--out", str(out)]) == 2
    _one_line(capsys, match)
    assert not out.exists()


def test_evaluate_missing_and_corrupt_files(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope.safetensors")]) == 2
    _one_line(capsys, "does not exist")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    assert main(["evaluate", str(bad)]) == 2
    _one_line(capsys, "not a safetensors file")


def test_another_spec_into_a_run_is_refused(tmp_path, capsys):
    run = _planted_run(tmp_path / "run", [(8, 1, 8)], lambda d, r, L: {"m1_star": 1})
    before = (run / "rows.jsonl").read_bytes()
    assert main(["sweep", "--grid", "d=8;r=1;L=8", "--seeds", "1", "--out", str(run)]) == 2
    _one_line(capsys, "another sweep")
    assert (run / "rows.jsonl").read_bytes() == before
    assert main(["fit-slopes", str(tmp_path / "none")]) == 2
    _one_line(capsys, "not a sweep run")


def test_reproduce_full_says_what_it_needs(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: full would really run")
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    _one_line(capsys, "CUDA device")
    assert not (tmp_path / "r" / "dd-multiindex").exists()
