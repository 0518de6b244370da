"""The eval / probe verbs read a RUN written by train and agree with the Python API; their error
paths give one line and exit 2. The texture distractor moves the background, not the sprites."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flam_wm.cli import main
from flam_wm.evaluate import rollout_metrics
from flam_wm.io import load_run, read_dataset
from flam_wm.sprites import COLOURS, TEXTURE_MOVES, generate


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flam-wm: error:") and match in err[0], err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("verbs")
    data, run = root / "data", root / "run"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "8", "--frames", "5",
                 "--size", "16", "--seed", "2", "--out", str(data)]) == 0
    assert main(["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6",
                 "--steps", "3", "--batch-size", "4", "--out", str(run)]) == 0
    return data, run


def test_eval_matches_the_api_and_cuts_the_horizon(trained, capsys):
    data, run = trained
    capsys.readouterr()
    assert main(["eval", str(run), "--data", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, _ = load_run(run)
    video, _ = read_dataset(data, 16)
    ref = rollout_metrics(model, video, 4)
    assert out["horizon"] == 4 and out["clips"] == 8  # 10 steps asked, 5-frame clips allow 4
    assert out["psnr_1"] == pytest.approx(ref["psnr_1"]) and out["psnr_4"] == pytest.approx(ref["psnr_4"])
    assert out["copy_4"] == pytest.approx(ref["copy_4"])
    assert main(["eval", str(run), "--data", str(data), "--horizon", "2"]) == 0
    assert "2-step" in capsys.readouterr().out


def test_probe_reports_a_matching_over_entities(trained, capsys):
    data, run = trained
    capsys.readouterr()
    assert main(["probe", str(run), "--data", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0.0 <= out["correspondence"] <= 1.0
    assert len(out["factor_per_entity"]) == 2 and len(set(out["factor_per_entity"])) == 2
    assert all(0 <= k < 3 for k in out["factor_per_entity"])
    assert out["correspondence"] == pytest.approx(np.mean(out["accuracy_per_entity"]))


def test_verb_errors_are_one_line(trained, tmp_path, capsys):
    data, run = trained
    assert main(["eval", str(tmp_path / "nope"), "--data", str(data)]) == 2
    _one_line(capsys, "not a RUN folder")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((run / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"garbage")
    assert main(["eval", str(broken), "--data", str(data)]) == 2
    _one_line(capsys, "model.safetensors")
    (broken / "config.json").write_text("{not json")
    assert main(["probe", str(broken), "--data", str(data)]) == 2
    _one_line(capsys, "config.json")
    no_acts = tmp_path / "noacts"
    no_acts.mkdir()
    for p in sorted(data.glob("clip_*.npy")):
        if not p.name.endswith(".actions.npy"):
            (no_acts / p.name).write_bytes(p.read_bytes())
    assert main(["probe", str(run), "--data", str(no_acts)]) == 2
    _one_line(capsys, "true actions")
    assert main(["eval", str(run), "--data", str(data), "--horizon", "0"]) == 2
    _one_line(capsys, "--horizon")


def test_texture_distractor_scrolls_the_background():
    a, acts = generate(1, 3, 6, size=16, seed=4, distractor="texture")
    b, _ = generate(1, 3, 6, size=16, seed=4, distractor="texture")
    assert np.array_equal(a, b)
    plain, _ = generate(1, 3, 6, size=16, seed=4)
    assert (plain == 0).all(-1).mean() > 0.8 and (a == 0).all(-1).mean() < 0.05  # a textured background
    for clip in a:
        for t in range(5):
            moved = [np.mean(np.all(np.roll(clip[t], tuple(v), axis=(0, 1)) == clip[t + 1], -1))
                     for v in TEXTURE_MOVES]
            assert max(moved) > 0.85                        # the background scrolled by one pixel
            assert np.mean(np.any(clip[t] != clip[t + 1], -1)) > 0.5  # even when the sprite stays
        assert np.all(clip == COLOURS[0], -1).sum(-1).sum(-1).min() == 16  # the 4x4 sprite is intact
    with pytest.raises(ValueError, match="unknown distractor"):
        generate(1, 1, 2, distractor="snow")


def test_render_reproduces_the_unedited_rollout_and_edits_one_slot(trained, tmp_path, capsys):
    import torch
    from flam_wm.core import detokenize, tokenize
    from flam_wm.io import read_clip

    data, run = trained
    clip_path = data / "clip_00000.npy"
    model, _ = load_run(run)
    clip, _ = read_clip(clip_path, 16)
    assert main(["render", str(run), "--clip", str(clip_path), "--out", str(tmp_path / "a.npy")]) == 0
    got = np.load(tmp_path / "a.npy")
    ref = detokenize(model.rollout(tokenize(torch.from_numpy(clip[None]), 4)), 16, 4)[0]
    assert got.shape == (5, 16, 16, 3) and np.array_equal(got[0], clip[0])
    assert np.abs(got[1:] / 255.0 - ref.clamp(0, 1).numpy()).max() <= 0.5 / 255 + 1e-6
    assert main(["render", str(run), "--clip", str(clip_path), "--edit-slot", "1", "--action", "-3,3",
                 "--out", str(tmp_path / "b.npy")]) == 0
    assert not np.array_equal(np.load(tmp_path / "b.npy"), got)
    assert main(["render", str(run), "--clip", str(clip_path), "--out", str(tmp_path / "c.gif")]) == 0
    gif, _ = read_clip(tmp_path / "c.gif", None)           # a GIF clip reads back, one frame per step
    assert gif.shape == (5, 16, 16, 3) and np.array_equal(gif[0], clip[0])
    capsys.readouterr()
    for extra, match in ((["--edit-slot", "3", "--action", "1,1"], "--edit-slot"),
                         (["--edit-slot", "0", "--action", "1"], "2 numbers"),
                         (["--edit-slot", "0"], "go together"),
                         (["--edit-slot", "0", "--action", "nan,1"], "--action")):
        assert main(["render", str(run), "--clip", str(clip_path), *extra, "--out", str(tmp_path / "d.gif")]) == 2
        _one_line(capsys, match)
    assert main(["render", str(run), "--clip", str(clip_path), "--out", str(tmp_path / "c.gif")]) == 2
    _one_line(capsys, "already exists")
    assert not (tmp_path / "d.gif").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_gif_and_png_clips_read_back_the_same_sprites(tmp_path):
    from flam_wm.io import read_clip, write_frames
    from PIL import Image

    clip = generate(3, 1, 4, size=16, seed=5)[0][0]         # few exact colours: a lossless GIF palette
    write_frames(clip, tmp_path / "c.gif")
    (tmp_path / "png").mkdir()
    for i, f in enumerate(clip):
        Image.fromarray(f).save(tmp_path / "png" / f"{i:03d}.png")
    assert np.array_equal(read_clip(tmp_path / "c.gif", None)[0], clip)
    assert np.array_equal(read_clip(tmp_path / "png", None)[0], clip)
    (tmp_path / "bad.gif").write_bytes(b"GIF89a broken")
    from icml26_shared import UserError

    with pytest.raises(UserError, match="bad.gif"):
        read_clip(tmp_path / "bad.gif", 16)


def test_controlled_sprite_heads_for_its_target():
    from flam_wm.sprites import MOVES, toward

    plain, pa = generate(3, 4, 10, size=16, seed=6)
    video, acts = generate(3, 4, 10, size=16, seed=6, controlled=True)
    assert np.array_equal(acts[..., 1:], pa[..., 1:])        # the other sprites are unchanged
    assert np.array_equal(video, generate(3, 4, 10, size=16, seed=6, controlled=True)[0])
    assert toward(np.array([2, 2]), np.array([0, 3])) == 1 and toward(np.array([1, 1]), np.array([1, 0])) == 3
    assert toward(np.array([1, 1]), np.array([1, 1])) == 0
    video, acts = generate(1, 4, 10, size=16, seed=6, controlled=True)  # one sprite: never occluded
    for n in range(4):
        for t in range(9):
            dot = np.argwhere(np.all(video[n, t] == 255, -1))
            assert len(dot) == 4                              # a new target once the old is reached
            target = dot[0] // 4
            pos = np.argwhere(np.all(video[n, t] == COLOURS[0], -1))[0] // 4
            nxt = np.argwhere(np.all(video[n, t + 1] == COLOURS[0], -1))[0] // 4
            assert acts[n, t, 0] == toward(pos, target)
            assert np.array_equal(nxt, np.clip(pos + MOVES[acts[n, t, 0]], 0, 3))
            assert np.abs(target - nxt).sum() < np.abs(target - pos).sum()   # always closer
