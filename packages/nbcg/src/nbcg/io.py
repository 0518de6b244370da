"""Users' formats: JSONL ``{"id", "text", "labels": [...]}`` or CSV ``id,text,labels`` (labels
``|``-separated), either optionally gzipped (``.gz``), read line by line so that every error names its line; atomic writes."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

from icml26_shared import UserError


def read_dataset(path: str | Path, need_text: bool = True) -> list[dict]:
    """Records ``{"id": str, "text": str, "labels": list[str]}``; ``UserError`` on a missing or
    empty file, a malformed line (its number named) or a duplicate id."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    records: list[dict] = []
    try:
        gz = path.suffix.lower() == ".gz"
        opener = gzip.open if gz else open
        with opener(path, "rt", newline="", encoding="utf-8") as fh:
            if (path.name.lower().removesuffix(".gz")).endswith(".csv"):
                rows = enumerate(csv.reader(fh), 1)
                header = next(rows, None)
                if header is None:
                    raise UserError(f"{path}: empty file")
                if [h.strip().lower() for h in header[1]] != ["id", "text", "labels"]:
                    raise UserError(f"{path}:1: CSV header must be id,text,labels")
                for n, row in rows:
                    if not row:
                        continue
                    if len(row) != 3:
                        raise UserError(f"{path}:{n}: expected 3 fields id,text,labels, got {len(row)}")
                    labels = [x for x in row[2].split("|") if x]
                    records.append(_record(path, n, {"id": row[0], "text": row[1], "labels": labels},
                                           need_text))
            else:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise UserError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
                    records.append(_record(path, n, obj, need_text))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except (OSError, EOFError) as exc:   # a corrupt .gz
        raise UserError(f"{path}: unreadable ({type(exc).__name__})") from None
    if not records:
        raise UserError(f"{path}: empty file (no records)")
    seen: set[str] = set()
    for r in records:
        if r["id"] in seen:
            raise UserError(f"{path}:{r['line']}: duplicate id {r['id']!r}")
        seen.add(r["id"])
    return records


def _record(path: Path, n: int, obj: object, need_text: bool) -> dict:
    if not isinstance(obj, dict):
        raise UserError(f"{path}:{n}: expected a JSON object")
    if "id" not in obj or not isinstance(obj["id"], (str, int)) or isinstance(obj["id"], bool):
        raise UserError(f"{path}:{n}: missing or invalid \"id\"")
    text = obj.get("text", "")
    if need_text and not isinstance(text, str):
        raise UserError(f"{path}:{n}: \"text\" must be a string")
    labels = obj.get("labels")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise UserError(f"{path}:{n}: \"labels\" must be a list of strings")
    rec = {"id": str(obj["id"]), "text": text if isinstance(text, str) else "", "labels": labels,
           "line": n}
    if "scores" in obj:
        rec["scores"] = obj["scores"]
    return rec


def refuse_existing(path: str | Path) -> Path:
    path = Path(path)
    if path.exists():
        raise UserError(f"{path} already exists; choose another --out (nothing was written)")
    if not path.parent.is_dir():
        raise UserError(f"{path.parent}: no such folder")
    return path


def write_jsonl(path: str | Path, records: list[dict]) -> Path:
    """Write atomically (``icml26_shared.io.atomic_write_text``); refuses to overwrite."""
    from icml26_shared.io import atomic_write_text, dumps_json

    path = refuse_existing(path)
    return atomic_write_text(path, "".join(dumps_json(r, indent=None) + "\n" for r in records), mkdir=False)
