"""CLI: gen-data -> train -> eval / diagnose end to end on a tiny dataset, and one-line errors
(exit 2, no output folder) for users' mistakes."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from core_mtl.cli import main


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("core-mtl: error:") and match in err[0], err


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("d") / "shapes"
    assert main(["gen-data", "shaded-shapes", "--n-train", "24", "--n-test", "8", "--size", "16",
                 "--shift", "color", "--seed", "1", "--out", str(out)]) == 0
    return out


def test_gen_data_layout(data):
    tasks = json.loads((data / "tasks.json").read_text())
    assert tasks["seg"] == {"kind": "segmentation", "dir": "label", "classes": 4}
    for split, n in (("train", 24), ("test", 8), ("test_ood", 8)):
        for folder in ("image", "label", "depth", "normal"):
            assert len(list((data / split / folder).glob("*.npy"))) == n
    assert np.load(data / "train" / "image" / "0.npy").shape == (16, 16, 3)
    assert np.load(data / "train" / "depth" / "0.npy").shape == (16, 16, 1)


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("r") / "run"
    assert main(["train", "--data", str(data), "--method", "core", "--epochs", "1", "--batch-size", "8",
                 "--out", str(out)]) == 0
    return out


def test_train_eval_diagnose(run, data, capsys):
    assert (run / "model.pt").is_file() and (run / "config.json").is_file()
    capsys.readouterr()
    assert main(["eval", str(run), "--data", str(data), "--split", "ood", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert 0 <= m["seg_miou"] <= 1 and m["normal_mean"] > 0 and m["depth_abs"] > 0
    assert main(["diagnose", str(run), "--data", str(data), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert 0 <= d["cka_zs_zp"] <= 1 and 0 <= d["conflict_neg_frac"] <= 1


def _copy(data, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(data, dst)
    return dst


@pytest.mark.parametrize("argv, match", [
    (["--method", "magic"], "unknown method"),
    (["--tasks", "seg,flow"], "unknown task"),
    (["--epochs", "0"], "--epochs"),
    (["--lr", "nan"], "--lr"),
])
def test_train_argument_errors(data, tmp_path, capsys, argv, match):
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(out), *argv]) == 2
    _one_line_error(capsys, match)
    assert not out.exists()


def test_missing_task_folder_is_named(data, tmp_path, capsys):
    d = _copy(data, tmp_path)
    shutil.rmtree(d / "train" / "depth")
    assert main(["train", "--data", str(d), "--out", str(tmp_path / "run"), "--epochs", "1"]) == 2
    _one_line_error(capsys, "task 'depth'")
    assert not (tmp_path / "run").exists()


def test_misshapen_and_out_of_range_labels(data, tmp_path, capsys):
    d = _copy(data, tmp_path)
    np.save(d / "train" / "normal" / "3.npy", np.zeros((16, 16, 2), np.float32))
    assert main(["train", "--data", str(d), "--out", str(tmp_path / "r1"), "--epochs", "1"]) == 2
    _one_line_error(capsys, "task 'normal'")
    d2 = _copy(data, tmp_path / "b")
    lab = np.load(d2 / "train" / "label" / "0.npy")
    lab[0, 0] = 4  # == C
    np.save(d2 / "train" / "label" / "0.npy", lab)
    assert main(["train", "--data", str(d2), "--out", str(tmp_path / "r2"), "--epochs", "1"]) == 2
    _one_line_error(capsys, "class ids outside -1..3")
    (d2 / "train" / "image" / "1.npy").write_bytes(b"not numpy")
    assert main(["train", "--data", str(d2), "--out", str(tmp_path / "r3")]) == 2
    _one_line_error(capsys, "cannot read")
    assert not any((tmp_path / r).exists() for r in ("r1", "r2", "r3"))


def test_ood_without_test_ood_and_existing_out(run, data, tmp_path, capsys):
    d = _copy(data, tmp_path)
    shutil.rmtree(d / "test_ood")
    assert main(["eval", str(run), "--data", str(d), "--split", "ood"]) == 2
    _one_line_error(capsys, "test_ood")
    assert main(["gen-data", "shaded-shapes", "--out", str(data)]) == 2  # exists: refused
    _one_line_error(capsys, "already exists")
    assert main(["eval", str(tmp_path / "nope"), "--data", str(data)]) == 2
    _one_line_error(capsys, "not a core-mtl run")
    assert main(["gen-data", "shaded-shapes", "--shift", "sideways", "--out", str(tmp_path / "x")]) == 2
    _one_line_error(capsys, "--shift")
    assert not (tmp_path / "x").exists()


def test_reproduce_full_says_what_it_needs(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CORE_MTL_DATA", raising=False)
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) in (1, 2)
    out = capsys.readouterr()
    assert "CORE_MTL_DATA" in out.err + out.out
