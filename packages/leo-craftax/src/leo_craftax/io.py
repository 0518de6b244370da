"""Checkpoints: one file holding the training config, the goal names and the parameters of
every trained seed (stacked on a leading axis; Flax msgpack serialization), with a SHA-256 over
the metadata and the parameter bytes, written atomically. Loading refuses an altered file and
checks it against what the caller expects (algo, environment, number of goals), so a checkpoint
of another config fails clearly; ``seed=`` picks one of the trained seeds."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_write_bytes

from .config import TrainConfig

FORMAT = "leo-craftax-checkpoint/3"     # {"params", "batch_stats"} per seed, stacked
FORMAT_2 = "leo-craftax-checkpoint/2"   # 0.2: bare parameters, stacked; still read
OLD_FORMAT = "leo-craftax-checkpoint/1"  # one seed's parameters, no checksum: still read


def _as_vars(params: Any) -> dict:
    """0.1 / 0.2 files hold bare parameters (no BatchRenorm then): the variables dict of today."""
    return {"params": params, "batch_stats": {}}


def _digest(meta_json: str, blob: bytes) -> str:
    return hashlib.sha256(meta_json.encode() + b"\0" + blob).hexdigest()


def save_checkpoint(path: str | Path, cfg: TrainConfig, params: Any, goal_names: tuple[str, ...],
                    extra: dict | None = None, seeds: Sequence[int] | None = None) -> Path:
    """``params``: one seed's variables ``{"params", "batch_stats"}`` (bare parameters are
    wrapped), or (with ``seeds``) every seed's, stacked on axis 0."""
    from flax import serialization

    path = Path(path)
    if not (isinstance(params, dict) and "params" in params):
        params = _as_vars(params)
    extra = dict(extra or {})
    if seeds is None:
        seeds = [int(extra.get("seed", 0))]
        params = jax.tree.map(lambda x: np.asarray(x)[None], params)
    seeds = [int(s) for s in seeds]
    meta_json = json.dumps({"format": FORMAT, "config": cfg.to_dict(), "goal_names": list(goal_names),
                            "seeds": seeds, "extra": extra})
    blob = serialization.msgpack_serialize(jax.tree.map(np.asarray, params))
    data = serialization.msgpack_serialize(
        {"meta": meta_json, "params": blob, "sha256": _digest(meta_json, blob)})
    atomic_write_bytes(path, data)
    return path


def _read(path: Path) -> tuple[dict, Any]:
    """``(meta, params stacked over seeds)``; ``UserError`` for anything but an intact checkpoint."""
    from flax import serialization

    try:
        raw = serialization.msgpack_restore(path.read_bytes())
        meta = json.loads(raw["meta"])
        fmt = meta.get("format")
        if fmt == OLD_FORMAT:
            params = jax.tree.map(lambda x: np.asarray(x)[None], raw["params"])
            return {**meta, "seeds": [int(meta.get("extra", {}).get("seed", 0))]}, _as_vars(params)
        if fmt not in (FORMAT, FORMAT_2):
            raise ValueError(fmt)
        intact = raw["sha256"] == _digest(raw["meta"], raw["params"])
    except Exception:  # noqa: BLE001 - any decoding failure is the user's file
        raise UserError(f"{path} is not a leo-craftax checkpoint") from None
    if not intact:
        raise UserError(f"{path} is corrupt: its checksum does not match its contents")
    params = serialization.msgpack_restore(raw["params"])
    if fmt == FORMAT_2:
        return meta, _as_vars(params)
    params.setdefault("batch_stats", {})  # msgpack keeps no empty collections
    return meta, params


def load_checkpoint(path: str | Path, expect: TrainConfig | None = None,
                    goal_names: tuple[str, ...] | None = None,
                    seed: int | None = None) -> tuple[TrainConfig, Any, dict]:
    """``(config, params, meta)`` with the parameters of ``seed`` (default: the first trained
    seed; ``meta["seeds"]`` lists them); raises ``UserError`` when the file is not an intact
    checkpoint, when ``seed`` was not trained, or when its algo / environment / goals differ from
    ``expect`` / ``goal_names``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    meta, stacked = _read(path)
    seeds = meta["seeds"]
    if seed is not None and seed not in seeds:
        raise UserError(f"checkpoint {path} holds seeds {seeds}, not {seed}")
    i = 0 if seed is None else seeds.index(seed)
    params = jax.tree.map(lambda x: x[i], stacked)
    cfg = TrainConfig.from_dict(meta["config"])
    if expect is not None:
        for field in ("algo", "env", "width", "layers"):
            got, want = getattr(cfg, field), getattr(expect, field)
            if got != want:
                raise UserError(f"checkpoint {path} was trained with {field}={got!r}, "
                                f"not {want!r}")
    if goal_names is not None and tuple(meta["goal_names"]) != tuple(goal_names):
        raise UserError(f"checkpoint {path} has a head for {len(meta['goal_names'])} goals; this "
                        f"environment has {len(goal_names)} (or other goals)")
    return cfg, params, {**meta, "seed": seeds[i]}


def check_head(params: Any, num_goals: int, num_actions: int) -> None:
    """Raise ``UserError`` when an all-goals head (LEO or a Dual LEO teacher) was built for another
    number of goals than the environment's. ``params``: the variables dict (or bare params)."""
    params = params.get("params", params) if isinstance(params, dict) else params
    leo = params.get("leo", params) if isinstance(params, dict) else params
    try:
        width = int(np.shape(leo["head"]["dense"]["kernel"])[-1])
    except (KeyError, TypeError, IndexError):
        return  # no all-goals head (PQN / PPO): goal embeddings are checked by shape below
    if width != num_goals * num_actions:
        raise UserError(f"the checkpoint's all-goals head has {width} outputs = "
                        f"{width / num_actions:g} goals x {num_actions} actions; this environment "
                        f"has {num_goals} goals")
