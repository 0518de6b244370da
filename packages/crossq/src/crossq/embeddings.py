"""Encoded corpora on disk (``crossq embed``): fp16 token vectors, reused by ``crossq index
--embeddings`` so that trying another codec or budget never re-encodes the corpus.

A folder holds ``tokens.npy`` (fp16 ``[n_tokens, dim]``, the projected, unit-norm token
vectors an index would compress), ``lengths.npy`` (tokens per document), ``ids.json``,
``projection.npy`` (the encoder's head, when it has one) and ``embed.json`` (format, encoder
info, corpus fingerprint, sizes and a SHA-256 per file). Reading checks all of it; a mismatch
or an edited file is one ``UserError`` line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, dumps_json

FORMAT, VERSION = "crossq-embeddings", 1
FILES = ("tokens.npy", "lengths.npy", "ids.json")


def corpus_fingerprint(ids: list[str], texts: list[str]) -> str:
    h = hashlib.sha256()
    for i, t in zip(ids, texts, strict=True):
        h.update(i.encode() + b"\0" + t.encode() + b"\1")
    return h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def as_stored(vecs: list[np.ndarray]) -> list[np.ndarray]:
    """Token vectors at the precision ``crossq embed`` stores (fp16), as float32: a direct
    ``crossq index`` rounds the same way, so both paths give identical codes."""
    return [np.asarray(v, np.float32).astype(np.float16).astype(np.float32) for v in vecs]


def encode_corpus(texts: list[str], encoder, chunk_docs: int = 256, fit_docs: int = 2000,
                  seed: int = 0, progress=None):
    """Yield ``(lo, hi, vectors)`` per chunk of ``chunk_docs`` documents, fitting the encoder's
    projection first on the first ``fit_docs`` documents (whole chunks) when it has none, as
    ``crossq index`` does. The first item is ``("fit", n_fit, sample vectors)``."""
    n_fit = min(len(texts), -(-fit_docs // chunk_docs) * chunk_docs)
    hidden = [h for lo in range(0, n_fit, chunk_docs)
              for h in encoder.hidden(texts[lo:lo + chunk_docs], is_query=False)]
    if encoder.projection is None and encoder.cfg.dim < encoder.dim:
        encoder.fit_projection_from(hidden, seed)
    sample = as_stored(encoder.project(hidden))
    yield "fit", n_fit, sample
    for lo in range(0, len(texts), chunk_docs):
        hi = min(len(texts), lo + chunk_docs)
        vecs = sample[lo:hi] if hi <= n_fit else as_stored(encoder.encode(texts[lo:hi], is_query=False))
        if progress is not None:
            progress(hi - lo)
        yield lo, hi, vecs


def write_embeddings(out: Path, ids: list[str], texts: list[str], encoder, chunk_docs: int = 256,
                     fit_docs: int = 2000, seed: int = 0, overwrite: bool = False,
                     progress=None) -> dict[str, Any]:
    """Encode ``texts`` and write an embeddings folder (atomically); returns its ``embed.json``."""
    vecs: list[np.ndarray] = []
    for lo, _hi, v in encode_corpus(texts, encoder, chunk_docs, fit_docs, seed, progress):
        if lo != "fit":
            vecs.extend(v)
    X = np.concatenate(vecs).astype(np.float16)
    lengths = np.array([len(v) for v in vecs], np.int64)
    with atomic_dir(Path(out), replace=overwrite,
                    exists_error="{path} exists (pass --overwrite to replace it)") as tmp:
        np.save(tmp / "tokens.npy", X)
        np.save(tmp / "lengths.npy", lengths)
        (tmp / "ids.json").write_text(json.dumps(ids))
        files = list(FILES)
        if encoder.projection is not None:
            np.save(tmp / "projection.npy", np.asarray(encoder.projection, np.float32))
            files.append("projection.npy")
        meta = {"format": FORMAT, "version": VERSION, "encoder": encoder.info(),
                "dim": int(X.shape[1]), "n_docs": len(ids), "n_tokens": int(X.shape[0]),
                "corpus_sha256": corpus_fingerprint(ids, texts), "chunk_docs": chunk_docs,
                "fit_docs": fit_docs, "seed": seed,
                "sha256": {f: _sha256(tmp / f) for f in files}}
        (tmp / "embed.json").write_text(dumps_json(meta, indent=2))
    return meta


@dataclass
class StoredEmbeddings:
    folder: Path
    meta: dict[str, Any]
    ids: list[str]
    X: np.ndarray  # float32 [n_tokens, dim]
    offsets: np.ndarray  # int64 [n_docs + 1]
    projection: np.ndarray | None

    def vectors(self, lo: int, hi: int) -> list[np.ndarray]:
        o = self.offsets
        return [self.X[o[d]:o[d + 1]] for d in range(lo, hi)]

    def check_corpus(self, ids: list[str], texts: list[str]) -> None:
        if corpus_fingerprint(ids, texts) != self.meta["corpus_sha256"]:
            raise UserError(f"{self.folder} was made from another corpus (ids or texts differ)")


def read_embeddings(folder: str | Path) -> StoredEmbeddings:
    """An embeddings folder, every file checked against ``embed.json``."""
    folder = Path(folder)
    meta_file = folder / "embed.json"
    if not meta_file.is_file():
        raise UserError(f"{folder} is not an embeddings folder (no embed.json; see `crossq embed`)")
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        raise UserError(f"{folder}: corrupt embed.json") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise UserError(f"{folder}: not a {FORMAT} v{VERSION} folder")
    sums = meta.get("sha256")
    if not isinstance(sums, dict) or not set(FILES) <= set(sums):
        raise UserError(f"{folder}: embed.json lacks its checksums")
    for name, digest in sums.items():
        path = folder / name
        if name not in (*FILES, "projection.npy") or not path.is_file():
            raise UserError(f"{folder}: {name} is missing")
        if _sha256(path) != digest:
            raise UserError(f"{folder}: {name} does not match its checksum (edited or corrupt)")
    X = np.load(folder / "tokens.npy", allow_pickle=False)
    lengths = np.load(folder / "lengths.npy", allow_pickle=False)
    ids = json.loads((folder / "ids.json").read_text())
    proj = np.load(folder / "projection.npy", allow_pickle=False) if "projection.npy" in sums else None
    if (X.ndim != 2 or X.dtype != np.float16 or X.shape != (meta["n_tokens"], meta["dim"])
            or lengths.shape != (meta["n_docs"],) or len(ids) != meta["n_docs"]
            or int(lengths.sum()) != X.shape[0]):
        raise UserError(f"{folder}: tokens, lengths and ids disagree with embed.json")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return StoredEmbeddings(folder, meta, [str(i) for i in ids], X.astype(np.float32), offsets, proj)


class StoredEncoder:
    """Stands in for the encoder that made an embeddings folder, when indexing from it: its
    info and head go into the index (search loads the real encoder from them); it encodes
    nothing, and refuses a codec model fitted with another head."""

    def __init__(self, emb: StoredEmbeddings):
        from .config import EncoderConfig

        info = emb.meta["encoder"]
        self._info, self.folder = dict(info), emb.folder
        self.projection = emb.projection
        self.projection_kind = info.get("projection", "none")
        self.dim = int(emb.meta["dim"])
        self.cfg = EncoderConfig(**{k: info[k] for k in EncoderConfig.__dataclass_fields__ if k in info})

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def set_projection(self, projection, kind: str) -> None:
        same = (projection is None) == (self.projection is None) and (
            projection is None or np.array_equal(np.asarray(projection, np.float32),
                                                 np.asarray(self.projection, np.float32)))
        if not same:
            raise UserError(f"the codec model was fitted with another encoder head than {self.folder}")

    def check(self, model: str | None, dim: int | None) -> None:
        """Refuse ``--model`` / ``--dim`` that differ from the folder's encoder."""
        if model is not None and model != self._info.get("model"):
            raise UserError(f"{self.folder} was encoded with model {self._info.get('model')!r}, not {model!r}")
        if dim is not None and dim != self.dim:
            raise UserError(f"{self.folder} holds {self.dim}-d token vectors, not --dim {dim}")
