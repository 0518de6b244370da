"""Pseudo-label BC (decoder, reach-target task, the bc verb), the Genie-style lam-vq baseline,
scikit-image rollout metrics and MP4 clips (when PyAV is installed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flam_wm.bc import clone, fit_decoder, reach_target_success
from flam_wm.cli import main
from flam_wm.config import ModelConfig
from flam_wm.core import WorldModel, quantize, tokenize
from flam_wm.evaluate import frame_metrics
from flam_wm.sprites import generate, toward


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flam-wm: error:") and match in err[0], err


def test_decoder_recovers_actions_from_informative_latents_only():
    rng = np.random.default_rng(0)
    acts = rng.integers(0, 5, 900)
    informative = np.eye(5)[acts][:, None] + 0.05 * rng.normal(size=(900, 1, 5))   # [M, K=1, 5]
    noise = rng.normal(size=(900, 3, 2))
    decode, _, cv, _ = fit_decoder(informative[:50], acts[:50])
    assert cv == 1.0 and np.mean(decode(informative[200:]) == acts[200:]) == 1.0
    decode, _, cv, _ = fit_decoder(noise[:50], acts[:50])
    assert np.mean(decode(noise[200:]) == acts[200:]) < 0.4                          # chance is 0.2


def test_decoder_reads_the_one_informative_factor_from_few_labels():
    # 0.8: a factored latent [M, K, d/K] whose slot 3 alone carries the action; with 23 labels (1% in quick)
    # a decoder on all 12 values overfits (~0.7 here), the factor chosen by CV inside the 23 labels reads it
    rng = np.random.default_rng(1)
    acts = rng.integers(1, 5, 1500)
    moves = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], float)
    lat = rng.normal(size=(1500, 6, 2))
    lat[:, 3] = moves[acts] + 0.3 * rng.normal(size=(1500, 2))
    decode, _, _, factor = fit_decoder(lat[:23], acts[:23])
    assert factor == 3 and np.mean(decode(lat[500:]) == acts[500:]) > 0.9
    _, _, _, factor = fit_decoder(lat[:23, 3], acts[:23])   # [M, d]: one view
    assert factor == -1


def test_bc_choices_read_only_the_labelled_transitions(monkeypatch):
    """Issue 57, item 7: dev's and test's true actions replaced by random labels -> the same decoder input,
    C and pseudo-labels (only the labelled training transitions choose them; test's actions only score)."""
    import flam_wm.bc as bc

    rng = np.random.default_rng(2)
    moves = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], float)
    lat, act = {}, {}
    for k, m in (("train", 600), ("dev", 200), ("test", 200)):
        act[k] = rng.integers(0, 5, m)
        lat[k] = rng.normal(size=(m, 4, 2))
        lat[k][:, 2] = moves[act[k]] + 0.4 * rng.normal(size=(m, 2))
    frames = {k: np.zeros((len(act[k]), 16, 16, 3), np.uint8) for k in act}
    seen = []
    monkeypatch.setattr(bc, "clone", lambda f, y, size, steps, seed: seen.append(y.copy()) or type(
        "P", (), {"act": staticmethod(lambda fr: np.zeros(len(fr), int))})())
    a = bc.pseudo_label_bc(lat, act, frames, 0.04, 2, 16, seed=0, episodes=2)
    shuffled = {**act, "dev": rng.integers(0, 5, 200), "test": rng.integers(0, 5, 200)}
    b = bc.pseudo_label_bc(lat, shuffled, frames, 0.04, 2, 16, seed=0, episodes=2)
    assert (a["decoder_factor"], a["decoder_c"], a["decoder_cv_acc"]) == (b["decoder_factor"], b["decoder_c"],
                                                                          b["decoder_cv_acc"])
    assert a["decoder_factor"] == 2 and np.array_equal(seen[0], seen[1])
    assert a["pseudo_test_acc"] > 0.6 and b["pseudo_test_acc"] < 0.4       # test's labels only score


def test_cloning_from_noisy_labels_leaves_the_keypoint_plateau():
    # 0.8: one start at temperature 1 (0.7) fits 35%-noisy expert labels at chance (0.29 on held-out clips);
    # temperature 4 and the best of 3 starts clone the expert
    video, acts = generate(4, 140, 12, size=32, seed=11, controlled=True)
    frames, y = video[:, :-1].reshape(-1, 32, 32, 3), acts[..., 0].reshape(-1)
    rng = np.random.default_rng(0)
    noisy = y.copy()
    flip = rng.random(len(y)) < 0.35
    noisy[flip] = rng.integers(0, 5, flip.sum())
    held, held_acts = generate(4, 30, 12, size=32, seed=12, controlled=True)
    pol = clone(frames, noisy, 32, steps=400, seed=1)
    assert np.mean(pol.act(held[:, :-1].reshape(-1, 32, 32, 3)) == held_acts[..., 0].reshape(-1)) > 0.8


