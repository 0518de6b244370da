"""CLI: simulate → multimodal / compare round trip, and every refusal is one line, exit 2, nothing
written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from figuro.cli import main


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("figuro: error:") and match in err[0], err


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "data"
    assert main(["simulate", "--ks", "1", "--k1", "1", "--k2", "1", "--n", "200", "--dim", "10",
                 "--seed", "3", "--out", str(out)]) == 0
    return out


def test_simulate_writes_views_and_truth_deterministically(sim, tmp_path):
    truth = json.loads((sim / "truth.json").read_text())
    assert truth["shared"] == 1 and truth["private"] == [1, 1]
    again = tmp_path / "again"
    assert main(["simulate", "--ks", "1", "--k1", "1", "--k2", "1", "--n", "200", "--dim", "10",
                 "--seed", "3", "--out", str(again)]) == 0
    assert np.array_equal(np.load(sim / "x1.npy"), np.load(again / "x1.npy"))


def test_multimodal_prints_and_writes_json(sim, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["multimodal", str(sim / "x1.npy"), str(sim / "x2.npy"), "--latent-dim", "6",
                 "--max-rounds", "3", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    printed = json.loads(cap.out)
    assert printed == json.loads(out.read_text())
    assert set(printed) >= {"shared", "private", "history", "answer_distortion", "pretrain_plateau"}
    assert len(printed["private"]) == 2
    assert printed["history"][0] == {"shared": 6, "private0": 6, "private1": 6}
    # 3 checks cannot accept a reduction: the answer is the cap, said once on stderr and in JSON
    assert printed["warnings"] and "no reduction found" in cap.err


def test_compare_classical_uses_inclusion_exclusion(sim, capsys):
    assert main(["compare", str(sim / "x1.npy"), str(sim / "x2.npy"), "--estimators", "lpca,ajive",
                 "--latent-dim", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"lpca", "ajive"} and set(out["lpca"]) == {"shared", "private"}


def test_csv_id_column_aligns_rows(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 3))
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("id,f1,f2,f3\n" + "".join(f"r{i},{','.join(map(str, x[i]))}\n" for i in range(40)))
    order = rng.permutation(40)
    b.write_text("g1,id\n" + "".join(f"{x[i, 0]},r{i}\n" for i in order))
    from figuro.io import load_views

    v1, v2 = load_views([a, b], id_column="id")
    assert np.allclose(v1[:, 0], v2[:, 0])


@pytest.mark.parametrize("argv,match", [
    (["multimodal", "MISSING.npy", "MISSING2.npy"], "does not exist"),
    (["estimate", "X.npy", "--threshold", "nan"], "finite"),
    (["estimate", "X.npy", "--latent-dim", "0"], ">= 1"),
    (["estimate", "X.npy", "--max-rounds", "0"], ">= 1"),
    (["compare", "X.npy", "--estimators", "twonn,magic"], "unknown estimator"),
    (["simulate", "--ks", "-1", "--k1", "1", "--k2", "1", "--out", "o"], ">= 0"),
    (["multimodal", "X.npy"], "at least two views"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_are_one_line(argv, match, capsys):
    assert main(argv) == 2
    _one_line_error(capsys, match)


def test_refusals_write_nothing(tmp_path, capsys):
    rng = np.random.default_rng(1)
    x1, x2 = rng.standard_normal((100, 5)), rng.standard_normal((90, 5))
    np.save(tmp_path / "x1.npy", x1)
    np.save(tmp_path / "x2.npy", x2)
    bad = x1.copy()
    bad[3, 2] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    (tmp_path / "corrupt.npy").write_bytes(b"not numpy")
    res = tmp_path / "r.json"
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [
        (["multimodal", "x1.npy", "x2.npy"], "different row counts"),
        (["multimodal", "nan.npy", "x1.npy"], "NaN"),
        (["multimodal", "corrupt.npy", "x1.npy"], "not a readable .npy"),
        (["estimate", "x1.npy", "--latent-dim", "32"], "at least 128"),
    ]
    for argv, match in cases:
        argv = [str(tmp_path / a) if a.endswith(".npy") else a for a in argv]
        assert main([*argv, "--json", str(res)]) == 2
        _one_line_error(capsys, match)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    res.write_text("keep")
    assert main(["estimate", str(tmp_path / "x1.npy"), "--latent-dim", "4", "--json", str(res)]) == 2
    _one_line_error(capsys, "already exists")
    assert res.read_text() == "keep"
    out = tmp_path / "sim"
    out.mkdir()
    assert main(["simulate", "--ks", "1", "--k1", "1", "--k2", "1", "--out", str(out)]) == 2
    _one_line_error(capsys, "already exists")
    assert list(out.iterdir()) == []


def test_embed_refusals(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    out = tmp_path / "e.npy"
    assert main(["embed", str(empty), "--out", str(out), "--model", str(tmp_path)]) == 2
    _one_line_error(capsys, "not a sentence-transformers")
    assert main(["embed", str(empty), "--out", str(out), "--model", str(tmp_path / "nope")]) == 2
    _one_line_error(capsys, "does not exist")
    (tmp_path / "config.json").write_text("{}")
    assert main(["embed", str(empty), "--out", str(out), "--model", str(tmp_path)]) == 2
    _one_line_error(capsys, "has no texts")
    assert not out.exists()


def test_csv_quoted_fields_tsv_and_non_numeric(tmp_path, capsys):
    from figuro.io import load_view

    a = tmp_path / "a.csv"
    a.write_text('"id","f1"\n"x,1",1.5\n"x,2",2.5\n')
    x, ids = load_view(a, id_column="id")
    assert ids == ["x,1", "x,2"] and x[:, 0].tolist() == [1.5, 2.5]
    t = tmp_path / "t.tsv"
    t.write_text("f1\tf2\n1\t2\n3\t4\n")
    assert load_view(t)[0].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    bad = tmp_path / "bad.csv"
    bad.write_text("name,f1\nr1,1\n")
    assert main(["estimate", str(bad), "--latent-dim", "1"]) == 2
    _one_line_error(capsys, "non-numeric value")
