"""The on-disk index (a directory: ``manifest.json`` + ``.npy`` arrays) and MaxSim search on codes.

Layout (format ``crossq-index``, version ``INDEX_VERSION``)::

    manifest.json    format, version, codec config, encoder info, sizes, per-file size + CRC32
    codes.npy        uint8 [n_tokens, bytes_per_token]   the only per-token data
    offsets.npy      int64 [n_docs + 1]                  document boundaries
    doc_ids.json     the documents' ids
    codec.<name>.npy the codec's search metadata (codebooks, rotation, scales...)

No context vector is stored: CrossQ's document context exists only while indexing.
Writes are atomic (a temporary folder renamed into place); opening checks the format, the version
and every file's size and CRC32, so a corrupt or foreign index is a clear error.
"""

from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icml26_shared import UserError

from .codecs import Codec, get_codec
from .config import INDEX_FORMAT, INDEX_VERSION
from .core import doc_index, segment_max
from .train import gather_docs

FP32_BYTES = 4


def _crc(path: Path) -> int:
    crc = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def _npy_header_bytes(path: Path, arr: np.ndarray) -> int:
    return path.stat().st_size - arr.nbytes


def byte_report(n_tokens: int, dim: int, bpt: int, files: dict[str, dict]) -> dict[str, Any]:
    """Bytes per token three ways [P: raw / with metadata / on disk with headers and padding].
    Encoder files (a fitted query/document projection) belong to the model, reported apart."""
    index_files = [f for f in files.values() if f["kind"] != "encoder"]
    total = sum(f["bytes"] for f in index_files)
    payload = sum(f["payload"] for f in index_files)
    return {
        "codes": n_tokens * bpt,
        "metadata": payload - n_tokens * bpt,
        "format_overhead": total - payload,
        "total_files": total,
        "encoder_files": sum(f["bytes"] for f in files.values() if f["kind"] == "encoder"),
        "bytes_per_token_raw": bpt,
        "bytes_per_token_with_metadata": payload / max(n_tokens, 1),
        "bytes_per_token_on_disk": total / max(n_tokens, 1),
        "reduction_vs_fp32_raw": dim * FP32_BYTES / bpt,
        "reduction_vs_fp32_with_metadata": dim * FP32_BYTES * n_tokens / max(payload, 1),
    }


