"""``mvprobe index``: copy one layer out of many checkpoints into one memory-mapped cache.

The cache is a folder: ``weights.f32`` (a ``numpy.memmap`` of ``[N, d_H, d_W]`` float32),
``done.u8`` (one byte per checkpoint, set after its row is flushed) and ``meta.json`` (layer,
shape, paths, labels; no timestamps). It is built in ``<out>.partial`` by parallel worker processes
(``concurrent.futures``) and renamed to ``<out>`` when complete; a run stopped by Ctrl-C and
started again fills only the missing rows, so the finished cache is byte-identical to an
uninterrupted one. Each worker opens its file with ``safe_open`` and reads only the named tensor.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import write_json

from .io import (
    WeightDataset,
    _natural,
    check_labels,
    check_new_output,
    multi_hot,
    read_jsonl,
    read_layer,
)

CACHE_FORMAT = "mvprobe-cache"


def _read_row(args: tuple[int, str, str]) -> tuple[int, np.ndarray]:
    i, path, layer = args
    return i, read_layer(path, layer)


def tensor_bytes(path: str | Path, layer: str) -> tuple[int, int]:
    """(bytes ``safe_open`` reads for ``layer`` = 8-byte length + JSON header + the tensor, the
    file's size) of a single-file safetensors checkpoint."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.safetensors"
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    start, end = header[layer]["data_offsets"]
    return 8 + n + (end - start), path.stat().st_size


def build_index(data: str | Path, layer: str, out: str | Path, workers: int = 1,
                progress: Callable[[int, int], None] | None = None,
                stop_after: int | None = None) -> dict:
    """Build (or resume) the cache of ``layer`` for the checkpoints listed in ``data`` (JSONL).
    ``stop_after`` raises ``KeyboardInterrupt`` after that many rows (tests of resumption)."""
    if workers < 1:
        raise UserError(f"--workers must be a positive integer, got {workers}")
    recs = read_jsonl(data)
    out = check_new_output(out)
    work = out.with_name(out.name + ".partial")
    names = sorted({x for r in recs for x in r["labels"]}, key=_natural)
    first = read_layer(recs[0]["path"], layer)
    meta = {"format": CACHE_FORMAT, "layer": layer, "shape": [len(recs), *first.shape],
            "dtype": "float32", "label_names": names,
            "records": [{"path": r["path"], "labels": r["labels"]} for r in recs]}
    if work.exists():
        try:
            old = json.loads((work / "meta.json").read_text())
        except (OSError, json.JSONDecodeError):
            raise UserError(f"{work}: an unreadable partial cache; remove it to start again") from None
        if old != meta:
            raise UserError(f"{work}: a partial cache of other data or another layer; remove it first")
    else:
        work.mkdir()
        write_json(work / "meta.json", meta, indent=1)
    shape = tuple(meta["shape"])
    wfile, dfile = work / "weights.f32", work / "done.u8"
    weights = np.memmap(wfile, dtype=np.float32, mode="r+" if wfile.exists() else "w+", shape=shape)
    done = np.memmap(dfile, dtype=np.uint8, mode="r+" if dfile.exists() else "w+", shape=(shape[0],))
    todo = [(i, recs[i]["path"], layer) for i in range(shape[0]) if not done[i]]
    written = 0

    def store(i: int, X: np.ndarray) -> None:
        nonlocal written
        if X.shape != shape[1:]:
            raise UserError(f"{recs[i]['path']}: layer {layer!r} has shape {X.shape}, expected {shape[1:]}")
        weights[i] = X
        weights.flush()  # the row reaches the file before it is marked done
        done[i] = 1
        done.flush()
        written += 1
        if progress is not None:
            progress(shape[0] - len(todo) + written, shape[0])
        if stop_after is not None and written >= stop_after:
            raise KeyboardInterrupt

    if workers == 1 or len(todo) < 2:
        for job in todo:
            store(*_read_row(job))
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            try:
                for i, X in pool.map(_read_row, todo, chunksize=max(1, len(todo) // (8 * workers))):
                    store(i, X)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    weights.flush()
    os.replace(work, out)
    read, size = tensor_bytes(recs[0]["path"], layer) if Path(recs[0]["path"]).suffix == ".safetensors" \
        else (first.nbytes, first.nbytes)
    return {"out": str(out), "models": shape[0], "shape": list(shape[1:]), "rows_written": written,
            "bytes_read_per_file": read, "file_bytes": size}


def load_cache(path: str | Path, label_names=None, expect_shape=None) -> WeightDataset:
    """A finished cache as a ``WeightDataset`` whose weights are a read-only ``numpy.memmap``."""
    path = Path(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        raise UserError(f"{path}: not an mvprobe cache (no readable meta.json)") from None
    if meta.get("format") != CACHE_FORMAT:
        raise UserError(f"{path}: not an mvprobe cache")
    shape = tuple(meta["shape"])
    if expect_shape is not None and tuple(shape[1:]) != tuple(expect_shape):
        raise UserError(f"{path}: cached layer has shape {shape[1:]}, expected {tuple(expect_shape)}")
    weights = np.memmap(path / "weights.f32", dtype=np.float32, mode="r", shape=shape)
    recs = meta["records"]
    check_labels(recs, label_names, path / "meta.json")
    names = list(label_names) if label_names is not None else meta["label_names"]
    return WeightDataset([r["path"] for r in recs], meta["layer"], weights,
                         multi_hot([r["labels"] for r in recs], names), names)


def load_data(path: str | Path, layer: str | None, label_names=None, expect_shape=None) -> WeightDataset:
    """A JSONL data list (read with ``layer``) or a finished ``index`` cache."""
    path = Path(path)
    if path.is_dir():
        ds = load_cache(path, label_names, expect_shape)
        if layer is not None and ds.layer != layer:
            raise UserError(f"{path}: cache holds layer {ds.layer!r}, not {layer!r}")
        return ds
    if layer is None:
        raise UserError("--layer is required with a JSONL data list")
    return WeightDataset.from_jsonl(path, layer, label_names=label_names, expect_shape=expect_shape)
