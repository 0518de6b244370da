"""The CLI end to end on a tiny zoo: determinism of `zoo build`, `identify` agreeing with `eval`,
resumable `index`, and one-line errors (exit 2, nothing written) for users' mistakes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mvprobe.cli import main
from mvprobe.index import build_index
from safetensors.torch import save_file

SIZE = ["--n-probes", "4", "--proj-dim", "4", "--rep-dim", "8"]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("z") / "zoo"
    assert main(["zoo", "build", "--out", str(out), "--n-models", "12", "--seed", "3", "--ancestor-steps", "5"]) == 0
    return out


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mvprobe: error:"), err
    for n in needles:
        assert n in err[0], err
    return err[0]


def test_zoo_build_is_deterministic_with_exact_subsets(zoo, tmp_path):
    again = tmp_path / "again"
    assert main(["zoo", "build", "--out", str(again), "--n-models", "12", "--seed", "3", "--ancestor-steps", "5"]) == 0
    files = sorted(p.relative_to(zoo) for p in zoo.rglob("*")
                   if p.is_file() and p.name != ".icml26-manifest.json")  # atomic_dir's manifest
    assert len(files) == 12 + 3
    for f in files:
        assert (zoo / f).read_bytes() == (again / f).read_bytes(), f
    recs = [json.loads(line) for part in ("train", "val", "test")
            for line in (zoo / f"{part}.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and len({r["path"] for r in recs}) == 12
    assert all(len(set(r["labels"])) == len(r["labels"]) == 5 for r in recs)
    other = tmp_path / "other"
    assert main(["zoo", "build", "--out", str(other), "--n-models", "12", "--seed", "4", "--ancestor-steps", "5"]) == 0
    assert (other / files[0]).read_bytes() != (zoo / files[0]).read_bytes()


def test_train_eval_identify_agree(zoo, tmp_path, capsys):
    probe = tmp_path / "probe"
    assert main(["train", "--data", str(zoo / "train.jsonl"), "--layer", "fc2.weight", "--method",
                 "mvprobe", "--out", str(probe), "--val", str(zoo / "val.jsonl"), "--epochs", "3",
                 *SIZE]) == 0
    meta = json.loads((probe / "probe.json").read_text())
    assert meta["layer"] == "fc2.weight" and meta["shape"] == [64, 64] and len(meta["label_names"]) == 10
    capsys.readouterr()
    assert main(["eval", "--probe", str(probe), "--data", str(zoo / "test.jsonl"), "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    recs = [json.loads(line) for line in (zoo / "test.jsonl").read_text().splitlines()]
    paths = [str(zoo / r["path"]) for r in recs]
    assert main(["identify", *paths, "--probe", str(probe), "--json"]) == 0
    ids = json.loads(capsys.readouterr().out)
    assert [r["path"] for r in ids] == paths
    names = meta["label_names"]
    hits = [(n in r["labels"]) == (n in rec["labels"]) for r, rec in zip(ids, recs, strict=True) for n in names]
    assert ev["per_label_accuracy"] == pytest.approx(np.mean(hits))
    for r in ids:  # the same threshold rule as eval: p >= 0.5
        assert r["labels"] == [n for n in names if r["probs"][n] >= 0.5]


def test_index_resumes_to_the_same_bytes(zoo, tmp_path):
    data = zoo / "train.jsonl"
    full = tmp_path / "full"
    info = build_index(data, "fc2.weight", full, workers=1)
    assert info["bytes_read_per_file"] < 0.5 * info["file_bytes"]  # one tensor of six
    resumed = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        build_index(data, "fc2.weight", resumed, workers=1, stop_after=3)
    assert not resumed.exists() and (tmp_path / "resumed.partial").is_dir()
    info2 = build_index(data, "fc2.weight", resumed, workers=2)
    assert info2["rows_written"] == info["models"] - 3
    for name in ("weights.f32", "done.u8", "meta.json"):
        assert (full / name).read_bytes() == (resumed / name).read_bytes(), name
    W = np.memmap(full / "weights.f32", dtype=np.float32, mode="r").reshape(info["models"], 64, 64)
    first = json.loads(data.read_text().splitlines()[0])["path"]
    from safetensors.numpy import load_file

    assert np.array_equal(W[0], load_file(str(zoo / first))["fc2.weight"])


def test_train_on_cache_matches_jsonl_shape(zoo, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert main(["index", str(zoo / "train.jsonl"), "--layer", "fc1.weight", "--out", str(cache),
                 "--workers", "1", "--quiet"]) == 0
    assert main(["train", "--data", str(cache), "--method", "flat", "--out", str(tmp_path / "p"),
                 "--epochs", "2"]) == 0
    assert json.loads((tmp_path / "p" / "probe.json").read_text())["layer"] == "fc1.weight"


def _bad_shape_checkpoint(tmp_path) -> Path:
    p = tmp_path / "odd.safetensors"
    save_file({"fc2.weight": torch.zeros(64, 32)}, str(p))
    return p


def test_user_errors_are_one_line_and_write_nothing(zoo, tmp_path, capsys):
    train, out = str(zoo / "train.jsonl"), tmp_path / "probe"
    cases = [
        (["train", "--data", train, "--layer", "nosuch", "--out", str(out)], ("child_", "nosuch")),
        (["train", "--data", train, "--layer", "fc2.weight", "--method", "magic", "--out", str(out)],
         ("magic",)),
        (["train", "--data", train, "--layer", "fc2.weight", "--out", str(out), "--epochs", "nan"],
         ("--epochs",)),
    ]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"path": "x", "labels": []}) + "\n{not json\n")
    mixed = tmp_path / "mixed.jsonl"
    first = json.loads((zoo / "train.jsonl").read_text().splitlines()[0])
    odd = _bad_shape_checkpoint(tmp_path)
    mixed.write_text(json.dumps({"path": str(zoo / first["path"]), "labels": ["1"]}) + "\n"
                     + json.dumps({"path": str(odd), "labels": ["2"]}) + "\n")
    cases += [
        (["train", "--data", str(empty), "--layer", "fc2.weight", "--out", str(out)], ("empty.jsonl", "empty")),
        (["train", "--data", str(bad), "--layer", "fc2.weight", "--out", str(out)], ("bad.jsonl:2",)),
        (["train", "--data", str(mixed), "--layer", "fc2.weight", "--out", str(out)], ("odd.safetensors", "(64, 32)")),
        (["index", str(mixed), "--layer", "fc2.weight", "--out", str(tmp_path / "c"), "--workers", "1"],
         ("odd.safetensors", "(64, 32)")),
    ]
    for argv, needles in cases:
        assert main(argv) == 2, argv
        _one_line_error(capsys, *needles)
        assert not out.exists() and not (tmp_path / "c").exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".probe")]


def test_existing_output_bad_threshold_and_wrong_shape(zoo, tmp_path, capsys):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "x").write_text("mine")
    assert main(["train", "--data", str(zoo / "train.jsonl"), "--layer", "fc2.weight", "--out", str(keep)]) == 2
    _one_line_error(capsys, "already exists")
    assert (keep / "x").read_text() == "mine"
    probe = tmp_path / "probe"
    assert main(["train", "--data", str(zoo / "train.jsonl"), "--layer", "fc2.weight", "--method", "probex",
                 "--out", str(probe), "--epochs", "1", *SIZE]) == 0
    capsys.readouterr()
    assert main(["eval", "--probe", str(probe), "--data", str(zoo / "test.jsonl"), "--threshold", "nan"]) == 2
    _one_line_error(capsys, "threshold")
    assert main(["identify", str(_bad_shape_checkpoint(tmp_path)), "--probe", str(probe)]) == 2
    _one_line_error(capsys, "odd.safetensors", "(64, 32)")
    assert main(["identify", str(tmp_path / "missing.safetensors"), "--probe", str(probe)]) == 2
    _one_line_error(capsys, "missing.safetensors")


def test_full_scale_says_what_it_needs(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MVPROBE_MODELJ", raising=False)
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "MVPROBE_MODELJ")
