"""Building an index from text: encode in chunks, fit (or load) the codec, compress, assemble.

Resumable and memory-bounded: work happens in ``.<out>.partial/`` next to ``out``; the fitted
projection and codec are saved there first, then each chunk's codes (atomically). A rerun with the
same corpus and settings skips finished chunks; anything else starts afresh. ``out`` appears only
when complete (atomic rename), so an interrupted run leaves no half-written index.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, atomic_write_bytes, dumps_json

from .codecs import Codec, get_codec
from .embeddings import as_stored
from .encoder import LateInteractionEncoder
from .index import write_index

PARTIAL_VERSION = 1



def fit_sample(texts, encoder, embeddings, fit_docs: int, chunk_docs: int, seed: int) -> list[np.ndarray]:
    """The codec's fit sample: the first whole chunks of ``fit_docs`` documents, read from stored
    embeddings or encoded (fitting the PCA head on them when the encoder has none), as stored."""
    n_fit = min(len(texts), -(-fit_docs // chunk_docs) * chunk_docs)  # whole chunks
    if embeddings is not None:
        return embeddings.vectors(0, n_fit)
    hidden = [h for lo in range(0, n_fit, chunk_docs)
              for h in encoder.hidden(texts[lo:lo + chunk_docs], is_query=False)]
    if encoder.projection is None and encoder.cfg.dim < encoder.dim:
        encoder.fit_projection_from(hidden, seed)
    return as_stored(encoder.project(hidden))


def chunk_vectors(texts, lo: int, hi: int, sample, encoder, embeddings) -> list[np.ndarray]:
    """Documents ``lo:hi`` as stored vectors: from the fit sample when it holds them, else from
    stored embeddings, else encoded."""
    if hi <= len(sample):
        return sample[lo:hi]
    if embeddings is not None:
        return embeddings.vectors(lo, hi)
    return as_stored(encoder.encode(texts[lo:hi], is_query=False))

def _atomic_save_npz(path: Path, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue(), mkdir=False)


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def offsets_of(vectors: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(v) for v in vectors])]).astype(np.int64)


# --- codec model folders (crossq train --out DIR) ------------------------------------------------


def save_codec_model(folder: Path, codec: Codec, encoder: LateInteractionEncoder,
                     overwrite: bool = False) -> None:
    """Write a codec model folder atomically; ``overwrite`` replaces an earlier one (only a
    folder a run wrote: ``icml26_shared.io.atomic_dir``)."""
    with atomic_dir(Path(folder), replace=overwrite,
                    exists_error="{path} exists (pass --overwrite to replace it)") as tmp:
        (tmp / "codec.json").write_text(dumps_json({"format": "crossq-codec", "version": 1,
                                                    "codec": codec.config(), "encoder": encoder.info()},
                                                   indent=2))
        _atomic_save_npz(tmp / "codec_model.npz", **codec.model_state())
        if encoder.projection is not None:
            np.save(tmp / "projection.npy", encoder.projection)


def load_codec_model(folder: Path, encoder: LateInteractionEncoder | None = None) -> Codec:
    """A fitted codec; sets ``encoder``'s projection to the one it was fitted with."""
    folder = Path(folder)
    meta = folder / "codec.json"
    if not meta.is_file():
        raise UserError(f"{folder} is not a codec model folder (no codec.json; see `crossq train`)")
    try:
        info = json.loads(meta.read_text())
        arrays = _load_npz(folder / "codec_model.npz")
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}: corrupt codec model ({exc})") from None
    if info.get("format") != "crossq-codec" or info.get("version") != 1:
        raise UserError(f"{folder}: unsupported codec model format/version")
    codec = get_codec(info["codec"]["codec"]).from_config(info["codec"])
    codec.load_model_state(arrays)
    if encoder is not None:
        proj = folder / "projection.npy"
        encoder.set_projection(np.load(proj) if proj.is_file() else None,
                               info["encoder"].get("projection", "none"))
        if encoder.dim != codec.dim:
            raise UserError(f"{folder}: codec dim {codec.dim} != encoder dim {encoder.dim}")
    return codec


# --- indexing -------------------------------------------------------------------------------------


def fingerprint(ids: list[str], texts: list[str], settings: dict[str, Any]) -> str:
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for i, t in zip(ids, texts, strict=True):
        h.update(i.encode() + b"\0" + t.encode() + b"\1")
    return h.hexdigest()


