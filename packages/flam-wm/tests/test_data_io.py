"""Users' data folders (issue 57, item 9): a file that is not a clip, clips of unequal length without
--frames, actions that disagree on E or cover some clips only -> one line naming the problem, exit 2,
nothing written; long clips are cut into --frames windows, never to the shortest clip."""

from __future__ import annotations

import numpy as np
import pytest
from flam_wm.cli import main
from flam_wm.io import read_dataset
from flam_wm.sprites import generate


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flam-wm: error:") and match in err[0], err


def _clips(folder, lengths, ents=2, acts=True):
    folder.mkdir()
    for i, t in enumerate(lengths):
        v, a = generate(ents if isinstance(ents, int) else ents[i], 1, t, size=16, seed=i)
        np.save(folder / f"c{i}.npy", v[0])
        if acts:
            np.save(folder / f"c{i}.actions.npy", a[0])
    return folder


def _train(data, out, *extra):
    return main(["train", "--data", str(data), "--size", "16", "--slots", "3", "--latent-dim", "6", "--width", "16",
                 "--steps", "1", "--batch-size", "2", "--out", str(out), *extra])


@pytest.mark.parametrize("case, match", [
    ("stray", "not clips: 0000.png"),
    ("unequal", "give --frames"),
    ("e_mismatch", "disagree on the number of entities"),
    ("some_actions", "actions for some clips only"),
    ("short", "shorter than --frames 7"),
])
def test_bad_data_folders_are_one_line_and_nothing_is_written(tmp_path, capsys, case, match):
    extra = []
    if case == "stray":
        data = _clips(tmp_path / "d", [6, 6])
        (data / "0000.png").write_bytes(b"not a png")
    elif case == "unequal":
        data = _clips(tmp_path / "d", [6, 9])
    elif case == "e_mismatch":
        data = _clips(tmp_path / "d", [6, 6], ents=[2, 3])
    elif case == "some_actions":
        data = _clips(tmp_path / "d", [6, 6])
        (data / "c1.actions.npy").unlink()
    else:
        data, extra = _clips(tmp_path / "d", [6, 9]), ["--frames", "7"]
    assert _train(data, tmp_path / "run", *extra) == 2
    _one_line(capsys, match)
    assert not (tmp_path / "run").exists()


def test_long_clips_are_cut_into_frames_windows_with_their_actions(tmp_path):
    data = _clips(tmp_path / "d", [6, 13])
    video, acts = read_dataset(data, 16, frames=6)
    full = [np.load(data / f"c{i}.npy") for i in range(2)]
    fa = [np.load(data / f"c{i}.actions.npy") for i in range(2)]
    assert video.shape == (3, 6, 16, 16, 3) and acts.shape == (3, 5, 2)        # 6 -> 1 window, 13 -> 2
    assert np.array_equal(video[1], full[1][:6]) and np.array_equal(video[2], full[1][6:12])
    assert np.array_equal(acts[2], fa[1][6:11])
    assert _train(data, tmp_path / "run", "--frames", "6") == 0


def test_gen_data_identifiable_records_it_and_reads_back(tmp_path):
    import json

    out = tmp_path / "ident"
    assert main(["gen-data", "sprites", "--entities", "3", "--clips", "2", "--frames", "5", "--size", "16",
                 "--controlled", "--identifiable", "--out", str(out)]) == 0
    assert json.loads((out / "meta.json").read_text())["identifiable"] is True
    video, acts = read_dataset(out, 16)
    assert video.shape == (2, 5, 16, 16, 3) and acts.shape == (2, 4, 3)
