"""Users' video: a folder of clips, each a folder of PNG / JPEG frames, a GIF, an MP4 / WebM (through
PyAV, the ``video`` extra) or a ``.npy`` ``[T, H, W, 3]`` uint8, resized to ``size``; optional true
actions ``[T-1, E]`` (``actions.npy`` in a clip folder or ``<clip>.actions.npy`` beside a clip file),
for evaluation only. RUN folders: ``config.json`` first, then safetensors checkpoints and weights.
Writes are atomic."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, write_json

FRAME_EXT = (".png", ".jpg", ".jpeg")
VIDEO_EXT = (".mp4", ".webm", ".mkv", ".mov", ".avi")
CLIP_EXT = (".npy", ".gif", *VIDEO_EXT)


def _resize(frames: np.ndarray, size: int | None, name: str) -> np.ndarray:
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise UserError(f"{name}: expected a [T, H, W, 3] uint8 array, got {frames.dtype} {list(frames.shape)}")
    if frames.shape[0] < 2:
        raise UserError(f"{name}: a clip needs at least 2 frames, got {frames.shape[0]}")
    if size is None or frames.shape[1:3] == (size, size):
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


def _read_gif(path: Path) -> np.ndarray:
    from PIL import Image, ImageSequence, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return np.stack([np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)])
    except (OSError, UnidentifiedImageError, ValueError):
        raise UserError(f"cannot read GIF {path}") from None


def _read_video(path: Path) -> np.ndarray:
    try:
        import av
    except ImportError:
        raise UserError(f"{path}: reading MP4 / WebM needs PyAV (pip install 'flam-wm[video]')") from None
    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.error.FFmpegError, ValueError, IndexError, OSError):
        raise UserError(f"cannot read video {path}") from None
    return np.stack(frames) if frames else np.zeros((0, 1, 1, 3), np.uint8)


def read_clip(path: Path, size: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """One clip -> (frames [T, size, size, 3] uint8 — the clip's own size when ``size`` is None —,
    actions [T-1, E] or None). A clip is a folder of PNG / JPEG frames, a ``.npy``, a ``.gif`` or a
    video file (``.mp4`` / ``.webm`` / ``.mkv`` / ``.mov`` / ``.avi``, needs PyAV)."""
    path = Path(path)
    if path.is_dir():
        frames, act_path = _read_frames(path), path / "actions.npy"
    elif path.suffix == ".npy" and path.is_file():
        frames, act_path = _load_npy(path), path.with_name(path.stem + ".actions.npy")
    elif path.suffix.lower() == ".gif" and path.is_file():
        frames, act_path = _read_gif(path), path.with_name(path.stem + ".actions.npy")
    elif path.suffix.lower() in VIDEO_EXT and path.is_file():
        frames, act_path = _read_video(path), path.with_name(path.stem + ".actions.npy")
    else:
        raise UserError(f"{path}: not a clip (a folder of PNG/JPEG frames, a .npy array, a .gif, .mp4 or .webm)")
    frames = _resize(frames, size, str(path))
    actions = None
    if act_path.is_file():
        actions = _load_npy(act_path)
        if actions.ndim != 2 or actions.shape[0] != frames.shape[0] - 1:
            raise UserError(f"{act_path}: expected [T-1={frames.shape[0] - 1}, E] actions, got {list(actions.shape)}")
    return frames, actions


DATA_EXTRAS = ("meta.json",)  # files a data folder may hold beside its clips (gen-data writes meta.json)


def read_dataset(folder: Path, size: int, frames: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Every clip in ``folder`` (sorted by name): (video [N, T, size, size, 3] uint8, actions [N, T-1, E]
    or None when no clip has actions). Without ``frames`` every clip must have the same length; with it
    each clip is cut into consecutive ``frames``-frame windows (its last frames that do not fill one are
    dropped), never to the shortest clip. Refused in one line (``UserError``): a file that is not a clip
    (named), a clip that cannot be read, clips of unequal length without ``frames``, a clip shorter than
    ``frames``, actions for some clips only, or clips whose actions disagree on E."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} does not exist or is not a folder")
    if not isinstance(size, int) or size < 4:
        raise UserError(f"--size must be an integer >= 4, got {size!r}")
    if frames is not None and (not isinstance(frames, int) or frames < 2):
        raise UserError(f"--frames must be an integer >= 2, got {frames!r}")
    names = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    entries = [p for p in names if p.is_dir() or (p.suffix.lower() in CLIP_EXT and not p.name.endswith(".actions.npy"))]
    stray = [p.name for p in names if p not in entries and p.name not in DATA_EXTRAS
             and not (p.name.endswith(".actions.npy") and p.name[:-len(".actions.npy")] in {e.stem for e in entries})]
    if stray:
        more = f" and {len(stray) - 5} more" if len(stray) > 5 else ""
        raise UserError(f"{folder}: not clips: {', '.join(stray[:5])}{more} (a clip is a folder of PNG/JPEG frames, "
                        ".npy, .gif, .mp4 or .webm; move other files out)")
    if not entries:
        raise UserError(f"{folder} holds no clips (folders of frames, .npy, .gif, .mp4 or .webm files)")
    clips = [read_clip(p, size) for p in entries]
    with_acts = [c[1] is not None for c in clips]
    if any(with_acts) and not all(with_acts):
        missing = [p.name for p, w in zip(entries, with_acts, strict=True) if not w]
        raise UserError(f"{folder}: actions for some clips only (none for {', '.join(missing[:3])}"
                        f"{' ...' if len(missing) > 3 else ''}); give every clip its actions or none")
    ents = {c[1].shape[1] for c in clips if c[1] is not None}
    if len(ents) > 1:
        raise UserError(f"{folder}: the clips' actions disagree on the number of entities E ({sorted(ents)})")
    lengths = [c[0].shape[0] for c in clips]
    if frames is None:
        if len(set(lengths)) > 1:
            raise UserError(f"{folder}: clips of {min(lengths)} to {max(lengths)} frames; give --frames N to cut "
                            "every clip into N-frame windows")
        frames = lengths[0]
    short = [p.name for p, n in zip(entries, lengths, strict=True) if n < frames]
    if short:
        raise UserError(f"{folder}: {len(short)} clip(s) shorter than --frames {frames} ({', '.join(short[:3])})")
    video, acts = [], []
    for v, a in clips:
        for i in range(0, v.shape[0] - frames + 1, frames):
            video.append(v[i:i + frames])
            if a is not None:
                acts.append(a[i:i + frames - 1])
    return np.stack(video), (np.stack(acts) if acts else None)


def write_dataset(video: np.ndarray, actions: np.ndarray | None, out: Path, meta: dict) -> Path:
    """Write clips as ``clip_00000.npy`` (+ ``.actions.npy``) and ``meta.json`` into a new folder,
    atomically: a temporary sibling folder renamed into place; refuses an existing ``out``."""
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists (choose a new --out)")
    with atomic_dir(out, exists_error="{path} already exists (choose a new --out)") as tmp:
        for i, clip in enumerate(video):
            np.save(tmp / f"clip_{i:05d}.npy", clip)
            if actions is not None:
                np.save(tmp / f"clip_{i:05d}.actions.npy", actions[i])
        write_json(tmp / "meta.json", meta, indent=2)
    return out


def open_run(out: Path, config: dict) -> bool:
    """Create the RUN folder ``out`` holding ``config.json`` (atomically: a temporary sibling renamed
    into place), or accept an existing one written with the same config (every field but the
    number of steps) so training resumes there. Returns True when resuming; a RUN of another
    config (or a folder that is not a RUN) -> ``UserError``, nothing touched."""
    out = Path(out)
    if out.exists():
        cfg_path = out / "config.json"
        try:
            old = json.loads(cfg_path.read_text())
        except (OSError, ValueError):
            raise UserError(f"{out} exists and is not a RUN folder (choose a new --out)") from None
        if isinstance(old.get("model"), dict):
            old["model"].setdefault("unroll", 1)  # a RUN written before 0.5 was trained one step ahead
            old["model"].setdefault("local_sigma", 0.0)  # before 0.9: no local slot attention
            old["model"].setdefault("free_bits", 0.0)  # before 0.9.1: no KL floor
            old["model"].setdefault("idm_input", "absolute")  # before 0.12.0: the IDM read absolute positions
            old["model"].setdefault("token_idm", "mean")  # before 0.13.0: lam-token's IDM pooled the tokens' mean
        if isinstance(old.get("train"), dict):
            old["train"].setdefault("unroll_from", 0)
            for k, v in (("starts", 1), ("start_steps", 0), ("start_floor", 0.0), ("start_max", 0)):
                if k in config.get("train", {}):
                    old["train"].setdefault(k, v)
        _drop_removed(old, out)
        for part in sorted(set(old) | set(config)):
            a, b = old.get(part, {}), config.get(part, {})
            if isinstance(a, dict) and isinstance(b, dict):
                diff = [k for k in sorted(set(a) | set(b)) if k != "steps" and a.get(k) != b.get(k)]
                if diff:
                    k = diff[0]
                    raise UserError(f"{out} is a RUN of another config ({part}.{k} = {a.get(k)!r}, asked "
                                    f"{b.get(k)!r}); choose a new --out")
            elif a != b:
                raise UserError(f"{out} is a RUN of another config ({part} = {a!r}, asked {b!r}); choose a new --out")
        return True
    # not atomic_dir: a RUN grows after this (checkpoints, weights, metrics), so a manifest of
    # its first file would be wrong
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_json(tmp / "config.json", config, indent=2)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return False


def _drop_removed(config: dict, run: Path) -> None:
    """Remove from a RUN's ``config`` (in place) the options deleted in 0.10.0 where they hold their off
    value; a RUN that used one (another value) -> ``UserError`` naming it."""
    from .config import removed_options

    for part in ("model", "train"):
        if isinstance(config.get(part), dict):
            config[part], used = removed_options(part, config[part])
            if used:
                raise UserError(f"{run} was trained with {', '.join(used)}, an option removed in flam-wm 0.10.0 "
                                "(rejected on dev); train a new RUN")


def finish_run(out: Path, model, config: dict, metrics: dict) -> None:
    """Write the final weights (``model.safetensors``) and ``metrics.json`` into a RUN, atomically."""
    from safetensors.torch import save

    from icml26_shared.io import atomic_write_bytes, dumps_json

    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write_bytes(Path(out) / "model.safetensors",
                       save(state, metadata={"config": dumps_json(config, indent=None)}))
    write_json(Path(out) / "metrics.json", metrics, indent=2)


def load_run(run: Path):
    """Read a RUN folder written by ``flam-wm train``: ``(WorldModel in eval mode, config dict)``.
    A missing folder, a missing or corrupt ``config.json`` / ``model.safetensors`` -> ``UserError``."""
    from .config import ModelConfig
    from .core import WorldModel

    run = Path(run)
    if not run.is_dir():
        raise UserError(f"{run} is not a RUN folder (write one with flam-wm train)")
    for name in ("config.json", "model.safetensors"):
        if not (run / name).is_file():
            raise UserError(f"{run}: missing {name} (not a finished RUN written by flam-wm train)")
    try:
        config = json.loads((run / "config.json").read_text())
        if "slot_pos" not in config["model"]:  # a RUN written before 0.7: 0.6's factoriser and aggregator (before
            # 0.4 position in the keys too), options removed in 0.10.0, so _drop_removed refuses it
            for key, old in (("pos_keys", True), ("decoder", "mlp"), ("seeding", "learned")):
                config["model"].setdefault(key, old)
        config["model"].setdefault("idm_input", "absolute")  # a RUN written before 0.12.0: the absolute IDM
        config["model"].setdefault("token_idm", "mean")  # before 0.13.0: lam-token's mean-pooled IDM
        _drop_removed(config, run)
        mcfg = ModelConfig(**config["model"])
    except (ValueError, TypeError, KeyError) as exc:
        raise UserError(f"{run / 'config.json'}: corrupt RUN config ({exc})") from None
    model = WorldModel(mcfg)
    try:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(run / "model.safetensors")))
    except Exception as exc:  # safetensors / torch raise many types for a truncated / foreign file
        raise UserError(f"{run / 'model.safetensors'}: cannot load the weights ({type(exc).__name__})") from None
    model.eval()
    return model, config


def write_frames(frames: np.ndarray, out: Path, fps: int = 4) -> Path:
    """Write ``[T, H, W, 3]`` uint8 frames as a GIF (one frame per step, palette-quantised by
    Pillow) or, for a ``.npy`` path, exactly; atomically, refusing an existing ``out``."""
    import io as _io

    from icml26_shared.io import atomic_write_bytes

    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists (choose a new --out)")
    if out.suffix.lower() not in (".gif", ".npy"):
        raise UserError(f"--out must end in .gif or .npy, got {out.name!r}")
    buf = _io.BytesIO()
    if out.suffix.lower() == ".npy":
        np.save(buf, frames)
    else:
        from PIL import Image

        ims = [Image.fromarray(f) for f in frames]
        ims[0].save(buf, format="GIF", save_all=True, append_images=ims[1:], duration=int(1000 / fps), loop=0,
                    optimize=False, disposal=1)
    return atomic_write_bytes(out, buf.getvalue())
