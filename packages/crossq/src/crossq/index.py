"""The on-disk index (a directory: ``manifest.json`` + ``.npy`` arrays) and MaxSim search on codes.

Layout (format ``crossq-index``, version ``INDEX_VERSION``)::

    manifest.json    format, version, codec config, encoder info, sizes, per-file size + CRC32
    codes.npy        uint8 [n_tokens, bytes_per_token]   the only per-token data
    doc_lengths.npy  uint16 (uint32 past 65535) [n_docs] document lengths
    doc_ids.npy      uint32/int64 [n_docs] when every id is an integer, else doc_ids.json
    codec.<name>.npy the codec's search metadata in fp16 (codebooks, rotation, ...)
    cells.*.npy      k-means candidate cells of codecs without a residual first stage (see cells.py)

No context vector is stored: CrossQ's document context exists only while indexing.
Writes are atomic (a temporary folder renamed into place); opening checks the format, the version
every file's size and CRC32, and the manifest's own SHA-256 (``checksum``), so a corrupt, edited
or foreign index is a clear error.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, dumps_json, to_jsonable, write_json

from .codecs import Codec, get_codec
from .config import INDEX_FORMAT, INDEX_VERSION
from .core import segment_max
from .train import gather_docs

FP32_BYTES = 4
DEFAULT_BATCH = 65536  # token vectors scored at once: memory ~ Lq x batch x 4 bytes [R]
TWO_BYTE_CELLS_FROM = 1 << 20  # tokens from which the coarse cell is a code's first two bytes [R]
KIND_OF = {"codes.npy": "codes", "doc_lengths.npy": "offsets", "doc_ids.npy": "ids",
           "doc_ids.json": "ids"}


def _crc(path: Path) -> int:
    crc = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def _kind(name: str) -> str:
    if name in KIND_OF:
        return KIND_OF[name]
    if name.startswith("cells."):
        return "cells"
    return "encoder" if name.startswith("encoder.") else "codebooks"


def integer_ids(doc_ids: list[str]) -> np.ndarray | None:
    """The ids as one integer table when every id is a canonical non-negative integer (uint32
    when they fit, else int64); None otherwise (then they are stored as JSON)."""
    if not doc_ids or not all(d.isascii() and d.isdigit() and (d == "0" or d[0] != "0") and len(d) < 19
                              for d in doc_ids):
        return None
    a = np.array([int(d) for d in doc_ids], np.int64)
    return a.astype(np.uint32) if a.max() < 2 ** 32 else a


def length_dtype(max_len: int) -> type:
    return np.uint16 if max_len < 2 ** 16 else np.uint32


def byte_report(n_tokens: int, dim: int, bpt: int, files: dict[str, dict]) -> dict[str, Any]:
    """Bytes per token [P: raw / with metadata / on disk], split into ``codes``, ``codebooks``,
    ``offsets`` (per-document lengths), ``ids``, ``cells`` (persisted k-means candidate cells of
    PQ / OPQ / LSQ / fp16 / int8 indexes; 0 otherwise) and ``other`` (``.npy`` headers;
    ``crossq info`` adds the manifest itself). Encoder files (a fitted projection) belong to the model and are
    reported apart."""
    index_files = [f for f in files.values() if f["kind"] != "encoder"]
    payload = {k: sum(f["payload"] for f in index_files if f["kind"] == k)
               for k in ("codes", "codebooks", "offsets", "ids", "cells")}
    total = sum(f["bytes"] for f in index_files)
    n = max(n_tokens, 1)
    with_meta = sum(payload.values())
    return {
        **payload,
        "metadata": with_meta - payload["codes"],
        "format_overhead": total - with_meta,
        "total_files": total,
        "encoder_files": sum(f["bytes"] for f in files.values() if f["kind"] == "encoder"),
        "bytes_per_token_raw": bpt,
        "bytes_per_token_with_metadata": with_meta / n,
        "bytes_per_token_on_disk": total / n,
        "per_token": {**{k: v / n for k, v in payload.items()}, "other": (total - with_meta) / n},
        "reduction_vs_fp32_raw": dim * FP32_BYTES / bpt,
        "reduction_vs_fp32_with_metadata": dim * FP32_BYTES * n_tokens / max(with_meta, 1),
        "reduction_vs_fp16_with_metadata": dim * 2 * n_tokens / max(with_meta, 1),
    }


def size_model(n_tokens: int, n_docs: int, bpt: int, codebook_bytes: int, max_doc_len: int = 512,
               integer_ids_max: int | None = None) -> dict[str, float]:
    """Predicted payload bytes of an index (the layout ``write_index`` produces), for
    extrapolating to corpora too large to build here (MS MARCO: ~600M tokens, 8.8M passages)."""
    id_bytes = 4 if integer_ids_max is None or integer_ids_max < 2 ** 32 else 8
    parts = {"codes": n_tokens * bpt, "codebooks": codebook_bytes,
             "offsets": n_docs * np.dtype(length_dtype(max_doc_len)).itemsize,
             "ids": n_docs * id_bytes}
    total = sum(parts.values())
    return {**parts, "bytes_per_token_with_metadata": total / n_tokens}


def _manifest_checksum(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    # over the values as written (to_jsonable: NaN as null), so a manifest read back checks out
    return hashlib.sha256(json.dumps(to_jsonable(body), sort_keys=True).encode()).hexdigest()


def write_index(out: Path, codes: np.ndarray, offsets: np.ndarray, doc_ids: list[str], codec: Codec,
                encoder: dict[str, Any] | None = None, overwrite: bool = False,
                encoder_arrays: dict[str, np.ndarray] | None = None,
                cells: bool = True) -> dict[str, Any]:
    """Write an index atomically; returns the manifest. ``encoder_arrays`` (e.g. a fitted
    projection that queries need too) are stored as ``encoder.<name>.npy``. For a codec without
    first-stage cells (``coarse_cells() is None``), ``cells`` fits k-means candidate cells now and
    stores them (``cells.py``); without them such an index is searched exhaustively only."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists (pass --overwrite to replace it)")
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != codec.bytes_per_token:
        raise ValueError(f"codes must be uint8 [n, {codec.bytes_per_token}], got {codes.dtype} {codes.shape}")
    if len(codes) != int(offsets[-1]) or len(doc_ids) != len(offsets) - 1:
        raise ValueError("codes, offsets and doc_ids disagree")
    doc_ids = [str(d) for d in doc_ids]
    lengths = np.diff(np.asarray(offsets, np.int64))
    with atomic_dir(out, replace=overwrite,
                    exists_error="{path} exists (pass --overwrite to replace it)") as tmp:
        arrays = {"codes.npy": codes,
                  "doc_lengths.npy": lengths.astype(length_dtype(int(lengths.max(initial=0))))}
        int_ids = integer_ids(doc_ids)
        if int_ids is not None:
            arrays["doc_ids.npy"] = int_ids
        arrays.update({f"codec.{k}.npy": v for k, v in codec.search_state().items()})
        arrays.update({f"encoder.{k}.npy": v for k, v in (encoder_arrays or {}).items()})
        if cells and codec.coarse_cells() is None and len(codes):
            from .cells import fit_cells

            centroids, assign = fit_cells(codec, codes)
            arrays["cells.centroids.npy"] = centroids.astype(np.float16)
            arrays["cells.assign.npy"] = assign
        files: dict[str, dict] = {}
        for name, arr in arrays.items():
            np.save(tmp / name, np.ascontiguousarray(arr), allow_pickle=False)
            files[name] = {"bytes": (tmp / name).stat().st_size, "payload": int(arr.nbytes),
                           "crc32": _crc(tmp / name), "kind": _kind(name)}
        if int_ids is None:
            (tmp / "doc_ids.json").write_text(dumps_json(doc_ids, indent=None, separators=(",", ":")))
            size = (tmp / "doc_ids.json").stat().st_size
            files["doc_ids.json"] = {"bytes": size, "payload": size,
                                     "crc32": _crc(tmp / "doc_ids.json"), "kind": "ids"}
        manifest = {
            "format": INDEX_FORMAT, "version": INDEX_VERSION,
            "codec": codec.config(), "encoder": encoder or {},
            "n_docs": len(doc_ids), "n_tokens": int(len(codes)), "dim": codec.dim,
            "files": files,
            "bytes": byte_report(len(codes), codec.dim, codec.bytes_per_token, files),
        }
        manifest["checksum"] = _manifest_checksum(manifest)
        write_json(tmp / "manifest.json", manifest, indent=2)
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
    if manifest.get("checksum") != _manifest_checksum(manifest):
        raise UserError(f"{mf} was modified after it was written (checksum mismatch): "
                        "rebuild the index with `crossq index`")
    return manifest


