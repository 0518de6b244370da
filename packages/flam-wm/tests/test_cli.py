"""CLI: gen-data / train write new folders; users' mistakes give one line and exit 2, nothing written."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from flam_wm.cli import main
from flam_wm.io import load_run, read_clip, read_dataset
from PIL import Image


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flam-wm: error:") and match in err[0], err


@pytest.fixture
def data(tmp_path):
    out = tmp_path / "data"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "4", "--frames", "5",
                 "--size", "16", "--seed", "1", "--out", str(out)]) == 0
    return out


def test_gen_data_then_train(data, tmp_path, capsys):
    video, acts = read_dataset(data, 16)
    assert video.shape == (4, 5, 16, 16, 3) and acts.shape == (4, 4, 2)
    run = tmp_path / "run"
    assert main(["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6",
                 "--width", "16", "--steps", "2", "--batch-size", "2", "--out", str(run)]) == 0
    assert {p.name for p in run.iterdir()} == {"model.safetensors", "checkpoint.safetensors", "config.json",
                                                "metrics.json"}
    assert "PSNR" in capsys.readouterr().out
    model, config = load_run(run)
    assert model.cfg.width == 16 and model.cfg.slot_pos and "pos_keys" not in config["model"]
    # 0.10.0 removed seven dev-rejected options: a RUN written with one of them on is refused in one line;
    # a 0.9.x RUN holding each at its off value loads (and resumes) as the same model
    from flam_wm.io import open_run

    v09 = run.parent / "v09"
    shutil.copytree(run, v09)
    old = json.loads((run / "config.json").read_text())
    old["model"].update(pos_keys=False, residual=False, decoder="broadcast", seeding="fps", logvar_init=0.0)
    old["train"].update(kl_warmup=0, slot_warmup=0)
    (v09 / "config.json").write_text(json.dumps(old))
    assert load_run(v09)[0].cfg == model.cfg and open_run(v09, json.loads((run / "config.json").read_text()))
    capsys.readouterr()
    for key, value in (("residual", True), ("pos_keys", True), ("decoder", "mlp"), ("kl_warmup", 100)):
        bad = json.loads(json.dumps(old))
        bad["train" if key == "kl_warmup" else "model"][key] = value
        (v09 / "config.json").write_text(json.dumps(bad))
        assert main(["eval", str(v09), "--data", str(data)]) == 2
        _one_line(capsys, f"{key}={value!r}, an option removed in flam-wm 0.10.0")
    before_04 = {k: v for k, v in old["model"].items() if k not in ("pos_keys", "slot_pos", "decoder")}
    (v09 / "config.json").write_text(json.dumps({**old, "model": before_04}))  # a RUN written before 0.4 / 0.7
    assert main(["probe", str(v09), "--data", str(data)]) == 2
    _one_line(capsys, "pos_keys=True")
    assert main(["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6",
                 "--steps", "2", "--out", str(run)]) == 2      # batch size 16, not 2: another config
    _one_line(capsys, "another config")


def test_a_run_written_before_012_loads_and_resumes_with_the_absolute_idm(data, tmp_path, capsys):
    """0.12.0 (issue 57 item 0): a RUN whose config has no idm_input (written by 0.11 or earlier) was trained
    with the IDM reading absolute positions: it loads as that model and resumes with --idm-input absolute."""
    run = tmp_path / "old"
    args = ["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6", "--width", "16",
            "--steps", "2", "--batch-size", "2", "--out", str(run)]
    assert main([*args, "--idm-input", "absolute"]) == 0
    cfg = json.loads((run / "config.json").read_text())
    del cfg["model"]["idm_input"]
    (run / "config.json").write_text(json.dumps(cfg))
    model, _ = load_run(run)
    assert model.cfg.idm_input == "absolute" and not model.cfg.idm_delta
    assert main([*args[:-4], "--steps", "3", "--batch-size", "2", "--out", str(run), "--idm-input", "absolute"]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6", "--width", "16",
                 "--steps", "4", "--batch-size", "2", "--out", str(run), "--idm-input", "delta"]) == 2
    _one_line(capsys, "idm_input")


def test_png_folder_and_npy_read_back_the_same(tmp_path):
    clip = np.random.default_rng(0).integers(0, 255, size=(3, 8, 8, 3), dtype=np.uint8)
    np.save(tmp_path / "c.npy", clip)
    (tmp_path / "png").mkdir()
    for i, f in enumerate(clip):
        Image.fromarray(f).save(tmp_path / "png" / f"{i:03d}.png")
    assert np.array_equal(read_clip(tmp_path / "c.npy", 8)[0], clip)
    assert np.array_equal(read_clip(tmp_path / "png", 8)[0], clip)


def test_existing_out_is_not_overwritten(data, capsys):
    before = sorted(p.name for p in data.iterdir())
    assert main(["gen-data", "sprites", "--out", str(data)]) == 2
    _one_line(capsys, "already exists")
    assert sorted(p.name for p in data.iterdir()) == before


def _train(data, out, *extra):
    return main(["train", "--data", str(data), "--size", "16", "--steps", "1", "--out", str(out), *extra])


def test_bad_inputs_exit_2_and_write_nothing(tmp_path, data, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _train(empty, tmp_path / "r1") == 2
    _one_line(capsys, "holds no clips")
    bad = tmp_path / "bad" / "clip0"
    bad.mkdir(parents=True)
    (bad / "000.png").write_bytes(b"not a png")
    assert _train(bad.parent, tmp_path / "r2") == 2
    _one_line(capsys, "000.png")
    short = tmp_path / "short"
    short.mkdir()
    np.save(short / "c.npy", np.zeros((1, 16, 16, 3), np.uint8))
    assert _train(short, tmp_path / "r3") == 2
    _one_line(capsys, "at least 2 frames")
    assert _train(data, tmp_path / "r4", "--slots", "4", "--latent-dim", "10") == 2
    _one_line(capsys, "not divisible")
    assert _train(data, tmp_path / "r5", "--beta", "nan") == 2
    _one_line(capsys, "--beta")
    assert _train(data, tmp_path / "r6", "--model", "genie") == 2
    _one_line(capsys, "--model")
    assert _train(data, tmp_path / "r7", "--lr", "0") == 2
    _one_line(capsys, "--lr")
    assert not any((tmp_path / f"r{i}").exists() for i in range(1, 8))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_full_scale_refuses_without_cuda(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "o")]) == 2
    assert "CUDA" in capsys.readouterr().err