def test_reach_target_task_rewards_the_expert_and_not_staying():
    def expert(frames):  # reads sprite 0 (red) and the white dot off the frames
        out = []
        for f in frames:
            me = np.argwhere(np.all(f == [230, 40, 40], -1))
            dot = np.argwhere(np.all(f == 255, -1))
            out.append(0 if len(me) == 0 or len(dot) == 0 else toward(me[0] // 4, dot[0] // 4))
        return np.array(out)

    assert reach_target_success(expert, entities=1, size=16, episodes=40) == 1.0
    assert reach_target_success(lambda f: np.zeros(len(f), int), entities=1, size=16, episodes=40) == 0.0


def test_bc_verb_reports_pseudo_label_and_true_action_success(tmp_path, capsys):
    data, run = tmp_path / "d", tmp_path / "r"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "8", "--frames", "5", "--size", "16",
                 "--controlled", "--seed", "3", "--out", str(data)]) == 0
    assert main(["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6",
                 "--steps", "2", "--batch-size", "4", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["bc", str(run), "--data", str(data), "--labels", "0.2", "--bc-steps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labelled"] == 5 and 0 <= out["success"] <= 1 and 0 <= out["true_action_success"] <= 1
    assert 0 <= out["pseudo_test_acc"] <= 1 and out["decoder_c"] in (0.1, 1.0, 10.0)
    plain = tmp_path / "plain"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "8", "--frames", "5", "--size", "16",
                 "--out", str(plain)]) == 0
    capsys.readouterr()
    assert main(["bc", str(run), "--data", str(plain)]) == 2
    _one_line(capsys, "--controlled")
    assert main(["bc", str(run), "--data", str(data), "--labels", "0"]) == 2
    _one_line(capsys, "--labels")


def test_quantize_snaps_to_the_nearest_code_with_a_straight_through_gradient():
    book = torch.tensor([[0.0, 0.0], [1.0, 1.0], [-2.0, 0.5]])
    e = torch.tensor([[0.9, 1.2], [-1.5, 0.2], [0.1, -0.1]], requires_grad=True)
    q, loss, idx = quantize(e, book)
    assert idx.tolist() == [1, 2, 0] and torch.allclose(q.detach(), book[idx], atol=1e-6)
    q.sum().backward()
    assert torch.equal(e.grad, torch.ones_like(e)) and loss > 0


def test_lam_vq_latents_are_codes_and_ignore_beta():
    z = tokenize(torch.from_numpy(generate(2, 3, 5, size=16)[0]), 4)
    cfg = ModelConfig(model="lam-vq", slots=1, latent_dim=4, width=16, size=16, codes=5)
    m = WorldModel(cfg)
    mu, _ = m.infer(m.slots(z))
    assert mu.shape == (3, 4, 1, 4)
    assert all(any(torch.allclose(v, c, atol=1e-6) for c in m.codebook) for v in mu.reshape(-1, 4))
    m2 = WorldModel(ModelConfig(**{**cfg.to_dict(), "beta": 5.0}))
    m2.load_state_dict(m.state_dict())
    assert m.loss(z)[0].item() == pytest.approx(m2.loss(z)[0].item())
    assert m.rollout(z).shape == (3, 4, 16, 48)


def test_frame_metrics_are_scikit_image_psnr_and_ssim():
    from flam_wm.core import psnr

    rng = np.random.default_rng(0)
    true = rng.random((3, 16, 16, 3)).astype(np.float32)
    noisy = np.clip(true + 0.05 * rng.normal(size=true.shape), 0, 1).astype(np.float32)
    same, off = frame_metrics(true, true), frame_metrics(noisy, true)
    assert same["ssim"] == pytest.approx(1.0) and same["mse"] == 0.0
    assert off["ssim"] < 0.99 and off["mse"] > 0
    ref = psnr(torch.from_numpy(noisy), torch.from_numpy(true)).mean().item()
    assert off["psnr"] == pytest.approx(ref, abs=1e-3)


def test_mp4_clip_reads_back_close_to_the_frames(tmp_path):
    av = pytest.importorskip("av")
    from flam_wm.io import read_clip, read_dataset

    clip = np.repeat(np.repeat(generate(2, 1, 6, size=16, seed=1)[0][0], 2, 1), 2, 2)  # 32x32
    with av.open(str(tmp_path / "c.mp4"), "w") as out:
        stream = out.add_stream("libx264", rate=4)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv444p"
        stream.options = {"qp": "0"}
        for f in clip:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    frames, _ = read_clip(tmp_path / "c.mp4", None)
    assert frames.shape == clip.shape and np.abs(frames.astype(int) - clip).mean() < 3
    assert read_dataset(tmp_path, 16)[0].shape == (1, 6, 16, 16, 3)


def test_mp4_without_pyav_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "av", None)  # `import av` raises ImportError
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "c.mp4").write_bytes(b"\x00" * 64)
    assert main(["train", "--data", str(tmp_path / "d"), "--size", "16", "--out", str(tmp_path / "r")]) == 2
    _one_line(capsys, "PyAV")
    assert not (tmp_path / "r").exists()
