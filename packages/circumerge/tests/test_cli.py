"""CLI: bench output and JSON, and the one-line errors of bench / inspect / merge arguments."""

from __future__ import annotations

import json

import pytest
from circumerge.cli import main


def test_bench_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--shapes", "64x48", "--tasks", "3", "--rank", "2", "--spaces", "core",
                 "circulant", "circulant@none", "--rules", "ta", "ties", "--repeats", "1",
                 "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "circulant" in table and "ties" in table
    records = json.loads(out.read_text())
    assert len(records) == 6
    by = {(r["space"], r["rule"]): r for r in records}
    assert by[("core", "ta")]["ratio_to_core"] == 1.0
    assert by[("circulant@none", "ties")]["rel_error_to_core"] < 1e-4  # no sampling: equals core
    assert all(r["merged_rank"] <= 6 for r in records)


def test_bench_sweeps_tasks_and_ranks_caps_spaces_and_plots(tmp_path, capsys):
    png, js = tmp_path / "sweep.png", tmp_path / "sweep.json"
    assert main(["bench", "--shapes", "64x48", "--tasks", "2", "4", "--rank", "2", "3", "--spaces",
                 "core", "circulant", "knots", "--rules", "ties", "--error-rules", "tsv",
                 "--max-R", "knots=6", "--peft-at", "32x24x2x2", "--repeats", "1", "--warmup", "0",
                 "--plot", str(png), "--json", str(js)]) == 0
    captured = capsys.readouterr()
    assert "knots not run at 64x48, T=4, r=2" in captured.err
    records = json.loads(js.read_text())
    Rs = {(r["R"], r["space"]) for r in records if r["rule"] == "ties" and r["m"] == 64}
    assert {(4, "knots"), (6, "knots")} <= Rs and (8, "knots") not in Rs and (12, "circulant") in Rs
    peft = [r for r in records if r["space"] == "peft"]
    assert [r["rule"] for r in peft] == ["ties"] and peft[0]["m"] == 32  # peft has no tsv
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["bench", "--shapes", "8x8", "--plot", str(png)]) == 2  # exists, no --force
    _one_line_error(capsys, "already exists")


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("circumerge: error:") and match in err[0], err


def test_bench_refuses_unknown_space_and_existing_json(tmp_path, capsys):
    assert main(["bench", "--shapes", "8x8", "--spaces", "warp"]) == 2
    _one_line_error(capsys, "unknown space")
    assert main(["bench", "--shapes", "8x8", "--rules", "magic"]) == 2
    _one_line_error(capsys, "unknown rule")
    existing = tmp_path / "b.json"
    existing.write_text("keep")
    assert main(["bench", "--shapes", "8x8", "--json", str(existing)]) == 2
    _one_line_error(capsys, "already exists")
    assert existing.read_text() == "keep"


@pytest.mark.parametrize("argv, match", [
    (["merge", "a", "--out", "o", "--sketch-size", "big"], "sketch-size"),
    (["merge", "a", "--out", "o", "--space", "warp"], "--space"),
    (["bench", "--shapes", "4096"], "--shapes"),
    (["merge", "a", "--out", "o", "--weights", "1,nan"], "finite"),
    (["merge", "a", "--out", "o", "--weights", "1,inf"], "finite"),
    (["merge", "a", "--out", "o", "--weights", "0,0"], "all zero"),
    (["merge", "a", "--out", "o", "--density", "nan"], "density"),
    (["merge", "a", "--out", "o", "--sketch-target", "1.5"], "--sketch-target"),
    (["merge", "a", "--out", "o", "--sketch-target", "1"], "--sketch-target"),
    (["merge", "a", "--out", "o", "--density", "0"], "--density"),
    (["bench", "--max-R", "knots"], "--max-R"),
    (["bench", "--peft-at", "1024x1024"], "--peft-at"),
    (["bench", "--tasks", "0"], "--tasks"),
    (["merge", "a", "--out", "o", "--out-rank", "x"], "--out-rank"),
    (["merge", "a"], "--out"),
    (["frobnicate"], "invalid choice"),
])
def test_argument_errors_are_one_line_exit_2(tmp_path, capsys, argv, match):
    assert main(argv) == 2
    _one_line_error(capsys, match)
    assert not (tmp_path / "o").exists()


def test_inspect_missing_adapter(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    _one_line_error(capsys, "does not exist")


def test_reproduce_full_scale_says_what_it_needs(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the full scale would run")
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "CUDA device")


def test_peft_space_refuses_rules_peft_lacks(capsys):
    assert main(["merge", "a", "--out", "o", "--space", "peft", "--rule", "tsv"]) == 2
    _one_line_error(capsys, "peft")


def test_bench_times_ta_for_core_circulant_and_peft_cat_by_default(tmp_path, capsys):
    pytest.importorskip("transformers")
    js = tmp_path / "b.json"
    assert main(["bench", "--shapes", "64x48", "--tasks", "3", "--rank", "2", "--repeats", "1",
                 "--warmup", "0", "--json", str(js)]) == 0
    capsys.readouterr()
    by = {(r["space"], r["rule"]): r for r in json.loads(js.read_text())}
    assert {("core", "ta"), ("circulant", "ta"), ("peft", "ta")} <= set(by)
    assert ("peft", "ties") not in by  # peft's ties is dense: only at --peft-at
    assert by[("peft", "ta")]["median_s"] is not None and by[("peft", "ta")]["merged_rank"] == 6
    assert by[("peft", "ta")]["rel_error_to_core"] < 1e-5  # cat is exact
