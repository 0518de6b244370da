"""Checkpoints: one file holding the training config, the goal names and the parameters
(Flax msgpack serialization), written atomically. Loading checks it against what the caller
expects (algo, environment, number of goals), so a checkpoint of another config fails clearly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from icml26_shared import UserError

from .config import TrainConfig

FORMAT = "leo-craftax-checkpoint/1"


def save_checkpoint(path: str | Path, cfg: TrainConfig, params: Any, goal_names: tuple[str, ...],
                    extra: dict | None = None) -> Path:
    from flax import serialization

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "config": cfg.to_dict(), "goal_names": list(goal_names),
            "extra": extra or {}}
    blob = serialization.msgpack_serialize(
        {"meta": json.dumps(meta), "params": jax.tree.map(np.asarray, params)})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path, expect: TrainConfig | None = None,
                    goal_names: tuple[str, ...] | None = None) -> tuple[TrainConfig, Any, dict]:
    """``(config, params, meta)``; raises ``UserError`` when the file is not a checkpoint, or when
    its algo / environment / goals differ from ``expect`` / ``goal_names``."""
    from flax import serialization

    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    try:
        raw = serialization.msgpack_restore(path.read_bytes())
        meta = json.loads(raw["meta"])
        if meta.get("format") != FORMAT:
            raise ValueError(meta.get("format"))
        params = raw["params"]
    except Exception:  # noqa: BLE001 - any decoding failure is the user's file
        raise UserError(f"{path} is not a leo-craftax checkpoint") from None
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
    return cfg, params, meta


def check_head(params: Any, num_goals: int, num_actions: int) -> None:
    """Raise ``UserError`` when an all-goals head (LEO or a Dual LEO teacher) was built for another
    number of goals than the environment's."""
    leo = params.get("leo", params) if isinstance(params, dict) else params
    try:
        width = int(np.shape(leo["head"]["dense"]["kernel"])[-1])
    except (KeyError, TypeError, IndexError):
        return  # no all-goals head (PQN / PPO): goal embeddings are checked by shape below
    if width != num_goals * num_actions:
        raise UserError(f"the checkpoint's all-goals head has {width} outputs = "
                        f"{width / num_actions:g} goals x {num_actions} actions; this environment "
                        f"has {num_goals} goals")
