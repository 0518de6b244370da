"""Users' formats: safetensors checkpoints (single file, sharded through
``model.safetensors.index.json``, or a PEFT LoRA adapter folder read as B·A), JSONL data lists
``{"path": ..., "labels": [...]}`` and trained probes (a directory: safetensors + JSON).

Every checkpoint is opened lazily with ``safe_open`` and only the named tensor is read. Writes go
to a temporary path first and are renamed into place, so an error leaves nothing behind.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, write_json

PROBE_FORMAT = "mvprobe-probe"
INDEX_NAME = "model.safetensors.index.json"


# --- one layer out of one checkpoint ------------------------------------------------------------

def _open_tensor(file: Path, name: str, origin: Path) -> np.ndarray:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="numpy") as f:
            if name not in f.keys():
                near = [k for k in f.keys() if k.endswith(name) or name.endswith(k)]
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise UserError(f"{origin}: no tensor named {name!r}{hint}")
            return f.get_tensor(name)
    except UserError:
        raise
    except Exception as exc:  # a corrupt or truncated file
        raise UserError(f"{origin}: cannot read as safetensors ({str(exc).splitlines()[0][:120]})") from None


def _lora_delta(folder: Path, layer: str) -> np.ndarray:
    """B·A × (lora_alpha / r) of the LoRA module ``layer`` in a PEFT adapter folder."""
    cfg_file = folder / "adapter_config.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{cfg_file}: unreadable adapter config ({exc})") from None
    module = layer.removesuffix(".weight")
    weights = folder / "adapter_model.safetensors"
    from safetensors import safe_open

    try:
        with safe_open(str(weights), framework="numpy") as f:
            keys = list(f.keys())
    except Exception as exc:
        raise UserError(f"{weights}: cannot read as safetensors ({str(exc).splitlines()[0][:120]})") from None
    hits = [k[: -len(".lora_A.weight")] for k in keys if k.endswith(".lora_A.weight")
            and (k[: -len(".lora_A.weight")] == module or k[: -len(".lora_A.weight")].endswith("." + module))]
    if len(hits) != 1:
        raise UserError(f"{folder}: {'no' if not hits else 'several'} LoRA module(s) matching {layer!r}")
    A = _open_tensor(weights, hits[0] + ".lora_A.weight", folder).astype(np.float32)
    B = _open_tensor(weights, hits[0] + ".lora_B.weight", folder).astype(np.float32)
    r = A.shape[0]
    alpha = float(cfg.get("lora_alpha", r))
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    return (B @ A) * scale


def read_layer(path: str | Path, layer: str) -> np.ndarray:
    """The 2-D float32 matrix ``layer`` of one checkpoint (a conv kernel is read as
    ``[out, in·k·k]``; a vector as ``[1, n]``)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "adapter_config.json").is_file():
            X = _lora_delta(path, layer)
        elif (path / INDEX_NAME).is_file():
            X = _sharded(path / INDEX_NAME, layer)
        elif (path / "model.safetensors").is_file():
            X = _open_tensor(path / "model.safetensors", layer, path)
        else:
            raise UserError(f"{path}: a folder without model.safetensors, {INDEX_NAME} or a PEFT adapter")
    elif path.name.endswith(".index.json"):
        X = _sharded(path, layer)
    else:
        X = _open_tensor(path, layer, path)
    X = np.asarray(X, dtype=np.float32)
    if X.ndim == 1:
        X = X[None, :]
    elif X.ndim > 2:
        X = X.reshape(X.shape[0], -1)
    if not np.isfinite(X).all():
        raise UserError(f"{path}: layer {layer!r} holds NaN or infinite values")
    return X


def _sharded(index: Path, layer: str) -> np.ndarray:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(f"{index}: not a safetensors index ({exc})") from None
    if layer not in weight_map:
        raise UserError(f"{index}: no tensor named {layer!r} in the weight map")
    return _open_tensor(index.parent / weight_map[layer], layer, index)