def write_index(out: Path, codes: np.ndarray, offsets: np.ndarray, doc_ids: list[str], codec: Codec,
                encoder: dict[str, Any] | None = None, overwrite: bool = False,
                encoder_arrays: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Write an index atomically; returns the manifest. ``encoder_arrays`` (e.g. a fitted
    projection that queries need too) are stored as ``encoder.<name>.npy``."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists (pass --overwrite to replace it)")
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != codec.bytes_per_token:
        raise ValueError(f"codes must be uint8 [n, {codec.bytes_per_token}], got {codes.dtype} {codes.shape}")
    if len(codes) != int(offsets[-1]) or len(doc_ids) != len(offsets) - 1:
        raise ValueError("codes, offsets and doc_ids disagree")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = {"codes.npy": codes, "offsets.npy": np.asarray(offsets, np.int64)}
    arrays.update({f"codec.{k}.npy": v for k, v in codec.search_state().items()})
    arrays.update({f"encoder.{k}.npy": v for k, v in (encoder_arrays or {}).items()})
    files: dict[str, dict] = {}
    for name, arr in arrays.items():
        np.save(tmp / name, np.ascontiguousarray(arr), allow_pickle=False)
        kind = {"codes.npy": "codes"}.get(name, "encoder" if name.startswith("encoder.") else "metadata")
        files[name] = {"bytes": (tmp / name).stat().st_size, "payload": int(arr.nbytes),
                       "crc32": _crc(tmp / name), "kind": kind}
    ids_text = json.dumps(list(doc_ids))
    (tmp / "doc_ids.json").write_text(ids_text)
    files["doc_ids.json"] = {"bytes": (tmp / "doc_ids.json").stat().st_size,
                             "payload": (tmp / "doc_ids.json").stat().st_size,
                             "crc32": _crc(tmp / "doc_ids.json"), "kind": "metadata"}
    manifest = {
        "format": INDEX_FORMAT, "version": INDEX_VERSION,
        "codec": codec.config(), "encoder": encoder or {},
        "n_docs": len(doc_ids), "n_tokens": int(len(codes)), "dim": codec.dim,
        "files": files,
        "bytes": byte_report(len(codes), codec.dim, codec.bytes_per_token, files),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.replace(old)
        tmp.replace(out)
        shutil.rmtree(old)
    else:
        tmp.replace(out)
    return manifest


def read_manifest(path: Path) -> dict[str, Any]:
    path = Path(path)
    mf = path / "manifest.json"
    if not mf.is_file():
        raise UserError(f"{path} is not a crossq index (no manifest.json)")
    try:
        manifest = json.loads(mf.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{mf} is corrupt: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != INDEX_FORMAT:
        raise UserError(f"{path} is not a crossq index (format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if manifest.get("version") != INDEX_VERSION:
        raise UserError(f"{path} has index format version {manifest.get('version')}, this crossq "
                        f"reads version {INDEX_VERSION}: rebuild it with `crossq index`")
    return manifest


@dataclass
class Index:
    """A loaded index: search-side codec, codes and document boundaries."""

    codec: Codec
    codes: np.ndarray
    offsets: np.ndarray
    doc_ids: list[str]
    manifest: dict[str, Any] = field(default_factory=dict)
    encoder_arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path, verify: bool = True) -> Index:
        path = Path(path)
        manifest = read_manifest(path)
        for name, info in manifest["files"].items():
            f = path / name
            if not f.is_file():
                raise UserError(f"{path}: {name} is missing (corrupt index)")
            if f.stat().st_size != info["bytes"] or (verify and _crc(f) != info["crc32"]):
                raise UserError(f"{path}: {name} does not match its manifest (corrupt index)")
        try:
            codes = np.load(path / "codes.npy", allow_pickle=False)
            offsets = np.load(path / "offsets.npy", allow_pickle=False)
            state = {n[len("codec."):-len(".npy")]: np.load(path / n, allow_pickle=False)
                     for n in manifest["files"] if n.startswith("codec.")}
            doc_ids = json.loads((path / "doc_ids.json").read_text())
            enc = {n[len("encoder."):-len(".npy")]: np.load(path / n, allow_pickle=False)
                   for n in manifest["files"] if n.startswith("encoder.")}
        except (ValueError, OSError, json.JSONDecodeError) as exc:
            raise UserError(f"{path}: cannot read index arrays: {exc}") from None
        codec = get_codec(manifest["codec"]["codec"]).from_config(manifest["codec"])
        codec.load_search_state(state)
        return cls(codec, codes, offsets, doc_ids, manifest, enc)

    def __post_init__(self) -> None:
        self._codes_t = torch.from_numpy(np.ascontiguousarray(self.codes))
        self._off_t = torch.from_numpy(np.asarray(self.offsets, np.int64))
        self._pad = doc_index(self._off_t)
        self._coarse: tuple[Any, list[np.ndarray]] | None = None

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    def scores(self, Q: torch.Tensor, docs: np.ndarray | None = None) -> torch.Tensor:
        """MaxSim of query ``Q [Lq, d]`` on the compressed codes, for ``docs`` (default: all)."""
        if docs is None:
            return segment_max(self.codec.token_scores(Q, self._codes_t), self._off_t, self._pad).sum(0)
        rows, off = gather_docs(self.offsets, docs)
        S = self.codec.token_scores(Q, self._codes_t[torch.from_numpy(rows)])
        return segment_max(S, torch.from_numpy(off)).sum(0)

    def candidates(self, Q: torch.Tensor, nprobe: int, n_list: int | None = None) -> np.ndarray:
        """Candidate documents (PLAID-like [R]): faiss finds each query token's ``nprobe`` nearest
        coarse centroids; candidates are the documents with a token in those cells. The coarse
        assignment is derived from the decoded codes when first needed; nothing extra is stored."""
        if self._coarse is None:
            self._coarse = self._build_coarse(n_list)
        cent_index, lists = self._coarse
        _, cells = cent_index.search(np.ascontiguousarray(Q.numpy(), np.float32), nprobe)
        return np.unique(np.concatenate([lists[c] for c in np.unique(cells) if c >= 0]))

    def _build_coarse(self, n_list: int | None):
        from ._faiss import load_faiss

        faiss = load_faiss()
        n = len(self.codes)
        n_list = n_list or int(min(max(16, 4 * np.sqrt(n)), max(1, n // 8)))
        decoded = np.concatenate([self.codec.decode(self.codes[i:i + 65536]) for i in range(0, n, 65536)])
        km = faiss.Kmeans(decoded.shape[1], n_list, niter=10, seed=1, spherical=True,
                          max_points_per_centroid=64)
        km.train(decoded)
        index = faiss.IndexFlatIP(decoded.shape[1])
        index.add(km.centroids)
        _, assign = index.search(decoded, 1)
        doc_of = np.repeat(np.arange(self.n_docs), np.diff(self.offsets))
        order = np.argsort(assign[:, 0], kind="stable")
        bounds = np.searchsorted(assign[order, 0], np.arange(n_list + 1))
        lists = [np.unique(doc_of[order[bounds[c]:bounds[c + 1]]]) for c in range(n_list)]
        return index, lists

    def search(self, Q: torch.Tensor, k: int = 10, nprobe: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(doc positions, scores)``; ``nprobe > 0`` re-ranks faiss candidates only.
        ``Q`` is a query's token vectors ``[Lq, d]`` (a tensor or a NumPy array)."""
        Q = torch.as_tensor(np.asarray(Q, np.float32)) if not torch.is_tensor(Q) else Q
        with torch.no_grad():
            if nprobe > 0:
                docs = self.candidates(Q, nprobe)
                s = self.scores(Q, docs)
            else:
                docs, s = None, self.scores(Q)
            top = torch.topk(s, min(k, len(s)))
        idx = top.indices.numpy()
        return (idx if docs is None else docs[idx]), top.values.numpy()
