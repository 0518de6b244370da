"""Checkpoints: one file holding the training config, the goal names and the parameters of
every trained seed (stacked on a leading axis; Flax msgpack serialization), with a SHA-256 over
the metadata and the parameter bytes, written atomically. Loading refuses an altered file and
checks it against what the caller expects (algo, environment, number of goals), so a checkpoint
of another config fails clearly; ``seed=`` picks one of the trained seeds.

Run states (``save_state`` / ``load_state``): everything a run needs to continue after its last
completed chunk of updates (``train.train_seeds(on_chunk=, start=)``), in the same checksummed,
atomically written container."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_write_bytes, dumps_json

from .config import TrainConfig

FORMAT = "leo-craftax-checkpoint/3"     # {"params", "batch_stats"} per seed, stacked
FORMAT_2 = "leo-craftax-checkpoint/2"   # 0.2: bare parameters, stacked; still read
OLD_FORMAT = "leo-craftax-checkpoint/1"  # one seed's parameters, no checksum: still read
STATE_FORMAT = "leo-craftax-run-state/1"  # a run to resume: its whole carry, points, metrics


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
    meta_json = dumps_json({"format": FORMAT, "config": cfg.to_dict(), "goal_names": list(goal_names),
                            "seeds": seeds, "extra": extra}, indent=None)
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


RESULT_KEYS = ("algo", "seed", "config", "goal_names", "success_per_goal")


def result_record(path: str | Path, seed: int | None = None) -> dict:
    """One trained seed's final result from a checkpoint, as JSON-ready data (what ``leo-craftax
    export`` writes and ``load_runs`` reads back): ``algo``, ``seed``, ``config``, ``goal_names``,
    ``success_per_goal`` (the final evaluation point), ``timings`` (the run's, shared by its
    seeds) and ``code`` (the package version that wrote the checkpoint is not stored; this is the
    exporting one). ``seed`` is required for a checkpoint of several seeds."""
    from . import __version__

    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    meta, _ = _read(path)
    seeds = [int(s) for s in meta["seeds"]]
    if seed is None and len(seeds) > 1:
        raise UserError(f"{path} holds seeds {seeds}: pick one with --run-seed")
    if seed is not None and seed not in seeds:
        raise UserError(f"checkpoint {path} holds seeds {seeds}, not {seed}")
    got = _final_success(path, meta)
    i = 0 if seed is None else seeds.index(seed)
    cfg = TrainConfig.from_dict(meta["config"]).to_dict()
    live = _live_curves(meta)
    return {"algo": cfg["algo"], "seed": seeds[i], "config": cfg,
            "goal_names": list(meta["goal_names"]), "success_per_goal": got[i].tolist(),
            **({} if live is None else {"live_success": float(live[i, -1]),
                                        "live_success_curve": live[i].tolist()}),
            "timings": meta.get("extra", {}).get("timings"),
            "code": f"exported by leo-craftax {__version__}"}


def _live_curves(meta: dict) -> np.ndarray | None:
    """The live success rate after every update ``[seeds, updates]`` a checkpoint stores (0.4.3
    on), or ``None``."""
    try:
        live = np.asarray(meta.get("extra", {}).get("live_success"), dtype=float)
    except (TypeError, ValueError):
        return None
    if live.ndim != 2 or live.shape[0] != len(meta["seeds"]) or live.shape[1] == 0:
        return None
    return live


def _final_success(path: Path, meta: dict) -> np.ndarray:
    try:
        got = np.asarray(meta.get("extra", {}).get("success", []), dtype=float)
    except (TypeError, ValueError):
        got = np.zeros(0)
    if got.ndim != 2 or got.shape != (len(meta["seeds"]), len(meta["goal_names"])):
        raise UserError(f"{path} holds no final per-goal success for each of its seeds "
                        f"(write it with `leo-craftax train`)")
    return got


def _read_result(path: Path) -> dict:
    """A ``result_record`` JSON file as checkpoint-like metadata (one seed); ``UserError`` when it
    is not one. The file carries no checksum: it is as trustworthy as where it came from."""
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or any(k not in rec for k in RESULT_KEYS):
            raise ValueError
        names = [str(n) for n in rec["goal_names"]]
        success = np.asarray(rec["success_per_goal"], dtype=float)
        cfg = TrainConfig.from_dict(rec["config"]).to_dict()
        if success.shape != (len(names),) or not np.all(np.isfinite(success)):
            raise ValueError
        live = rec.get("live_success_curve")
        if live is not None:
            live = np.asarray(live, dtype=float)
            if live.ndim != 1 or live.size == 0 or not np.all((live >= 0) & (live <= 1)):
                raise ValueError
    except Exception:  # noqa: BLE001 - any decoding failure is the user's file
        raise UserError(f"{path} is not a leo-craftax result file (write one with "
                        f"`leo-craftax export`)") from None
    return {"config": cfg, "goal_names": names, "seeds": [int(rec["seed"])],
            "extra": {"success": [success.tolist()],
                      **({} if live is None else {"live_success": [live.tolist()]})}}


def load_runs(paths: Sequence[str | Path]) -> dict:
    """One method's runs for ``compare``: the checkpoints in ``paths`` (single-seed files of
    several runs, a stacked multi-seed file, or both) read and verified, or result files written
    by ``leo-craftax export`` (``*.json``), their final per-goal success merged by seed.
    ``{"config", "describe", "goal_names", "success": {seed: [K]}, "paths", "live_success":
    {seed: float} or None}``; ``UserError`` when
    a file is missing, altered or holds no success, when the files were trained with different
    configs (other than the seed) or goals, or repeat a seed."""
    from .compare import describe

    first, success, live = None, {}, {}
    for path in map(Path, paths):
        if not path.is_file():
            raise UserError(f"checkpoint {path} does not exist")
        meta = _read_result(path) if path.suffix == ".json" else _read(path)[0]
        cfg = TrainConfig.from_dict(meta["config"]).to_dict()
        got = _final_success(path, meta)
        if first is None:
            first = {"config": cfg, "goal_names": list(meta["goal_names"]), "path": path}
        elif cfg != first["config"] or list(meta["goal_names"]) != first["goal_names"]:
            diff = sorted(k for k in cfg if cfg[k] != first["config"].get(k)) or ["goal_names"]
            raise UserError(f"{path} and {first['path']} are not runs of one method (they differ "
                            f"in {', '.join(diff)})")
        for seed, row in zip(meta["seeds"], got, strict=True):
            if seed in success:
                raise UserError(f"seed {seed} appears twice among {', '.join(map(str, paths))}")
            success[int(seed)] = row
        curves = _live_curves(meta)
        for i, seed in enumerate(meta["seeds"]):
            live[int(seed)] = None if curves is None else float(curves[i, -1])
    if first is None:
        raise UserError("no checkpoints given")
    return {"config": first["config"], "describe": describe(first["config"]),
            "goal_names": first["goal_names"], "success": success, "paths": [str(p) for p in paths],
            # the authors' live success after the last update, per seed (None: a run before 0.4.3)
            "live_success": live if all(v is not None for v in live.values()) else None}


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


def save_state(path: str | Path, cfg: TrainConfig, seeds: Sequence[int], state: dict) -> Path:
    """Write ``train_seeds``' run ``state`` (``on_chunk``) atomically with a SHA-256: the carry's
    leaves in order (restored against ``train.run_shapes``), the evaluation key, the points and
    metrics so far; config, seeds, updates done, chunk and timings in the metadata."""
    from flax import serialization

    meta_json = dumps_json({"format": STATE_FORMAT, "config": cfg.to_dict(),
                            "seeds": [int(s) for s in seeds], "updates": int(state["updates"]),
                            "chunk": int(state["chunk"]), "timings": state["timings"]}, indent=None)
    leaves = jax.tree.leaves(state["carry"])
    blob = serialization.msgpack_serialize({
        "carry": {str(i): np.asarray(x) for i, x in enumerate(leaves)},
        "r_eval": np.asarray(state["r_eval"]), "success": np.asarray(state["success"]),
        "metrics": jax.tree.map(np.asarray, state["metrics"])})
    data = serialization.msgpack_serialize(
        {"meta": meta_json, "params": blob, "sha256": _digest(meta_json, blob)})
    atomic_write_bytes(Path(path), data)
    return Path(path)


def load_state(path: str | Path, cfg: TrainConfig, seeds: Sequence[int], shapes: Any) -> dict:
    """The run state in ``path`` as ``train_seeds(start=)`` takes it; ``shapes``: the run's
    ``train.run_shapes(cfg, len(seeds))``. ``UserError`` when the file is missing, altered or not
    a run state, or when it was written by another config or other seeds (nothing is guessed)."""
    from flax import serialization

    path = Path(path)
    if not path.is_file():
        raise UserError(f"run state {path} does not exist (nothing to resume)")
    try:
        raw = serialization.msgpack_restore(path.read_bytes())
        meta = json.loads(raw["meta"])
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(meta.get("format"))
        intact = raw["sha256"] == _digest(raw["meta"], raw["params"])
    except Exception:  # noqa: BLE001 - any decoding failure is the user's file
        raise UserError(f"{path} is not a leo-craftax run state") from None
    if not intact:
        raise UserError(f"{path} is corrupt: its checksum does not match its contents")
    want = json.loads(dumps_json(cfg.to_dict(), indent=None))  # the config as save_state wrote it
    diff = sorted(k for k in set(want) | set(meta["config"]) if want.get(k) != meta["config"].get(k))
    if diff:
        raise UserError(f"run state {path} was written by another config (differs in "
                        f"{', '.join(diff)}): resume with the same flags")
    if meta["seeds"] != [int(s) for s in seeds]:
        raise UserError(f"run state {path} holds seeds {meta['seeds']}, not {list(seeds)}")
    body = serialization.msgpack_restore(raw["params"])
    treedef = jax.tree.structure(shapes[0])
    want_leaves = jax.tree.leaves(shapes[0])
    leaves = [body["carry"].get(str(i)) for i in range(len(want_leaves))]
    if len(body["carry"]) != len(want_leaves) or any(
            x is None or x.shape != w.shape or x.dtype != w.dtype
            for x, w in zip(leaves, want_leaves, strict=True)):
        raise UserError(f"run state {path} does not match this run's shapes")
    return {"updates": meta["updates"], "chunk": meta["chunk"], "timings": meta["timings"],
            "carry": jax.tree.unflatten(treedef, leaves), "r_eval": body["r_eval"],
            "success": body["success"], "metrics": body.get("metrics", {})}