def layer_names(path: str | Path) -> list[str]:
    """The 2-D (or larger) tensors of a checkpoint, in file order (for ``sweep-layers all``)."""
    from safetensors import safe_open

    path = Path(path)
    files = [path]
    if path.is_dir() and (path / "adapter_config.json").is_file():  # a PEFT adapter: its LoRA modules
        try:
            with safe_open(str(path / "adapter_model.safetensors"), framework="numpy") as f:
                return [k[: -len(".lora_A.weight")] for k in f.keys() if k.endswith(".lora_A.weight")]
        except Exception as exc:
            raise UserError(f"{path}: cannot list LoRA modules ({str(exc).splitlines()[0][:120]})") from None
    if path.is_dir():
        idx = path / INDEX_NAME
        files = ([path / f for f in sorted(set(json.loads(idx.read_text())["weight_map"].values()))]
                 if idx.is_file() else [path / "model.safetensors"])
    names = []
    try:
        for file in files:
            with safe_open(str(file), framework="numpy") as f:
                names += [k for k in f.keys() if len(f.get_slice(k).get_shape()) >= 2]
    except Exception as exc:
        raise UserError(f"{path}: cannot list tensors ({str(exc).splitlines()[0][:120]})") from None
    return names


# --- data lists -----------------------------------------------------------------------------------