def build_index(ids: list[str], texts: list[str], out: Path, encoder: LateInteractionEncoder,
                codec_name: str = "crossq", bytes_per_token: int | None = None,
                codec_params: dict[str, Any] | None = None, codec_model: Path | None = None,
                chunk_docs: int = 256, fit_docs: int = 2000, seed: int = 0,
                overwrite: bool = False, progress: bool = False, cells: bool = True,
                _stop_after_chunks: int | None = None, embeddings=None) -> dict[str, Any]:
    """Index ``texts`` into ``out``; returns the manifest. ``embeddings``: a
    ``crossq.embeddings.StoredEmbeddings`` of the same corpus, read instead of encoding (then
    ``encoder`` is its ``StoredEncoder``). Token vectors are used at fp16 precision either way. The codec is fitted on the first
    ``fit_docs`` documents (rounded up to whole chunks), whose vectors are reused for their
    chunks. ``_stop_after_chunks`` simulates an interruption (tests). An interruption
    (``KeyboardInterrupt``, a killed process) keeps ``.<out>.partial/`` for resuming; any error
    removes it, so that nothing is left behind."""
    out = Path(out)
    part = out.with_name(f".{out.name}.partial")
    try:
        return _build_index(ids, texts, out, encoder, codec_name, bytes_per_token, codec_params,
                            codec_model, chunk_docs, fit_docs, seed, overwrite, progress,
                            cells, _stop_after_chunks, embeddings)
    except Exception:
        shutil.rmtree(part, ignore_errors=True)
        raise


def _build_index(ids, texts, out: Path, encoder, codec_name, bytes_per_token, codec_params,
                 codec_model, chunk_docs, fit_docs, seed, overwrite, progress, cells,
                 _stop_after_chunks, embeddings=None) -> dict[str, Any]:
    from tqdm.auto import tqdm

    if out.exists() and not overwrite:
        raise UserError(f"{out} exists (pass --overwrite to replace it)")
    cls = get_codec(codec_name)
    if codec_model is None:
        dim = encoder.dim if encoder.projection is not None else min(encoder.cfg.dim, encoder.dim)
        cls.check_budget(dim, bytes_per_token)  # fail before any work
    settings = {"codec": codec_name, "bpt": bytes_per_token, "params": codec_params or {},
                "codec_model": str(codec_model), "chunk": chunk_docs, "fit_docs": fit_docs,
                "seed": seed, "encoder": encoder.info(), "v": PARTIAL_VERSION}
    fp = fingerprint(ids, texts, settings)
    part = out.with_name(f".{out.name}.partial")
    state_file = part / "state.json"
    resumed = state_file.is_file() and json.loads(state_file.read_text()).get("fingerprint") == fp
    sample: list[np.ndarray] = []  # the fit sample's vectors, reused for its chunks
    if resumed:
        codec = load_codec_model(part / "codec", encoder)
    else:
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        if codec_model is not None:
            codec = load_codec_model(codec_model, encoder)
        else:
            sample = fit_sample(texts, encoder, embeddings, fit_docs, chunk_docs, seed)
            codec = cls(encoder.dim, bytes_per_token, **(codec_params or {}))
            codec.fit(np.concatenate(sample), offsets_of(sample), seed=seed)
        save_codec_model(part / "codec", codec, encoder)
        state_file.write_text(dumps_json({"fingerprint": fp}, indent=None))
    n_chunks = (len(texts) + chunk_docs - 1) // chunk_docs
    bar = tqdm(total=len(texts), desc=f"indexing ({codec.name})", disable=not progress, unit="doc")
    done_now = 0
    for c in range(n_chunks):
        f = part / f"chunk_{c:06d}.npz"
        lo, hi = c * chunk_docs, min(len(texts), (c + 1) * chunk_docs)
        if not f.is_file():
            if _stop_after_chunks is not None and done_now >= _stop_after_chunks:
                bar.close()
                raise KeyboardInterrupt("simulated interruption")
            vecs = chunk_vectors(texts, lo, hi, sample, encoder, embeddings)
            X, off = np.concatenate(vecs), offsets_of(vecs)
            _atomic_save_npz(f, codes=codec.encode(X, off), lengths=np.diff(off))
            done_now += 1
        bar.update(hi - lo)
    bar.close()
    chunks = [_load_npz(part / f"chunk_{c:06d}.npz") for c in range(n_chunks)]
    codes = np.concatenate([ch["codes"] for ch in chunks])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate([ch["lengths"] for ch in chunks]))])
    enc_arrays = {"projection": encoder.projection} if encoder.projection is not None else {}
    manifest = write_index(out, codes, offsets.astype(np.int64), ids, codec, encoder.info(),
                           overwrite=overwrite, encoder_arrays=enc_arrays, cells=cells)
    shutil.rmtree(part)
    return manifest


