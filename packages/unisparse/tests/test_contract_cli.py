"""The icml26 contract, and the CLI's one-line errors (exit 2, nothing written)."""

from __future__ import annotations

import json

import pytest
from unisparse.cli import main

from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "unisparse"


@pytest.mark.parametrize("argv,msg", [
    (["bench", "--methods", "nope"], "unknown method 'nope'"),
    (["bench", "--density", "0"], "--density must lie in (0, 1]"),
    (["bench", "--block-size", "48"], "--block-size must be a power of two"),
    (["bench", "--lengths", "64", "--heads", "3", "--kv-heads", "2", "--repeats", "1"],
     "must be a multiple of --kv-heads"),
    (["eval", "--model", "/nonexistent/model"], "/nonexistent/model does not exist"),
    (["bench", "--kv-heads", "0"], "--kv-heads must be >= 1"),
    (["bench", "--density", "nan"], "--density must lie in (0, 1]"),
    (["eval", "--model", "smollm2", "--dtype", "fp8"], "invalid choice"),
    (["bench", "--lengths", "x"], "invalid int value"),
    (["reproduce", "--scale", "huge"], "unknown scale 'huge'"),
])
def test_user_errors_are_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("unisparse: error: ") and msg in err[0]


def test_out_is_never_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "rows.json"
    out.write_text("keep")
    assert main(["bench", "--lengths", "64", "--out", str(out)]) == 2
    assert out.read_text() == "keep"
    assert "exists" in capsys.readouterr().err


def test_bench_writes_rows(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = main(["bench", "--lengths", "200", "--heads", "2", "--kv-heads", "1", "--repeats", "1",
               "--block-size", "32", "--methods", "unisparse", "dense", "--out", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert {r["method"] for r in rows} == {"unisparse", "dense"}
    dense = next(r for r in rows if r["method"] == "dense")
    assert dense["recall"] == pytest.approx(1.0) and dense["rel_error"] < 1e-5
    assert "unisparse" in capsys.readouterr().out


def test_model_folder_without_tokenizer_is_one_line(model_copy, capsys):
    (model_copy / "tokenizer.json").unlink()
    (model_copy / "tokenizer_config.json").unlink()
    assert main(["eval", "--model", str(model_copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no tokenizer" in err[0]


def test_corrupt_model_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert main(["eval", "--model", str(tmp_path), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("unisparse: error: ")
    assert not (tmp_path / "o.json").exists()