def read_jsonl(path: str | Path) -> list[dict]:
    """Records ``{"path": str, "labels": [str | int, ...]}``; relative paths are resolved against
    the JSONL file's folder."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
            raise UserError(f"{path}:{n}: each line needs a \"path\" string")
        labels = rec.get("labels", [])
        if not isinstance(labels, list) or not all(isinstance(x, (str, int)) for x in labels):
            raise UserError(f"{path}:{n}: \"labels\" must be a list of strings or integers")
        p = Path(rec["path"])
        records.append({"path": str(p if p.is_absolute() else path.parent / p),
                        "labels": [str(x) for x in labels], "line": n})
    if not records:
        raise UserError(f"{path}: empty (no records)")
    return records


@dataclass
class WeightDataset:
    """One layer of many checkpoints with their multi-hot labels; ``weights`` is ``[N, d_H, d_W]``
    (a ``numpy.memmap`` when read from an ``index`` cache)."""

    paths: list[str]
    layer: str
    weights: np.ndarray
    labels: np.ndarray  # [N, K] float32 multi-hot
    label_names: list[str]

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weights.shape[1:])  # type: ignore[return-value]

    @classmethod
    def from_safetensors(cls, paths: Sequence[str | Path], layer: str,
                         label_fn: Callable[[str], Sequence[str]] | None = None,
                         label_names: Sequence[str] | None = None,
                         expect_shape: tuple[int, int] | None = None) -> WeightDataset:
        paths = [str(p) for p in paths]
        if not paths:
            raise UserError("no checkpoints given")
        mats = []
        for p in paths:
            X = read_layer(p, layer)
            want = expect_shape or (mats[0].shape if mats else None)
            if want is not None and tuple(X.shape) != tuple(want):
                raise UserError(f"{p}: layer {layer!r} has shape {tuple(X.shape)}, expected {tuple(want)}")
            mats.append(X)
        raw = [list(label_fn(p)) if label_fn else [] for p in paths]
        names = list(label_names) if label_names is not None else sorted({x for r in raw for x in r},
                                                                          key=_natural)
        return cls(paths, layer, np.stack(mats), multi_hot(raw, names), names)

    @classmethod
    def from_jsonl(cls, path: str | Path, layer: str, label_names: Sequence[str] | None = None,
                   expect_shape: tuple[int, int] | None = None) -> WeightDataset:
        recs = read_jsonl(path)
        check_labels(recs, label_names, path)
        by = {r["path"]: r["labels"] for r in recs}
        return cls.from_safetensors([r["path"] for r in recs], layer, label_fn=by.__getitem__,
                                    label_names=label_names, expect_shape=expect_shape)


def check_labels(recs: Sequence[dict], label_names: Sequence[str] | None, origin) -> None:
    """Refuse, in one line naming file, line and label, a label outside ``label_names`` (the probe's
    or the training set's), and a training list (``label_names`` None) in which no record has one."""
    if label_names is None:
        if not any(r["labels"] for r in recs):
            raise UserError(f"{origin}: no record has labels; a training list needs \"labels\" on its lines")
        return
    known = set(label_names)
    for i, r in enumerate(recs, 1):
        for x in r["labels"]:
            if x not in known:
                where = f"{origin}:{r.get('line', i)}"
                shown = ", ".join(list(label_names)[:12]) + (", ..." if len(label_names) > 12 else "")
                raise UserError(f"{where}: label {x!r} is not one of the {len(label_names)} labels the "
                                f"probe was trained on ({shown})")


def _natural(s: str):
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


def multi_hot(raw: Sequence[Sequence[str]], names: Sequence[str]) -> np.ndarray:
    pos = {n: i for i, n in enumerate(names)}
    Y = np.zeros((len(raw), len(names)), dtype=np.float32)
    for i, labels in enumerate(raw):
        for x in labels:
            if x in pos:
                Y[i, pos[x]] = 1.0
    return Y


# --- trained probes -------------------------------------------------------------------------------

EXISTS = "{path} already exists (choose a new output path)"


def check_new_output(out: str | Path) -> Path:
    out = Path(out)
    if out.exists():
        raise UserError(EXISTS.format(path=out))
    if not out.absolute().parent.is_dir():
        raise UserError(f"parent folder of {out} does not exist")
    return out


def save_probe(out: str | Path, learner, meta: dict) -> Path:
    """Write a probe directory atomically: ``probe.json`` (+ ``weights.safetensors`` for torch
    learners, ``statnn.pkl`` for StatNN's trees)."""
    import pickle

    import torch
    from safetensors.torch import save_file

    out = check_new_output(out)
    with atomic_dir(out, exists_error=EXISTS) as tmp:
        if hasattr(learner, "module"):
            state = {f"module.{k}": v.contiguous() for k, v in learner.module.state_dict().items()}
            if learner.mean is not None:
                state["input.mean"], state["input.std"] = learner.mean, learner.std
            save_file({k: v.to(torch.float32) for k, v in state.items()}, str(tmp / "weights.safetensors"))
        else:
            (tmp / "statnn.pkl").write_bytes(pickle.dumps({"models": learner.models, "chosen": learner.chosen}))
        write_json(tmp / "probe.json", {"format": PROBE_FORMAT, **meta}, indent=2)
    return out


def load_probe(path: str | Path):
    """``(learner, meta)`` of a probe directory written by ``save_probe``."""
    import pickle

    from safetensors.torch import load_file

    from .baselines import build
    from .config import ProbeConfig

    path = Path(path)
    meta_file = path / "probe.json"
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, json.JSONDecodeError):
        raise UserError(f"{path}: not a probe directory (no readable probe.json)") from None
    if meta.get("format") != PROBE_FORMAT:
        raise UserError(f"{meta_file}: not an mvprobe probe")
    probe = ProbeConfig(**{**meta["probe_config"], "branches": tuple(meta["probe_config"]["branches"])})
    learner = build(meta["method"], tuple(meta["shape"]), len(meta["label_names"]), probe)
    try:
        if hasattr(learner, "module"):
            state = load_file(str(path / "weights.safetensors"))
            learner.module.load_state_dict({k[7:]: v for k, v in state.items() if k.startswith("module.")})
            if "input.mean" in state:
                learner.mean, learner.std = state["input.mean"], state["input.std"]
        else:
            saved = pickle.loads((path / "statnn.pkl").read_bytes())
            learner.models, learner.chosen = saved["models"], saved["chosen"]
    except (OSError, RuntimeError, KeyError, pickle.UnpicklingError) as exc:
        raise UserError(f"{path}: corrupt probe weights ({str(exc).splitlines()[0][:120]})") from None
    return learner, meta
