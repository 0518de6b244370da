"""``icml26_shared.hf.load_pretrained`` and ``icml26 model``: a tiny Llama built in-process, then
broken one way at a time; every break is one line on stderr and exit 2."""

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from icml26_shared.cli import main  # noqa: E402
from icml26_shared.errors import UserError  # noqa: E402
from icml26_shared.hf import check_safetensors, load_pretrained  # noqa: E402
from icml26_shared.testing import save_tiny_llama as _save_tiny  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _save_tiny(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture
def copy(tiny, tmp_path):
    def make(name="m"):
        return shutil.copytree(tiny, tmp_path / name)
    return make


def _one_line_error(capsys, argv, needle):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1, captured.err
    assert err[0].startswith("icml26: error:") and needle in err[0], err[0]
    assert "Traceback" not in captured.err
    return err[0]


def test_good_folder_loads_and_summarises(tiny, capsys):
    assert main(["model", str(tiny), "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "LlamaForCausalLM" in out and "llama" in out and "4,400" in out
    assert "float32" in out and "cpu" in out and "vocab 64" in out
    assert captured.err == ""  # no progress bars, no library warnings


def test_python_api_dtype_and_eval(tiny):
    import torch

    model, tok = load_pretrained(tiny, dtype="bf16", device="cpu")
    assert not model.training and next(model.parameters()).dtype == torch.bfloat16
    assert tok("w1 w2")["input_ids"] == [4, 5]
    model, tok = load_pretrained(tiny, "encoder", device="auto", tokenizer=False)
    assert type(model).__name__ == "LlamaModel" and tok is None
    assert next(model.parameters()).dtype == torch.float32  # auto on the CPU


def test_truncated_safetensors(copy, capsys):
    m = copy()
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[: len(data) // 2])
    line = _one_line_error(capsys, ["model", str(m)], "model.safetensors is truncated or corrupt")
    assert str(m) in line
    (m / "model.safetensors").write_bytes(data + b"\0" * 64)  # the format has no padding
    _one_line_error(capsys, ["model", str(m)], "truncated or corrupt")
    (m / "model.safetensors").write_bytes(data[:5])  # not even the header length
    _one_line_error(capsys, ["model", str(m)], "truncated or corrupt")
    with pytest.raises(UserError, match="truncated"):
        check_safetensors(m / "model.safetensors")
    # the real console entry, fast: the check runs before torch is imported
    proc = subprocess.run([sys.executable, "-m", "icml26_shared", "model", str(m)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "truncated or corrupt" in proc.stderr


def test_missing_config(copy, capsys):
    m = copy()
    (m / "config.json").unlink()
    _one_line_error(capsys, ["model", str(m)], "has no config.json")


def test_config_without_model_type_or_bad_json(copy, capsys):
    m = copy()
    (m / "config.json").write_text("{not json")
    _one_line_error(capsys, ["model", str(m)], "is not valid JSON")
    (m / "config.json").write_text("{}")
    _one_line_error(capsys, ["model", str(m)], "has no model_type")


def test_unknown_model_type(copy, capsys):
    m = copy()
    config = json.loads((m / "config.json").read_text())
    config["model_type"] = "nonexistent-arch"
    (m / "config.json").write_text(json.dumps(config))
    _one_line_error(capsys, ["model", str(m)], "'nonexistent-arch' is not known to transformers")
    # with trust_remote_code the check is left to transformers: its error is still one line
    with pytest.raises(UserError, match=r"cannot load .* as causal_lm: .*nonexistent-arch") as exc:
        load_pretrained(m, device="cpu", trust_remote_code=True)
    assert "\n" not in str(exc.value)


def test_missing_shard(tiny, tmp_path, capsys):
    from transformers import LlamaForCausalLM

    m = tmp_path / "sharded"
    LlamaForCausalLM.from_pretrained(tiny).save_pretrained(m, max_shard_size="8KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / f, m / f)
    shards = sorted(m.glob("model-*.safetensors"))
    assert len(shards) > 1 and (m / "model.safetensors.index.json").is_file()
    assert main(["model", str(m), "--device", "cpu"]) == 0
    capsys.readouterr()
    shards[-1].unlink()
    _one_line_error(capsys, ["model", str(m)], f"missing the shard {shards[-1].name}")


def test_no_weights_and_missing_tokenizer(copy, capsys):
    m = copy()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (m / f).unlink()
    _one_line_error(capsys, ["model", str(m)], "has no tokenizer")
    assert load_pretrained(m, device="cpu", tokenizer=False)[1] is None
    (m / "model.safetensors").unlink()
    _one_line_error(capsys, ["model", str(m)], "has no weights")


def test_weights_for_another_config(copy, capsys):
    m = copy()
    config = json.loads((m / "config.json").read_text())
    config["intermediate_size"] = 48
    (m / "config.json").write_text(json.dumps(config))
    _one_line_error(capsys, ["model", str(m)], "in the checkpoint but")


def test_weight_missing_from_checkpoint(copy, capsys):
    from safetensors.torch import load_file, save_file

    m = copy()
    weights = load_file(m / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, m / "model.safetensors", metadata={"format": "pt"})
    _one_line_error(capsys, ["model", str(m)], "lm_head.weight")
    model, _ = load_pretrained(m, device="cpu", strict=False)  # opt out: freshly initialised head
    assert type(model).__name__ == "LlamaForCausalLM"


@pytest.mark.parametrize("argv,needle", [
    (["/nonexistent/model"], "does not exist"),
    (["--kind", "masked_lm"], "cannot load"),           # llama has no masked-LM head
    (["--kind", "vlm"], "has no processor"),
    (["--device", "tpu"], "unknown device"),
    (["--dtype", "int3"], "unknown dtype"),
    (["--kind", "diffusion"], "unknown model kind"),
])
def test_other_user_errors(tiny, capsys, argv, needle):
    argv = ["model", str(tiny), *argv] if argv[0].startswith("--") else ["model", *argv]
    _one_line_error(capsys, argv, needle)


def test_unknown_kind_and_file_path(tiny):
    with pytest.raises(UserError, match="unknown model kind"):
        load_pretrained(tiny, "diffusion")
    with pytest.raises(UserError, match="not a directory"):
        load_pretrained(tiny / "config.json")


def test_import_does_not_load_torch():
    code = ("import sys, icml26_shared.hf; "
            "bad = [m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules]; "
            "print(','.join(bad)); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"imported at import time: {proc.stdout.strip()} {proc.stderr}"
