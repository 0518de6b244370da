"""Files users keep: distilled sets (safetensors, with memory, teacher and learner in the metadata)
and sweep runs (``RUN/spec.json`` + ``RUN/rows.jsonl``). Every write goes to a temporary file in
the same folder and is renamed into place, so a crash never leaves a half-written file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from icml26_shared import UserError
from icml26_shared.io import atomic_write_bytes, dumps_json
from icml26_shared.io import write_json as shared_write_json

FORMAT = "dd-multiindex/distilled-set/1"


def check_new_file(path: Path, force: bool = False) -> Path:
    path = Path(path)
    if path.exists() and not force:
        raise UserError(f"{path} already exists (pass --force to replace it)")
    if not path.absolute().parent.is_dir():
        raise UserError(f"the folder of {path} does not exist")
    return path


def save_distilled(path: Path, ds, force: bool = False) -> Path:
    """Write a ``DistilledSet`` as safetensors: x1, y1 (and y2) plus JSON metadata."""
    from safetensors.torch import save

    path = check_new_file(path, force)
    tensors = {"x1": ds.x1.contiguous(), "y1": ds.y1.contiguous()}
    if ds.y2 is not None:
        tensors["y2"] = ds.y2.contiguous()
    meta = {"format": FORMAT, "seed2": str(ds.seed2), "memory": str(ds.memory),
            "memory_stage1": str(ds.memory_stage1), "memory_stage2": str(ds.memory_stage2),
            **{k: dumps_json(v, indent=None) for k, v in ds.meta.items()}}
    atomic_write_bytes(path, save(tensors, metadata=meta))
    return path


def load_distilled(path: Path):
    """Read a distilled set written by ``save_distilled``; a missing or corrupt file is a UserError."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    from .core import DistilledSet

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    raw = path.read_bytes()
    try:
        tensors = load(raw)
        n = int.from_bytes(raw[:8], "little")
        meta = json.loads(raw[8:8 + n]).get("__metadata__", {})
    except (SafetensorError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not a safetensors file ({str(exc).splitlines()[0] if str(exc) else 'corrupt'})") from None
    if meta.get("format") != FORMAT or "x1" not in tensors or "y1" not in tensors:
        raise UserError(f"{path} is not a dd-multiindex distilled set (no {FORMAT} metadata)")
    try:
        extra = {k: json.loads(v) for k, v in meta.items()
                 if k not in ("format", "seed2", "memory", "memory_stage1", "memory_stage2")}
        ds = DistilledSet(tensors["x1"], tensors["y1"], tensors.get("y2"), int(meta["seed2"]), extra)
    except (KeyError, ValueError) as exc:
        raise UserError(f"{path}: corrupt metadata ({exc})") from None
    if ds.x1.ndim != 2 or ds.y1.shape != (ds.x1.shape[0],):
        raise UserError(f"{path}: x1 {tuple(ds.x1.shape)} and y1 {tuple(ds.y1.shape)} do not match")
    if "teacher" not in extra or "learner" not in extra:
        raise UserError(f"{path}: metadata lacks the teacher or the learner")
    return ds


# --- sweep runs ---------------------------------------------------------------------------------

def read_rows(run: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Complete rows of ``RUN/rows.jsonl``; a torn last line (a killed writer) is dropped, and with
    ``repair`` cut from the file so that appending continues on a line boundary."""
    path = Path(run) / "rows.jsonl"
    if not path.is_file():
        return []
    data = path.read_bytes()
    rows, good = [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            good += len(line) + 1
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good += len(line) + 1
    good = min(good, len(data))
    if repair and good < len(data):
        atomic_write_bytes(path, data[:good])
    return rows


def append_row(run: Path, row: dict[str, Any]) -> None:
    """Append one complete row (a single write of one line, flushed and fsynced)."""
    line = (dumps_json(row, indent=None, sort_keys=True) + "\n").encode()
    with open(Path(run) / "rows.jsonl", "ab") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_spec(run: Path) -> dict[str, Any] | None:
    path = Path(run) / "spec.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc})") from None


def write_json(path: Path, obj: Any) -> None:
    shared_write_json(path, obj, indent=2, sort_keys=True)


def load_run(run: Path) -> list[dict[str, Any]]:
    run = Path(run)
    if not run.is_dir() or read_spec(run) is None:
        raise UserError(f"{run} is not a sweep run (no spec.json)")
    rows = read_rows(run)
    if not rows:
        raise UserError(f"{run} has no complete rows yet")
    return sorted(rows, key=lambda r: (r["d"], r["r"], r["L"], r["seed"]))
