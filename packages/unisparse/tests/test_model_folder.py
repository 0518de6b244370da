"""``--model`` folders go through the core's ``load_pretrained``: a good one loads on the CPU,
a broken one is one line on stderr, exit 2, no traceback, nothing written."""

from __future__ import annotations

import json

import pytest
import torch
from unisparse.cli import main
from unisparse.io import load_model


def _one_line(capsys, argv, needle):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1, captured.err
    assert err[0].startswith("unisparse: error: ") and needle in err[0], err[0]
    assert "Traceback" not in captured.err
    return err[0]


def test_good_folder_loads_on_the_cpu_in_the_asked_dtype(tiny_dir):
    model, tok = load_model(str(tiny_dir), "bf16")
    p = next(model.parameters())
    assert p.dtype == torch.bfloat16 and p.device.type == "cpu" and not model.training
    assert tok("w1 w2")["input_ids"] == [4, 5]


def test_truncated_safetensors(model_copy, capsys):
    f = model_copy / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    out = model_copy / "o.json"
    line = _one_line(capsys, ["eval", "--model", str(model_copy), "--out", str(out)],
                     "model.safetensors is truncated or corrupt")
    assert str(model_copy) in line and not out.exists()


def test_unknown_model_type(model_copy, capsys):
    config = json.loads((model_copy / "config.json").read_text())
    config["model_type"] = "nonexistent-arch"
    (model_copy / "config.json").write_text(json.dumps(config))
    _one_line(capsys, ["eval", "--model", str(model_copy)],
              "'nonexistent-arch' is not known to transformers")


@pytest.mark.parametrize("cmd", [["eval"], ["needle", "--docs", "1"]])
def test_every_model_command_refuses_a_broken_folder(model_copy, capsys, cmd):
    (model_copy / "tokenizer.json").unlink()
    (model_copy / "tokenizer_config.json").unlink()
    _one_line(capsys, [*cmd, "--model", str(model_copy)], "has no tokenizer")


@pytest.mark.parametrize("cmd", [["eval"], ["needle", "--docs", "1"]])
def test_corrupt_safetensors_is_one_line(model_copy, capsys, cmd):
    """A full-length ``model.safetensors`` whose header is garbage (valid config and tokenizer)."""
    f = model_copy / "model.safetensors"
    size = f.stat().st_size
    f.write_bytes(b"\xff" * 8 + b"not a header" + bytes(size - 20))
    _one_line(capsys, [*cmd, "--model", str(model_copy)], "model.safetensors is truncated or corrupt")
    assert f.stat().st_size == size


def test_a_corrupt_folder_is_refused_before_torch_is_imported(model_copy):
    import subprocess
    import sys

    f = model_copy / "model.safetensors"
    f.write_bytes(b"\xff" * 8 + bytes(f.stat().st_size - 8))
    code = ("import sys; from unisparse.cli import main\n"
            f"rc = main(['needle', '--model', {str(model_copy)!r}, '--docs', '1'])\n"
            "print(rc, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["2", "False"], r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "truncated or corrupt" in r.stderr
