"""Every refusal: exit 2, one stderr line, no output folder; and the diagnose / reproduce verbs."""

from __future__ import annotations

import json

import pytest
import torch
from orthomerge.cli import main
from safetensors.torch import load_file, save_file


def one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("orthomerge: error:") and match in err[0], err


@pytest.fixture(scope="module")
def odd(lm, tmp_path_factory, kit):
    """Adapters that must not be merged with lm's: other block size, Neumann path, targets, BOFT."""
    from peft import BOFTConfig

    root = tmp_path_factory.mktemp("odd")
    base = lm["base"]
    return {
        "block": kit.make_adapter(base, root / "b4", kit.oft_config(oft_block_size=4), seed=40),
        "neumann": kit.make_adapter(base, root / "neu", kit.oft_config(use_cayley_neumann=True), seed=41),
        "targets": kit.make_adapter(base, root / "tg", kit.oft_config(target_modules=["q_proj"]), seed=42),
        "boft": kit.make_adapter(base, root / "boft", BOFTConfig(boft_block_size=4, target_modules=["q_proj", "v_proj"]),
                                 seed=43),
    }


@pytest.mark.parametrize("which, match", [("block", "differ in oft_block_size"), ("neumann", "use_cayley_neumann"),
                                          ("targets", "different modules"), ("boft", "mixed PEFT types")])
def test_incompatible_adapters_are_refused(lm, odd, tmp_path, capsys, which, match):
    out = tmp_path / "out"
    assert main(["oft", str(lm["oft"][0]), str(odd[which]), "--out", str(out)]) == 2
    one_line(capsys, match)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_missing_corrupt_and_existing_paths(lm, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["oft", str(tmp_path / "nope"), "--out", str(out)]) == 2
    one_line(capsys, "does not exist")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "OFT"}))
    (bad / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    assert main(["oft", str(bad), "--out", str(out)]) == 2
    one_line(capsys, "not a readable safetensors")
    (bad / "adapter_config.json").write_text("{broken")
    assert main(["oft", str(bad), "--out", str(out)]) == 2
    one_line(capsys, "unreadable")
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("keep")
    assert main(["oft", str(lm["oft"][0]), "--out", str(out)]) == 2
    one_line(capsys, "already exists")
    assert (out / "keep.txt").read_text() == "keep"
    # --force replaces only a folder a run wrote: never a file the user put there
    assert main(["oft", str(lm["oft"][0]), "--out", str(out), "--force", "--quiet"]) == 2
    one_line(capsys, "not written by orthomerge")
    assert (out / "keep.txt").read_text() == "keep"
    (out / "keep.txt").unlink()
    for _ in range(2):  # an empty folder, then the run's own folder
        assert main(["oft", str(lm["oft"][0]), "--out", str(out), "--force", "--quiet"]) == 0
        assert (out / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("argv, match", [
    (["--scale", "nan"], "--scale"),
    (["--density", "inf"], "--density"),
    (["--density", "0"], "density"),
    (["--weights", "1,x"], "--weights"),
    (["--weights", "1,2"], "2 weights given for 1"),
    (["--method", "slerp"], "unknown method 'slerp'"),
    (["--method", "dare", "--dense", "--base", "."], "choose dare_linear"),
    (["--trim-scope", "layer"], "--trim-scope"),
    (["--method", "ta"], "--dense"),
    (["--dense"], "--base"),
])
def test_bad_oft_options(lm, tmp_path, capsys, argv, match):
    out = tmp_path / "out"
    try:
        rc = main(["oft", str(lm["oft"][0]), "--out", str(out), *argv])
    except SystemExit as exc:  # argparse's own errors (choices, types) exit 2 too
        rc = exc.code
    assert rc == 2
    one_line(capsys, match)
    assert not out.exists()


def test_full_refusals(lm, tmp_path, capsys):
    base = lm["base"]
    sd = load_file(base / "model.safetensors")
    key = next(k for k in sd if k.endswith("q_proj.weight"))
    wrong = tmp_path / "wrong.safetensors"
    save_file({**sd, key: torch.zeros(3, 3)}, str(wrong))
    out = tmp_path / "out"
    assert main(["full", "--base", str(base), "--experts", str(wrong), "--out", str(out)]) == 2
    one_line(capsys, "unlike the base")
    partial = tmp_path / "partial.safetensors"
    save_file({key: sd[key]}, str(partial))
    assert main(["full", "--base", str(base), "--experts", str(partial), "--out", str(out)]) == 2
    one_line(capsys, "expert lacks")
    assert main(["full", "--base", str(base), "--experts", str(lm["oft"][0]), "--out", str(out)]) == 2
    one_line(capsys, "is not LORA")
    for opt, match in ((["--residual-scale", "-1"], "residual scale"), (["--residual-scale", "nan"], "--residual-scale"),
                       (["--residual", "dare"], "or dare_ties")):
        try:
            rc = main(["full", "--base", str(base), "--experts", str(partial), "--out", str(out), *opt])
        except SystemExit as exc:
            rc = exc.code
        assert rc == 2
        one_line(capsys, match)
    # a planted half turn: the -1 guard refuses instead of writing NaN
    flip = sd[key].clone().double()
    R = torch.eye(flip.shape[1], dtype=torch.float64)
    R[:2, :2] = -R[:2, :2]
    half = tmp_path / "half.safetensors"
    save_file({**sd, key: (flip @ R).float()}, str(half))
    assert main(["full", "--base", str(base), "--experts", str(half), "--out", str(out)]) == 2
    one_line(capsys, "eigenvalue at -1")
    if not torch.cuda.is_available():
        assert main(["full", "--base", str(base), "--experts", str(partial), "--out", str(out),
                     "--device", "cuda"]) == 2
        one_line(capsys, "no CUDA device")
    assert not out.exists()


def test_diagnose(lm, tmp_path, capsys):
    assert main(["diagnose", str(lm["oft"][0]), "--base", str(lm["base"]), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["orthogonality_error"] < 1e-6 for r in rows)
    for r in rows:
        assert r["spectral_norm"] == pytest.approx(r["base_spectral_norm"], rel=1e-9)
        assert r["hyperspherical_energy"] == pytest.approx(r["base_hyperspherical_energy"], rel=1e-9)
    assert main(["diagnose", str(lm["base"])]) == 0
    assert "hyperspherical" in capsys.readouterr().out
    assert main(["diagnose", str(tmp_path / "nope")]) == 2
    one_line(capsys, "does not exist")


def test_reproduce_full_scale_says_what_it_needs(tmp_path, capsys, monkeypatch):
    for v in ("ORTHOMERGE_BASE", "ORTHOMERGE_OFT_ADAPTERS", "ORTHOMERGE_EXPERTS"):
        monkeypatch.delenv(v, raising=False)
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "r")]) == 2
    one_line(capsys, "ORTHOMERGE_BASE")
