"""Users' formats: paired views as ``.npy`` or CSV (header; ``id_column`` aligns rows), texts as
``.txt`` (one a line) or JSONL (``"text"``), sentence-transformers embeddings cached by content
hash. Every write goes through ``icml26_shared.io`` (a temporary file or folder that is then
renamed): an error leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, atomic_write_bytes, write_json


def _read_csv(path: Path, id_column: str | None) -> tuple[np.ndarray, list[str] | None]:
    """A CSV with a header row, read by ``numpy.loadtxt`` (quoted fields allowed); the id column,
    when named, is kept as strings and every other column must be numeric."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        table = np.loadtxt(path, delimiter=delimiter, dtype=str, quotechar='"', ndmin=2,
                           encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: cannot read as CSV ({str(exc).splitlines()[0]})") from None
    if table.shape[0] < 2:
        raise UserError(f"{path}: a CSV needs a header row and at least one data row")
    header, body = [h.strip() for h in table[0]], table[1:]
    ids = None
    if id_column is not None:
        if id_column not in header:
            raise UserError(f"{path}: no column {id_column!r} (columns: {', '.join(header[:8])}...)")
        j = header.index(id_column)
        ids = [str(v) for v in body[:, j]]
        if len(set(ids)) != len(ids):
            raise UserError(f"{path}: column {id_column!r} has duplicate ids")
        body = np.delete(body, j, axis=1)
    if body.shape[1] == 0:
        raise UserError(f"{path}: no feature columns")
    try:
        x = body.astype(np.float64)
    except ValueError as exc:
        raise UserError(f"{path}: non-numeric value ({exc}); name an id column with --id-column") from None
    return x, ids


def load_view(path: str | Path, id_column: str | None = None) -> tuple[np.ndarray, list[str] | None]:
    """One view as (rows × features float array, row ids or None)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            x = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: not a readable .npy file ({exc})") from None
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise UserError(f"{path}: expected a 2-D array, got shape {x.shape}")
        try:
            x = x.astype(np.float64)
        except (TypeError, ValueError):
            raise UserError(f"{path}: array of dtype {x.dtype} is not numeric") from None
        ids = None
    elif suffix in (".csv", ".tsv", ".txt"):
        x, ids = _read_csv(path, id_column)
    else:
        raise UserError(f"{path}: unsupported file type {suffix!r} (use .npy or .csv)")
    if x.shape[0] == 0:
        raise UserError(f"{path} has no rows")
    if not np.isfinite(x).all():
        raise UserError(f"{path} contains NaN or infinite values")
    return x, ids


def load_views(paths: list[str | Path], id_column: str | None = None,
               min_rows: int = 1) -> list[np.ndarray]:
    """Paired views, rows aligned by ``id_column`` when given (the intersection of ids, in the
    first file's order), else required to have equal row counts."""
    loaded = [load_view(p, id_column) for p in paths]
    if id_column is not None and all(ids is not None for _, ids in loaded):
        common = set(loaded[0][1])
        for _, ids in loaded[1:]:
            common &= set(ids)
        order = [i for i in loaded[0][1] if i in common]
        if not order:
            raise UserError(f"the views share no ids in column {id_column!r}")
        views = []
        for x, ids in loaded:
            pos = {v: k for k, v in enumerate(ids)}
            views.append(x[[pos[i] for i in order]])
    else:
        views = [x for x, _ in loaded]
        counts = [len(x) for x in views]
        if len(set(counts)) != 1:
            detail = ", ".join(f"{p}: {c}" for p, c in zip(paths, counts))
            raise UserError(f"views have different row counts ({detail}); align them with --id-column")
    if len(views[0]) < min_rows:
        raise UserError(f"only {len(views[0])} rows; the estimator needs at least {min_rows} "
                        "(4 × latent dim): lower --latent-dim or give more rows")
    return views


def load_texts(path: str | Path) -> list[str]:
    """Texts from a .txt file (one per line) or a JSONL file (one object with "text" a line)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read as UTF-8 text ({exc})") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        texts = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise UserError(f"{path}:{i}: not valid JSON") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise UserError(f"{path}:{i}: each line needs a string field \"text\"")
            texts.append(obj["text"])
    else:
        texts = [t for t in lines if t.strip()]
    if not texts:
        raise UserError(f"{path} has no texts")
    return texts


def resolve_model_dir(model: str | Path | None) -> Path:
    if model is None:
        from icml26_shared.data import minilm_dir

        return minilm_dir()
    path = Path(model)
    if not path.is_dir():
        raise UserError(f"model directory {path} does not exist")
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise UserError(f"{path} is not a sentence-transformers / Hugging Face model folder "
                        "(no config.json or modules.json)")
    return path


def embed_texts(texts: list[str], model_dir: Path, batch_size: int = 64,
                cache: bool = True) -> tuple[np.ndarray, bool]:
    """``SentenceTransformer(model_dir).encode(texts)`` (float32), cached under
    ``cache_dir("figuro")`` by a hash of the model folder's files and the texts. Returns
    (embeddings, hit)."""
    from icml26_shared.data import cache_dir

    h = hashlib.sha256()
    for f in sorted(model_dir.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(model_dir)).encode())
            h.update(str(f.stat().st_size).encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    key = cache_dir("figuro") / f"emb-{h.hexdigest()[:24]}.npy"
    if cache and key.is_file():
        return np.load(key), True
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging

    for name in ("sentence_transformers", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise UserError("sentence-transformers is not installed: `pip install figuro[text]`") from None
    model = SentenceTransformer(str(model_dir), device="cpu")
    emb = np.asarray(model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                                  show_progress_bar=False), dtype=np.float32)
    if cache:
        save_npy(key, emb, force=True)
    return emb, False


# --- atomic writes -------------------------------------------------------------------------

def check_new(path: str | Path, force: bool = False) -> Path:
    """Refuse an existing output (unless ``force``) or a missing parent folder, before any work."""
    path = Path(path)
    if path.exists() and not force:
        raise UserError(f"{path} already exists (pass --force to replace it)")
    if not path.absolute().parent.is_dir():
        raise UserError(f"parent folder of {path} does not exist")
    return path


def save_npy(path: str | Path, array: np.ndarray, force: bool = False) -> Path:
    """``np.save`` into memory, then ``icml26_shared.io.atomic_write_bytes`` (temp file + rename)."""
    path = check_new(path, force)
    buf = io.BytesIO()
    np.save(buf, array)
    return atomic_write_bytes(path, buf.getvalue(), mkdir=False)


def save_json(path: str | Path, obj, force: bool = False) -> Path:
    path = check_new(path, force)
    return write_json(path, obj, indent=2, mkdir=False)


def save_dir(path: str | Path, files: dict[str, object], force: bool = False) -> Path:
    """Write a folder of .npy arrays and .json objects into a temporary folder, then rename it
    (``icml26_shared.io.atomic_dir``: ``force`` replaces only a folder a run wrote)."""
    path = check_new(path, force)
    with atomic_dir(path, replace=force,
                    exists_error="{path} already exists (pass --force to replace it)") as tmp:
        for name, obj in files.items():
            if name.endswith(".npy"):
                with open(tmp / name, "wb") as f:
                    np.save(f, obj)
            else:
                write_json(tmp / name, obj, indent=2)
    return path
