"""--force replaces only an earlier orthomerge output; a non-finite tensor stops the run on read."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch
from orthomerge.cli import main
from safetensors.torch import load_file, save_file


def one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("orthomerge: error:") and match in err[0], err


def digest(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def workdir(lm, tmp_path, monkeypatch):
    """A user's folder: two adapters, the base and an unrelated notes.txt; the cwd."""
    for i in range(2):
        shutil.copytree(lm["oft"][i], tmp_path / f"oft{i}")
    shutil.copytree(lm["base"], tmp_path / "base")
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("out, extra, match", [
    (".", [], "contains the input"),
    ("oft0", [], "is the input"),
    ("oft0/sub", [], "lies inside the input"),
    ("link", [], "symbolic link"),
    ("base", ["--method", "ta", "--dense", "--base", "base"], "is the input"),
    ("mine", [], "not written by orthomerge"),
    ("other", [], "not written by orthomerge"),
])
def test_force_never_touches_inputs_or_a_users_files(workdir, capsys, out, extra, match):
    (workdir / "link").symlink_to(workdir / "oft0")
    (workdir / "mine").mkdir()
    (workdir / "mine" / "mine.txt").write_text("mine")
    (workdir / "other").mkdir()  # an output another tool wrote (its manifest lists its file)
    (workdir / "other" / "x.bin").write_bytes(b"x")
    (workdir / "other" / ".icml26-manifest.json").write_text(json.dumps(
        {"format": "icml26-manifest", "version": 1, "writer": "circumerge 0.3.0", "files": ["x.bin"]}))
    before = digest(workdir)
    assert main(["oft", "oft0", "oft1", "--out", out, "--force", "--quiet", *extra]) == 2
    one_line(capsys, match)
    assert digest(workdir) == before


def test_force_replaces_an_earlier_orthomerge_output(workdir, capsys):
    assert main(["oft", "oft0", "oft1", "--out", "m", "--quiet"]) == 0
    first = load_file(workdir / "m" / "adapter_model.safetensors")
    assert main(["oft", "oft0", "--out", "m", "--quiet"]) == 2
    one_line(capsys, "already exists")
    assert main(["oft", "oft0", "--out", "m", "--force", "--quiet"]) == 0
    second = load_file(workdir / "m" / "adapter_model.safetensors")
    assert any(not torch.equal(first[k], second[k]) for k in first)
    manifest = json.loads((workdir / "m" / ".icml26-manifest.json").read_text())
    assert manifest["writer"].split()[0] == "orthomerge"
    assert (workdir / "notes.txt").read_text() == "mine"
    # a merged output given back as an input cannot be its own --out
    assert main(["oft", "m", "oft1", "--out", "m", "--force", "--quiet"]) == 2
    one_line(capsys, "is the input")


def _poison(src, dst, pick):
    sd = load_file(src)
    key = next(k for k in sd if pick(k))
    sd[key] = sd[key].clone()
    sd[key].view(-1)[3] = float("nan")
    save_file(sd, str(dst))
    return key


def test_non_finite_inputs_end_in_one_line_before_any_svd(lm, tmp_path, capsys, kit):
    from peft import LoraConfig

    base = lm["base"]
    out = tmp_path / "out"
    nan_full = tmp_path / "nan_full.safetensors"
    key = _poison(base / "model.safetensors", nan_full, lambda k: k.endswith("q_proj.weight"))
    assert main(["full", "--base", str(base), "--experts", str(nan_full), "--out", str(out), "--quiet"]) == 2
    one_line(capsys, f"{key} in {nan_full}: 1 non-finite")
    # the base itself
    nan_base = tmp_path / "nan_base"
    shutil.copytree(base, nan_base)
    key = _poison(base / "model.safetensors", nan_base / "model.safetensors", lambda k: k.endswith("v_proj.weight"))
    assert main(["full", "--base", str(nan_base), "--experts", str(base), "--out", str(out), "--quiet"]) == 2
    one_line(capsys, f"{key} in {nan_base / 'model.safetensors'}")
    # a LoRA expert
    lora = kit.make_adapter(base, tmp_path / "lora", LoraConfig(r=4, target_modules=["q_proj"],
                                                                init_lora_weights=False), seed=31)
    capsys.readouterr()  # transformers' loading bars
    f = lora / "adapter_model.safetensors"
    key = _poison(f, f, lambda k: "lora_B" in k)
    assert main(["full", "--base", str(base), "--experts", str(lora), "--out", str(out), "--quiet"]) == 2
    one_line(capsys, f"{key} in {f}")
    # an OFT adapter
    oft = tmp_path / "oft"
    shutil.copytree(lm["oft"][0], oft)
    f = oft / "adapter_model.safetensors"
    key = _poison(f, f, lambda k: "oft_R" in k)
    assert main(["oft", str(oft), str(lm["oft"][1]), "--out", str(out), "--quiet"]) == 2
    one_line(capsys, f"{key} in {f}")
    assert not out.exists()
