"""``--model <folder>`` goes through the core's ``load_pretrained``: a saved tiny Llama loads (left
padding, CPU, the asked dtype) and runs ``collect``; a broken folder is one line on stderr, exit 2,
no traceback, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from decodeshare.cli import main
from decodeshare.io import load_model, tiny_model
from decodeshare.tasks import make_tasks

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The package's tiny Llama and its char tokenizer, saved as a Hugging Face folder."""
    path = tmp_path_factory.mktemp("hf") / "tiny"
    model, tok = tiny_model("llama", layers=1, hidden=16)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    path = tmp_path_factory.mktemp("tasks") / "t.jsonl"
    path.write_text("".join(json.dumps(it) + "\n" for it in make_tasks(2, seed=2, tasks=("parity", "larger"))))
    return path


@pytest.fixture
def broken(folder, tmp_path):
    return shutil.copytree(folder, tmp_path / "model")


def _collect(model, tasks, out):
    return main(["collect", "--model", str(model), "--tasks", str(tasks), "--layer", "0",
                 "--max-new-tokens", "2", "--out", str(out)])


def _one_line(capsys, needle):
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decodeshare: error:") and needle in err[0], captured.err
    assert "Traceback" not in captured.err


def test_folder_loads_left_padded_on_the_cpu(folder, tasks, tmp_path):
    model, tok = load_model(str(folder), dtype="bfloat16")
    p = next(model.parameters())
    assert p.dtype == torch.bfloat16 and p.device.type == "cpu" and not model.training
    assert tok.padding_side == "left"
    assert _collect(folder, tasks, tmp_path / "states") == 0
    assert (tmp_path / "states" / "manifest.json").is_file()


def test_truncated_safetensors(broken, tasks, tmp_path, capsys):
    f = broken / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    assert _collect(broken, tasks, tmp_path / "states") == 2
    _one_line(capsys, "model.safetensors is truncated or corrupt")
    assert not (tmp_path / "states").exists() and not list(tmp_path.glob(".states*"))


def test_unknown_model_type(broken, tasks, tmp_path, capsys):
    config = json.loads((broken / "config.json").read_text())
    config["model_type"] = "nonexistent-arch"
    (broken / "config.json").write_text(json.dumps(config))
    assert _collect(broken, tasks, tmp_path / "states") == 2
    _one_line(capsys, "'nonexistent-arch' is not known to transformers")
    assert not (tmp_path / "states").exists()


def test_missing_folder(tasks, tmp_path, capsys):
    assert _collect(tmp_path / "nope", tasks, tmp_path / "states") == 2
    _one_line(capsys, "does not exist")
