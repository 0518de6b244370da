"""Users' video: a folder of clips, each a folder of PNG / JPEG frames or a ``.npy`` ``[T, H, W, 3]``
uint8, resized to ``size``; optional true actions ``[T-1, E]`` (``actions.npy`` in a clip folder or
``<clip>.actions.npy`` beside a clip file), for evaluation only. Writes are atomic."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from icml26_shared import UserError

FRAME_EXT = (".png", ".jpg", ".jpeg")


def _resize(frames: np.ndarray, size: int, name: str) -> np.ndarray:
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise UserError(f"{name}: expected a [T, H, W, 3] uint8 array, got {frames.dtype} {list(frames.shape)}")
    if frames.shape[0] < 2:
        raise UserError(f"{name}: a clip needs at least 2 frames, got {frames.shape[0]}")
    if frames.shape[1:3] == (size, size):
        return frames
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(f).resize((size, size), Image.BILINEAR)) for f in frames])


def _read_frames(folder: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in FRAME_EXT)
    frames = []
    for p in files:
        try:
            with Image.open(p) as im:
                frames.append(np.asarray(im.convert("RGB")))
        except (OSError, UnidentifiedImageError):
            raise UserError(f"cannot read frame {p}") from None
    if frames and len({f.shape for f in frames}) > 1:
        raise UserError(f"{folder}: frames have different sizes")
    return np.stack(frames) if frames else np.zeros((0, 1, 1, 3), np.uint8)


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None


def read_clip(path: Path, size: int) -> tuple[np.ndarray, np.ndarray | None]:
    """One clip -> (frames [T, size, size, 3] uint8, actions [T-1, E] or None)."""
    path = Path(path)
    if path.is_dir():
        frames, act_path = _read_frames(path), path / "actions.npy"
    elif path.suffix == ".npy":
        frames, act_path = _load_npy(path), path.with_name(path.stem + ".actions.npy")
    else:
        raise UserError(f"{path}: not a clip (a folder of PNG/JPEG frames or a .npy array)")
    frames = _resize(frames, size, str(path))
    actions = None
    if act_path.is_file():
        actions = _load_npy(act_path)
        if actions.ndim != 2 or actions.shape[0] != frames.shape[0] - 1:
            raise UserError(f"{act_path}: expected [T-1={frames.shape[0] - 1}, E] actions, got {list(actions.shape)}")
    return frames, actions


def read_dataset(folder: Path, size: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Every clip in ``folder`` (sorted by name), cut to the shortest clip's length:
    (video [N, T, size, size, 3] uint8, actions [N, T-1, E] or None when any clip has none)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} does not exist or is not a folder")
    if not isinstance(size, int) or size < 4:
        raise UserError(f"--size must be an integer >= 4, got {size!r}")
    entries = sorted(p for p in folder.iterdir()
                     if (p.is_dir() or (p.suffix == ".npy" and not p.name.endswith(".actions.npy"))))
    if not entries:
        raise UserError(f"{folder} holds no clips (folders of frames or .npy files)")
    clips = [read_clip(p, size) for p in entries]
    t = min(c[0].shape[0] for c in clips)
    video = np.stack([c[0][:t] for c in clips])
    acts = None
    if all(c[1] is not None for c in clips) and len({c[1].shape[1] for c in clips}) == 1:
        acts = np.stack([c[1][:t - 1] for c in clips])
    return video, acts


def write_dataset(video: np.ndarray, actions: np.ndarray | None, out: Path, meta: dict) -> Path:
    """Write clips as ``clip_00000.npy`` (+ ``.actions.npy``) and ``meta.json`` into a new folder,
    atomically: a temporary sibling folder renamed into place; refuses an existing ``out``."""
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists (choose a new --out)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for i, clip in enumerate(video):
            np.save(tmp / f"clip_{i:05d}.npy", clip)
            if actions is not None:
                np.save(tmp / f"clip_{i:05d}.actions.npy", actions[i])
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_run(out: Path, files: dict[str, bytes]) -> Path:
    """Write a RUN folder (checkpoint, config, metrics) atomically; refuses an existing ``out``."""
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists (choose a new --out)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