def disk_report(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Bytes per token of an index as it is on disk, the manifest included in ``other``."""
    b = manifest["bytes"]
    n = max(manifest["n_tokens"], 1)
    extra = (Path(path) / "manifest.json").stat().st_size
    per = dict(b["per_token"])
    per["other"] = per["other"] + extra / n
    return {"n_tokens": manifest["n_tokens"], "n_docs": manifest["n_docs"],
            "codec": manifest["codec"]["codec"], "bytes_per_token_raw": b["bytes_per_token_raw"],
            "bytes_per_token_with_metadata": b["bytes_per_token_with_metadata"],
            "bytes_per_token_on_disk": b["bytes_per_token_on_disk"] + extra / n,
            "bytes_per_token": per,
            "reduction_vs_fp16_with_metadata": b["reduction_vs_fp16_with_metadata"]}


@dataclass
class Index:
    """A loaded index: search-side codec, codes and document boundaries."""

    codec: Codec
    codes: np.ndarray
    offsets: np.ndarray
    doc_ids: list[str]
    manifest: dict[str, Any] = field(default_factory=dict)
    encoder_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    #: persisted k-means cells ``(centroids [n_cells, d], assign [n_tokens])`` (codecs without
    #: first-stage cells); an index built in memory without them fits them on first use
    cells: tuple[np.ndarray, np.ndarray] | None = None

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
            # memory-mapped (copy-on-write): pages are read as search touches them
            codes = np.load(path / "codes.npy", allow_pickle=False, mmap_mode="c")
            lengths = np.load(path / "doc_lengths.npy", allow_pickle=False)
            offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
            state = {n[len("codec."):-len(".npy")]: np.load(path / n, allow_pickle=False)
                     for n in manifest["files"] if n.startswith("codec.")}
            if "doc_ids.npy" in manifest["files"]:
                doc_ids = [str(int(i)) for i in np.load(path / "doc_ids.npy", allow_pickle=False)]
            else:
                doc_ids = json.loads((path / "doc_ids.json").read_text())
            enc = {n[len("encoder."):-len(".npy")]: np.load(path / n, allow_pickle=False)
                   for n in manifest["files"] if n.startswith("encoder.")}
            cells = None
            if "cells.centroids.npy" in manifest["files"]:
                cells = (np.load(path / "cells.centroids.npy", allow_pickle=False).astype(np.float32),
                         np.load(path / "cells.assign.npy", allow_pickle=False, mmap_mode="r"))
        except (ValueError, OSError, json.JSONDecodeError) as exc:
            raise UserError(f"{path}: cannot read index arrays: {exc}") from None
        codec = get_codec(manifest["codec"]["codec"]).from_config(manifest["codec"])
        codec.load_search_state(state)
        return cls(codec, codes, offsets, doc_ids, manifest, enc, cells)

    def __post_init__(self) -> None:
        self._codes_t = torch.from_numpy(np.ascontiguousarray(self.codes))
        self._off_t = torch.from_numpy(np.asarray(self.offsets, np.int64))
        self._blocks: dict[int, list[tuple[int, int]]] = {}
        self._coarse: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    def blocks(self, batch: int) -> list[tuple[int, int]]:
        """Document ranges ``[lo, hi)`` of at most ``batch`` tokens each (a longer document is a
        block of its own)."""
        if batch not in self._blocks:
            out, lo, off = [], 0, self.offsets
            while lo < self.n_docs:
                hi = int(np.searchsorted(off, off[lo] + batch, side="right")) - 1
                hi = max(hi, lo + 1)
                out.append((lo, min(hi, self.n_docs)))
                lo = out[-1][1]
            self._blocks[batch] = out
        return self._blocks[batch]

    def scores(self, Q: torch.Tensor, docs: np.ndarray | None = None,
               batch: int = DEFAULT_BATCH) -> torch.Tensor:
        """MaxSim of query ``Q [Lq, d]`` on the compressed codes, for ``docs`` (default: all),
        scoring at most ``batch`` token vectors at a time (memory ~ ``Lq x batch`` floats; with
        ``docs``, groups of whole candidates of at most ``batch`` tokens)."""
        return self._rows(Q, docs, batch).sum(0)

    def cell_bytes(self) -> int:
        """How many leading code bytes name a token's coarse cell: 2 (65,536 cells, the first two
        additive stages) from ``TWO_BYTE_CELLS_FROM`` tokens on for residual-style codecs with at
        least 2 bytes, else 1 (256 cells); 0 for codecs without first-stage cells."""
        if self.codec.coarse_cells() is None:
            return 0
        two = self.codec.bytes_per_token >= 2 and len(self.codes) >= TWO_BYTE_CELLS_FROM
        return 2 if two else 1

    def candidates(self, Q: torch.Tensor, nprobe: int, cell_bytes: int | None = None) -> np.ndarray:
        """Candidate documents (PLAID-style [R]): each query token's ``nprobe`` best non-empty
        coarse cells; candidates are the documents with a token in those cells.

        For residual-style codecs (CrossQ, token-wise, RQ, ColBERTv2 residual) a token's cell is
        its first code byte (256 cells) or, on large indexes, its first two bytes (65,536 cells
        whose centroids are ``C_0[a] + C_1[b]``, scored as ``q.C_0[a] + q.C_1[b]``): the cells are
        part of the codes, so nothing extra is stored and nothing is trained at open; the
        cell -> documents lists are derived from the codes on first use (one sort). Other codecs
        use the k-means cells persisted in the index at write time (``cells.py``); an index
        opened from disk without them refuses ``nprobe`` instead of re-clustering."""
        cb = self.cell_bytes() if cell_bytes is None else int(cell_bytes)
        if cb not in (0, 1, 2) or (cb == 2 and self.codec.bytes_per_token < 2):
            raise UserError(f"cell_bytes {cb}: must be 1 or 2 (and at most the bytes per token)")
        if cb and self.codec.coarse_cells() is None:
            raise UserError(f"codec {self.codec.name!r} has no first-stage cells (cell_bytes 0)")
        if cb not in self._coarse:
            self._coarse[cb] = self._build_coarse(cb)
        books, ptr = self._coarse[cb][0], self._coarse[cb][2]
        Q = torch.as_tensor(np.asarray(Q, np.float32))
        sims = Q @ torch.from_numpy(books[0]).T  # [Lq, cells of stage 0]
        if cb == 2:
            sims = (sims[:, :, None] + (Q @ torch.from_numpy(books[1]).T)[:, None, :]).reshape(len(Q), -1)
        empty = torch.from_numpy(ptr[1:] == ptr[:-1])
        sims = sims.masked_fill(empty[None, :], float("-inf"))
        n_live = int((~empty).sum())
        cells = np.unique(sims.topk(min(nprobe, n_live), dim=1).indices.numpy())
        docs = self._coarse[cb][1]
        hit = [docs[ptr[c]:ptr[c + 1]] for c in cells]
        return np.unique(np.concatenate(hit)) if hit else np.zeros(0, np.int64)

    def _build_coarse(self, cb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(books [levels, cells, d], docs, ptr)``: the documents of cell ``c`` are
        ``docs[ptr[c]:ptr[c + 1]]`` (sorted, unique)."""
        from .cells import cell_lists, fit_cells

        if cb:
            books = np.ascontiguousarray(self.codec.codebooks()[:cb], np.float32)  # [0] = coarse_cells()
            assign = self.codes[:, 0].astype(np.int64)
            if cb == 2:
                assign = assign * books.shape[1] + self.codes[:, 1]
        else:
            if self.cells is None:
                if self.manifest:
                    raise UserError(f"this {self.codec.name} index has no persisted candidate cells "
                                    "(written without them): search it without --nprobe, or rebuild "
                                    "it with `crossq index`")
                self.cells = fit_cells(self.codec, np.asarray(self.codes))  # in-memory index only
            books, assign = self.cells[0][None], self.cells[1]
        return books, *cell_lists(assign, self.offsets, books.shape[1] ** max(cb, 1))

    def search(self, Q: torch.Tensor, k: int = 10, nprobe: int = 0,
               batch: int = DEFAULT_BATCH, cell_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ``(doc positions, scores)``; ``nprobe > 0`` scores the candidates only.
        ``Q`` is a query's token vectors ``[Lq, d]`` (a tensor or a NumPy array)."""
        Q = torch.as_tensor(np.asarray(Q, np.float32)) if not torch.is_tensor(Q) else Q
        with torch.no_grad():
            if nprobe > 0:
                docs = self.candidates(Q, nprobe, cell_bytes)
                s = self.scores(Q, docs, batch)
            else:
                docs, s = None, self.scores(Q, batch=batch)
            top = torch.topk(s, min(k, len(s)))
        idx = top.indices.numpy()
        return (idx if docs is None else docs[idx]), top.values.numpy()

    def search_many(self, Qs, k: int = 10, nprobe: int = 0, batch: int = DEFAULT_BATCH,
                    cell_bytes: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """``search`` for several queries at once: their tokens are stacked into one ``[sum Lq,
        d]`` matrix, so each block of codes is read (and, for codecs without lookup tables,
        decoded) once for all of them. With ``nprobe > 0`` the union of the queries' candidates
        is scored and each query keeps only its own candidates, so the result is
        ``[search(Q) for Q in Qs]`` (tested) whatever the grouping. Blocks hold ``batch //
        len(Qs)`` token vectors (at least one document), so memory stays that of one query
        (``Lq x batch`` floats) and the score buffers stay cache-sized."""
        Qs = [torch.as_tensor(np.asarray(Q, np.float32)) if not torch.is_tensor(Q) else Q for Q in Qs]
        if not Qs:
            return []
        bounds = np.concatenate([[0], np.cumsum([len(Q) for Q in Qs])])
        with torch.no_grad():
            own = None
            if nprobe > 0:
                own = [self.candidates(Q, nprobe, cell_bytes) for Q in Qs]
                docs = np.unique(np.concatenate(own)) if own else np.zeros(0, np.int64)
            else:
                docs = None
            S = self._rows(torch.cat(Qs), docs, max(1, batch // len(Qs)))  # [sum Lq, n docs scored]
            out = []
            for i in range(len(Qs)):
                s = S[bounds[i]:bounds[i + 1]].sum(0)
                if own is not None:
                    pos = np.searchsorted(docs, own[i])
                    s, d = s[torch.from_numpy(pos)], own[i]
                else:
                    d = None
                top = torch.topk(s, min(k, len(s)))
                j = top.indices.numpy()
                out.append(((j if d is None else d[j]), top.values.numpy()))
        return out

    def _rows(self, Q: torch.Tensor, docs: np.ndarray | None, batch: int) -> torch.Tensor:
        """Per query token, the max over each document's tokens: ``[Lq, n docs]`` (all
        documents, or ``docs`` in that order); ``scores`` is its column sum for one query."""
        score = self.codec.scorer(Q)
        out = []
        if docs is None:
            for lo, hi in self.blocks(batch):
                a, b = int(self.offsets[lo]), int(self.offsets[hi])
                out.append(segment_max(score(self._codes_t[a:b]), self._off_t[lo:hi + 1] - a))
        else:
            docs = np.asarray(docs, np.int64)
            ends = np.cumsum(self.offsets[docs + 1] - self.offsets[docs])
            i = 0
            while i < len(docs):
                j = max(i + 1, int(np.searchsorted(ends, (ends[i - 1] if i else 0) + batch, side="right")))
                rows, off = gather_docs(self.offsets, docs[i:j])
                out.append(segment_max(score(self._codes_t[torch.from_numpy(rows)]), torch.from_numpy(off)))
                i = j
        return torch.cat(out, 1) if out else torch.zeros(len(Q), 0)