def search_texts(index_dir: Path, qids: list[str], qtexts: list[str], k: int = 10, nprobe: int = 0,
                 progress: bool = False, batch: int = 65536, cell_bytes: int | None = None,
                 query_batch: int = 1) -> dict[str, list[tuple[str, float]]]:
    """Encode queries with the index's encoder and return the top-``k`` per query, scoring
    ``query_batch`` queries at a time (``Index.search_many``: the same run as one at a time)."""
    from tqdm.auto import tqdm

    from .index import Index

    index = Index.open(index_dir)
    encoder = LateInteractionEncoder.from_info(index.manifest["encoder"],
                                               index.encoder_arrays.get("projection"))
    if encoder.dim != index.codec.dim:
        raise UserError(f"{index_dir}: encoder dim {encoder.dim} != index dim {index.codec.dim}")
    Qs = encoder.encode(qtexts, is_query=True)
    if query_batch < 1:
        raise UserError(f"query batch {query_batch}: must be at least 1")
    run = {}
    with tqdm(total=len(qids), desc="searching", disable=not progress, unit="query") as bar:
        for lo in range(0, len(qids), query_batch):
            hits = index.search_many(Qs[lo:lo + query_batch], k, nprobe, batch, cell_bytes)
            for qid, (docs, scores) in zip(qids[lo:lo + query_batch], hits, strict=True):
                run[qid] = [(index.doc_ids[d], float(s)) for d, s in zip(docs, scores, strict=True)]
            bar.update(len(hits))
    return run


# --- streaming training data (crossq train) --------------------------------------------------------


def stream_training_data(encoder: LateInteractionEncoder, texts: list[str],
                         query_hidden: list[np.ndarray] | None,
                         positives: list[int] | None, n_candidates: int, chunk_docs: int = 256,
                         fit_docs: int = 2000, seed: int = 0, embeddings=None):
    """What ``crossq train`` fits on, reading the corpus in chunks of ``chunk_docs`` texts
    (``embeddings``: a ``StoredEmbeddings`` of the corpus, read instead of encoding it; then
    ``encoder`` only projects the queries, with the folder's head). Token vectors are used at
    fp16 precision either way, as ``crossq index`` does, so both give the same codec:
    memory holds one chunk, the fit sample (the first ``fit_docs`` documents, rounded up to whole
    chunks; it also fits a PCA head when the encoder has none) and, with training queries (their
    token states ``query_hidden``, projected once the head is known),
    only the documents currently in some query's teacher top-``n_candidates`` or relevant to it.
    Returns ``(X, offsets, training)`` with ``training`` a ``TrainingSet`` over those documents
    (None without queries) -- the same candidates and teacher scores as ``build_training_set``
    on the whole corpus."""
    import torch

    from .core import maxsim_many
    from .train import TrainingSet

    sample = fit_sample(texts, encoder, embeddings, fit_docs, chunk_docs, seed)
    if not query_hidden:
        return np.concatenate(sample), offsets_of(sample), None
    Qs = [torch.from_numpy(q) for q in encoder.project(query_hidden)]
    want = set(positives or ())
    N = min(n_candidates, len(texts))
    top_s = torch.full((len(Qs), 0), float("-inf"))
    top_d = torch.zeros((len(Qs), 0), dtype=torch.long)
    kept: dict[int, np.ndarray] = {}
    pos_score = torch.zeros(len(Qs))
    for lo in range(0, len(texts), chunk_docs):
        hi = min(len(texts), lo + chunk_docs)
        vecs = chunk_vectors(texts, lo, hi, sample, encoder, embeddings)
        S = maxsim_many(Qs, torch.from_numpy(np.concatenate(vecs)), torch.from_numpy(offsets_of(vecs)))
        ids = torch.arange(lo, hi).expand(len(Qs), -1)
        both_s, both_d = torch.cat([top_s, S], 1), torch.cat([top_d, ids], 1)
        order = both_s.topk(min(N, both_s.shape[1]), dim=1).indices
        top_s, top_d = both_s.gather(1, order), both_d.gather(1, order)
        for i, p in enumerate(positives or ()):
            if lo <= p < hi:
                pos_score[i] = S[i, p - lo]
        live = set(top_d.flatten().tolist()) | want
        for d in range(lo, hi):
            if d in live:
                kept[d] = vecs[d - lo]
        kept = {d: v for d, v in kept.items() if d in live}
    cand, teacher = top_d.clone(), top_s.clone()
    pos_col = torch.zeros(len(Qs), dtype=torch.long)
    for i, p in enumerate(positives or ()):  # the given positive is forced in (build_training_set)
        hit = (cand[i] == p).nonzero()
        if len(hit):
            pos_col[i] = hit[0, 0]
        else:
            cand[i, -1], teacher[i, -1], pos_col[i] = p, pos_score[i], N - 1
    docs = sorted(set(range(len(sample))) | set(kept))
    local = {d: j for j, d in enumerate(docs)}
    vecs = [sample[d] if d < len(sample) else kept[d] for d in docs]
    cand_local = cand.apply_(lambda d: local[d])
    return np.concatenate(vecs), offsets_of(vecs), TrainingSet(Qs, cand_local, pos_col, teacher)
