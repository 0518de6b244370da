"""Users' formats: LibMTL / MTAN-preprocessed NYUv2 folders
(``{train,test}/{image,label,depth,normal}/<i>.npy``, ``val/`` accepted for ``test/``, label -1 =
ignore, depth 0 = invalid), an optional ``test_ood/``, and ``tasks.json`` mapping each task to
``{"kind", "dir", "classes"}`` (absent: NYUv2's three tasks). Images are HxWx3 floats in [0, 1].
Run folders hold ``config.json``, ``history.json`` and one ``model*.pt`` per trained network.
Every write goes to a temporary sibling first and is renamed into place."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, write_json

from .config import NYU_TASKS, TASK_KINDS, ModelConfig, TaskSpec

SPLIT_DIRS = {"train": ("train",), "test": ("test", "val"), "test_ood": ("test_ood",)}


def load_tasks(root: Path) -> tuple[TaskSpec, ...]:
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"data folder {root} does not exist")
    path = root / "tasks.json"
    if not path.exists():
        return NYU_TASKS
    try:
        spec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(spec, dict) or not spec:
        raise UserError(f"{path} must map task names to {{kind, dir, classes}}")
    tasks = []
    for name, t in spec.items():
        if not isinstance(t, dict) or t.get("kind") not in TASK_KINDS:
            raise UserError(f"{path}: task {name!r} needs a kind among {', '.join(TASK_KINDS)}")
        classes = t.get("classes", 0)
        if t["kind"] in ("segmentation", "attributes") and not (isinstance(classes, int) and classes >= 1):
            raise UserError(f"{path}: task {name!r} ({t['kind']}) needs a positive integer 'classes'")
        tasks.append(TaskSpec(str(name), t["kind"], str(t.get("dir", name)), int(classes or 0)))
    return tuple(tasks)


def split_dir(root: Path, split: str) -> Path:
    for d in SPLIT_DIRS[split]:
        if (Path(root) / d).is_dir():
            return Path(root) / d
    if split == "test_ood":
        raise UserError(f"{root} has no test_ood/ folder: --split ood needs one")
    raise UserError(f"{root} has no {' or '.join(d + '/' for d in SPLIT_DIRS[split])} folder")


def _files(folder: Path) -> list[Path]:
    files = [p for p in folder.iterdir() if re.fullmatch(r"\d+\.npy", p.name)]
    return sorted(files, key=lambda p: int(p.stem))


def _load(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise UserError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None


def _stack(folder: Path, files: list[Path], what: str) -> np.ndarray:
    arrs = [_load(f) for f in files]
    shapes = {a.shape for a in arrs}
    if len(shapes) != 1:
        raise UserError(f"{what} files in {folder} have different shapes {sorted(shapes)[:3]}")
    out = np.stack(arrs).astype(np.float32)
    if not np.isfinite(out).all():
        raise UserError(f"{what} {folder} contains NaN or infinite values")
    return out


def read_split(root: Path, split: str, tasks: tuple[TaskSpec, ...], limit: int | None = None,
               image_scale: float = 1.0):
    """Images ``[N, 3, H, W]`` and targets (seg ``[N, H, W]`` int64, depth ``[N, H, W]``, normal
    ``[N, 3, H, W]``, attributes ``[N, K]``) as NumPy arrays, checked; plus ``hue`` if stored.
    Images are divided by ``image_scale`` (255 for 0-255 files) and must then lie in [0, 1]
    (the appearance decoders end in a sigmoid)."""
    base = split_dir(root, split)
    img_dir = base / "image"
    if not img_dir.is_dir():
        raise UserError(f"{base} has no image/ folder")
    files = _files(img_dir)[:limit]
    if not files:
        raise UserError(f"{img_dir} holds no <i>.npy files")
    names = [f.name for f in files]
    images = _stack(img_dir, files, "image")
    if images.ndim != 4 or images.shape[-1] != 3:
        raise UserError(f"{img_dir}: images must be HxWx3, got {images.shape[1:]}")
    if image_scale != 1.0:
        images /= np.float32(image_scale)
    lo, hi = float(images.min()), float(images.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise UserError(f"images in {img_dir} range over [{lo:g}, {hi:g}]"
                        + (f" after dividing by {image_scale:g}" if image_scale != 1.0 else "")
                        + ", not [0, 1]" + ("; pass --image-scale 255" if hi > 1.5 and image_scale == 1.0 else ""))
    N, H, W = images.shape[:3]
    targets = {}
    for t in tasks:
        folder = base / t.dir
        if not folder.is_dir():
            raise UserError(f"task {t.name!r}: folder {folder} is missing")
        missing = [n for n in names if not (folder / n).exists()]
        if missing:
            raise UserError(f"task {t.name!r}: {folder} lacks {missing[0]} (and {len(missing) - 1} more)")
        a = _stack(folder, [folder / n for n in names], f"task {t.name!r}:")
        if t.kind == "attributes":
            if a.shape[1:] != (t.classes,):
                raise UserError(f"task {t.name!r}: {folder} holds shape {a.shape[1:]}, expected ({t.classes},)")
            targets[t.name] = a
            continue
        want = {"segmentation": (H, W), "depth": (H, W), "normal": (H, W, 3)}[t.kind]
        if t.kind != "normal" and a.shape[1:] == (H, W, 1):
            a = a[..., 0]
        if a.shape[1:] != want:
            raise UserError(f"task {t.name!r}: {folder} holds shape {a.shape[1:]}, expected {want}")
        if t.kind == "segmentation":
            if (a >= t.classes).any() or (a < -1).any() or (a != np.round(a)).any():
                raise UserError(f"task {t.name!r}: {folder} has class ids outside -1..{t.classes - 1}")
            a = a.astype(np.int64)
        elif t.kind == "normal":
            a = a.transpose(0, 3, 1, 2)
        targets[t.name] = a
    extra = {}
    if (base / "hue").is_dir():
        extra["hue"] = _stack(base / "hue", [base / "hue" / n for n in names], "hue").astype(np.int64).ravel()
    return images.transpose(0, 3, 1, 2).copy(), targets, extra


_EXISTS = "{path} already exists (choose a new --out)"


def refuse_existing(out: Path) -> Path:
    out = Path(out)
    if out.exists():
        raise UserError(_EXISTS.format(path=out))
    return out


def write_dataset(out: Path, splits: dict[str, dict], tasks: dict) -> Path:
    """Write ShadedShapes splits (``make_split`` dicts) in the LibMTL layout plus ``tasks.json``."""
    out = refuse_existing(out)
    with atomic_dir(out, exists_error=_EXISTS) as tmp:
        for split, d in splits.items():
            arrays = {"image": d["image"].transpose(0, 2, 3, 1), "label": d["label"].astype(np.float32),
                      "depth": d["depth"][..., None], "normal": d["normal"].transpose(0, 2, 3, 1),
                      "albedo": d["albedo"].transpose(0, 2, 3, 1), "light": d["light"],
                      "hue": d["hue"].astype(np.float32).reshape(-1, 1)}
            if "attributes" in d:
                arrays["attr"] = d["attributes"]
            for folder, arr in arrays.items():
                (tmp / split / folder).mkdir(parents=True, exist_ok=True)
                for i, a in enumerate(arr):
                    np.save(tmp / split / folder / f"{i}.npy", np.ascontiguousarray(a, dtype=np.float32))
        write_json(tmp / "tasks.json", tasks, indent=2)
    return out


def save_run(out: Path, config: dict, tasks: tuple[TaskSpec, ...], models: dict, history: dict,
             *, encoder: str | None = None, image_scale: float = 1.0) -> Path:
    """``models`` maps ``"*"`` (one multi-task network) or a task name (single-task) to a module;
    ``encoder`` is the ``MODULE:FACTORY`` spec of a user backbone (rebuilt by ``load_run``)."""
    import torch

    out = refuse_existing(out)
    with atomic_dir(out, exists_error=_EXISTS) as tmp:
        meta = {"config": config, "tasks": [asdict(t) for t in tasks], "models": list(models),
                "encoder": encoder, "image_scale": image_scale}
        write_json(tmp / "config.json", meta, indent=2)
        write_json(tmp / "history.json", history, indent=None)
        for key, m in models.items():
            torch.save(m.state_dict(), tmp / ("model.pt" if key == "*" else f"model_{key}.pt"))
    return out


def load_run(run: Path, device=None, meta_out: dict | None = None):
    """(config dict, tasks, {key: model}) of a run folder written by ``save_run``, on ``device``
    (default CPU); a user encoder is rebuilt from its recorded ``MODULE:FACTORY``. The run's other
    metadata (``encoder``, ``image_scale``) go into ``meta_out`` when given."""
    import torch

    from .model import build_model

    run = Path(run)
    path = run / "config.json"
    if not path.is_file():
        raise UserError(f"{run} is not a core-mtl run folder (no config.json)")
    try:
        meta = json.loads(path.read_text())
        tasks = tuple(TaskSpec(**t) for t in meta["tasks"])
        cfg = meta["config"]
        mcfg = ModelConfig(**cfg["model"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(f"{path} is corrupt ({exc})") from None
    if meta_out is not None:
        meta_out.update(encoder=meta.get("encoder"), image_scale=float(meta.get("image_scale", 1.0)))
    models = {}
    for key in meta["models"]:
        ts = tasks if key == "*" else tuple(t for t in tasks if t.name == key)
        enc = None
        if meta.get("encoder"):
            from . import encoders

            enc = encoders.build(meta["encoder"])
        try:
            m = build_model(cfg["method"], ts, mcfg, enc)
        except ValueError as exc:
            raise UserError(f"{run}: cannot rebuild the network ({exc})") from None
        f = run / ("model.pt" if key == "*" else f"model_{key}.pt")
        try:
            m.load_state_dict(torch.load(f, map_location="cpu", weights_only=True))
        except (OSError, RuntimeError, EOFError) as exc:
            raise UserError(f"cannot load {f}: {str(exc).splitlines()[0]}") from None
        m.eval()
        models[key] = m.to(device) if device is not None else m
    return cfg, tasks, models
