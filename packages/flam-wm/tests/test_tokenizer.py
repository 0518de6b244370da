"""The learned frozen tokenizer: it reconstructs sprites well above a blank frame, stays frozen while
the world model trains, round-trips through safetensors, and a mismatched or foreign file given to
``train --tokenizer`` is one line, exit 2, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flam_wm.baselines import build
from flam_wm.cli import main
from flam_wm.config import TrainConfig
from flam_wm.evaluate import frame_metrics
from flam_wm.io import load_run
from flam_wm.sprites import generate
from flam_wm.tokenizer import ConvTokenizer, fit_tokenizer, load_tokenizer, save_tokenizer
from flam_wm.train import train

from icml26_shared import UserError


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flam-wm: error:") and match in err[0], err


@pytest.fixture(scope="module")
def fitted():
    video, _ = generate(2, 24, 5, size=16, seed=5)
    return video, fit_tokenizer(video[:20], grid=4, channels=8, hidden=16, steps=150, batch=32)


def test_reconstruction_beats_a_blank_frame_by_far(fitted):
    video, tok = fitted
    x = torch.from_numpy(video[20:].reshape(-1, 16, 16, 3))
    with torch.no_grad():
        rec = tok.decode(tok.encode(x)).clamp(0, 1).numpy()
    true = x.numpy() / 255.0
    ours, blank = frame_metrics(rec, true)["psnr"], frame_metrics(np.zeros_like(true), true)["psnr"]
    assert ours > blank + 8.0, (ours, blank)                 # held-out clips, 150 steps
    z = tok.encode(x)                                        # standardised per channel on its frames
    assert z.shape == (len(x), 16, 8) and abs(float(z.mean())) < 0.5
    untrained = ConvTokenizer(16, 4, 8, 16)
    with torch.no_grad():
        bad = untrained.decode(untrained.encode(x)).clamp(0, 1).numpy()
    assert frame_metrics(bad, true)["psnr"] < ours - 8.0     # the fit is what reconstructs


def test_tokenizer_stays_frozen_while_the_world_model_trains(fitted):
    video, tok = fitted
    before = {k: v.clone() for k, v in tok.state_dict().items()}
    tk = dict(tokenizer="conv", token_grid=4, token_channels=8, token_hidden=16, size=16)
    cfg = build("flam", 2, width=16, latent_dim=6, beta=0.01, **tk)
    model = train(cfg, TrainConfig(steps=4, batch_size=4, window=4, lr=1e-2, seed=0), video, tokenizer=tok)
    after = model.tokenizer.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)          # copied, never stepped
    assert not any(p.requires_grad for p in model.tokenizer.parameters())
    assert any(p.requires_grad for p in model.factorizer.parameters())
    with pytest.raises(ValueError, match="needs its fitted tokenizer"):
        train(cfg, TrainConfig(steps=1, batch_size=2, window=3), video)


def test_save_load_round_trip_and_refusals(fitted, tmp_path):
    video, tok = fitted
    path = save_tokenizer(tok, tmp_path / "tok.safetensors")
    back = load_tokenizer(path, size=16)
    x = torch.from_numpy(video[:2])
    assert torch.equal(back.encode(x), tok.encode(x)) and not any(p.requires_grad for p in back.parameters())
    with pytest.raises(UserError, match="fit on 16x16 frames, not --size 32"):
        load_tokenizer(path, size=32)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="not a safetensors file"):
        load_tokenizer(junk)


def test_cli_fit_tokenizer_then_train_eval_and_mismatch(tmp_path, capsys):
    data, tokp, run = tmp_path / "data", tmp_path / "tok.safetensors", tmp_path / "run"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "6", "--frames", "5", "--size", "16",
                 "--seed", "1", "--out", str(data)]) == 0
    assert main(["fit-tokenizer", "--data", str(data), "--size", "16", "--grid", "4", "--channels", "8",
                 "--steps", "20", "--out", str(tokp)]) == 0
    assert "reconstruction PSNR" in capsys.readouterr().out
    base = ["train", "--data", str(data), "--slots", "3", "--latent-dim", "6", "--steps", "2", "--batch-size", "2"]
    assert main([*base, "--size", "16", "--tokenizer", str(tokp), "--out", str(run)]) == 0
    model, config = load_run(run)
    assert config["model"]["tokenizer"] == "conv" and len(config["tokenizer"]["sha256"]) == 64
    assert torch.equal(model.tokenizer.state_dict()["enc.0.weight"], load_tokenizer(tokp).state_dict()["enc.0.weight"])
    capsys.readouterr()
    assert main(["eval", str(run), "--data", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["psnr_1"] > 0
    # a tokenizer made for 16x16 frames, asked for 32x32: one line, exit 2, no RUN
    assert main([*base, "--size", "32", "--tokenizer", str(tokp), "--out", str(tmp_path / "run32")]) == 2
    _one_line(capsys, "fit on 16x16 frames")
    assert not (tmp_path / "run32").exists()
    # another tokenizer for an existing RUN: another config, RUN unchanged
    other = tmp_path / "other.safetensors"
    assert main(["fit-tokenizer", "--data", str(data), "--size", "16", "--grid", "4", "--channels", "8",
                 "--steps", "3", "--out", str(other)]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main([*base, "--size", "16", "--tokenizer", str(other), "--out", str(run)]) == 2
    _one_line(capsys, "another config")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert main(["fit-tokenizer", "--data", str(data), "--size", "16", "--grid", "3", "--out",
                 str(tmp_path / "bad.safetensors")]) == 2
    _one_line(capsys, "grid 3")
    assert not (tmp_path / "bad.safetensors").exists()
