"""CLI: a fit/predict/eval round trip, and every refusal: one line, exit 2, no output left."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fair_cdal.cli import main


@pytest.fixture()
def files(tmp_path, small):
    views, y, g = small
    np.save(tmp_path / "v0.npy", views[0])
    header = ",".join(f"f{i}" for i in range(views[1].shape[1]))
    np.savetxt(tmp_path / "v1.csv", views[1], delimiter=",", header=header, comments="")
    (tmp_path / "g.csv").write_text("sex,site\n" + "".join(f"{a},{i % 2}\n" for i, a in enumerate(g)))
    (tmp_path / "y.csv").write_text("label\n" + "".join(f"{a}\n" for a in y))
    return tmp_path


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fair-cdal: error:") and match in err[0], err


def test_fit_predict_eval_round_trip(files, capsys):
    out = files / "run"
    assert main(["fit", str(files / "v0.npy"), str(files / "v1.csv"), "--sensitive", str(files / "g.csv"),
                 "--sensitive-column", "sex", "--n-clusters", "3", "--alpha", "0.3", "--max-iter", "5",
                 "--out", str(out)]) == 0
    assert "not converged" in capsys.readouterr().out  # 5 iterations: one line says so
    fit = json.loads((out / "fit.json").read_text())
    assert fit["fairness_terms_active"] == {"alpha": True, "beta": True, "gamma": True}
    assert fit["converged"] is False and len(fit["block_gaps"]) == fit["n_iter"]
    assert set(fit["weights_raw"]) == {"alpha", "beta", "gamma"}
    assert len(fit["objective"]) == fit["n_iter"] + 1
    lines = (out / "assignments.csv").read_text().splitlines()
    assert lines[0] == "index,cluster" and len(lines) == 241
    assert main(["predict", str(out), str(files / "v0.npy"), str(files / "v1.csv"),
                 "--out", str(files / "p.csv")]) == 0
    capsys.readouterr()
    assert main(["eval", str(out / "assignments.csv"), "--labels", str(files / "y.csv"), "--sensitive",
                 str(files / "g.csv"), "--sensitive-column", "sex", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert set(scores) == {"acc", "nmi", "purity", "f", "balance_ratio", "balance_proportion", "mnce"}
    assert all(0 <= v <= 1 for v in scores.values())


def _bad_files(files):
    views = np.load(files / "v0.npy")
    np.save(files / "short.npy", views[:-3])
    nan = views.copy()
    nan[17, 2] = np.nan
    np.save(files / "nan.npy", nan)
    (files / "gshort.csv").write_text("sex\n1\n0\n")
    (files / "g1.csv").write_text("sex\n" + "a\n" * 240)
    (files / "v73.mat").write_bytes(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, HDF5 schema 1.00" + b" " * 80)


@pytest.mark.parametrize("argv, match", [
    (["fit", "{f}/v0.npy", "{f}/short.npy", "--sensitive", "{f}/g.csv", "--sensitive-column", "sex"], "rows"),
    (["fit", "{f}/nan.npy", "--sensitive", "{f}/g.csv", "--sensitive-column", "sex"], "row 18"),
    (["fit", "{f}/v0.npy", "--sensitive", "{f}/gshort.csv"], "sensitive rows"),
    (["fit", "{f}/v0.npy", "--sensitive", "{f}/g.csv", "--sensitive-column", "age"], "no column"),
    (["fit", "{f}/v73.mat"], "v7.3"),
    (["fit", "{f}/missing.npy", "--sensitive", "{f}/g.csv"], "does not exist"),
    (["fit", "{f}/v0.npy", "--sensitive", "{f}/g1.csv"], "one group"),
    (["fit", "{f}/v0.npy", "--sensitive", "{f}/g.csv", "--sensitive-column", "sex", "--rho", "2"], "--rho"),
    (["fit", "{f}/v0.npy", "--sensitive", "{f}/g.csv", "--sensitive-column", "sex", "--alpha", "nan"], "--alpha"),
    (["front", "{f}/v0.npy", "--sensitive", "{f}/g.csv", "--sensitive-column", "sex", "--labels",
      "{f}/y.csv", "--methods", "cdal,magic"], "unknown method"),
])
def test_refusals_exit_2_and_leave_nothing(files, capsys, argv, match):
    _bad_files(files)
    out = files / "out"
    argv = [a.format(f=files) for a in argv]
    extra = [] if "--n-clusters" in argv else ["--n-clusters", "3"]
    assert main(argv + extra + ["--out", str(out)]) == 2
    _one_line(capsys, match)
    assert not out.exists()
    assert not [p for p in files.iterdir() if p.name.startswith(".out")]


def test_k_at_least_n_and_existing_out_are_refused(files, capsys):
    base = ["fit", str(files / "v0.npy"), "--sensitive", str(files / "g.csv"), "--sensitive-column", "sex"]
    assert main(base + ["--n-clusters", "240", "--out", str(files / "o")]) == 2
    _one_line(capsys, "--n-clusters")
    (files / "o").mkdir()
    (files / "o" / "keep").write_text("keep")
    assert main(base + ["--n-clusters", "3", "--out", str(files / "o")]) == 2
    _one_line(capsys, "already exists")
    assert (files / "o" / "keep").read_text() == "keep"


def test_reproduce_full_says_what_it_needs(tmp_path, capsys):
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    _one_line(capsys, "NUS-WIDE")
    assert not (tmp_path / "r" / "fair-cdal").exists()
