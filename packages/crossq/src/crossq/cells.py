"""Coarse cells for candidate search (PLAID-style [R]) and their cell -> documents lists.

Residual-style codecs (CrossQ, token-wise, RQ, ColBERTv2 residual) need nothing here: a token's
cell is its first one or two code bytes. Codecs without such a first stage (PQ, OPQ, LSQ, fp16,
int8) get **k-means cells fitted when the index is written** (``fit_cells``): spherical faiss
k-means over a sample of the decoded token vectors, centroids rounded to fp16, and every token's
cell id; both are stored in the index (``cells.centroids.npy`` fp16, ``cells.assign.npy``
uint16 / uint32), counted under ``cells`` in the byte report and covered by the manifest's CRCs
and checksum, so that opening and searching never re-cluster.
"""

from __future__ import annotations

import numpy as np

from .codecs import Codec, fp16_round

CHUNK = 65536  # token vectors decoded and assigned at a time


def n_cells_for(n_tokens: int) -> int:
    """Number of k-means cells: ``4 sqrt(n)`` (at least 16, at most ``n / 8`` and 65,536, so that
    a cell id fits in two bytes) [R: PLAID uses ~16 sqrt(n) centroids per *passage token*]."""
    return int(max(1, min(65536, max(16, 4 * np.sqrt(n_tokens)), n_tokens // 8)))


def assign_dtype(n_cells: int) -> type:
    return np.uint16 if n_cells <= 1 << 16 else np.uint32


def fit_cells(codec: Codec, codes: np.ndarray, n_cells: int | None = None, seed: int = 1,
              points_per_cell: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``(centroids [n_cells, d] float32 (fp16 values), assign [n_tokens])``: spherical k-means
    (10 iterations) on at most ``points_per_cell * n_cells`` decoded tokens, then every token
    assigned to its best centroid by inner product, decoding ``CHUNK`` tokens at a time."""
    from ._faiss import load_faiss

    faiss = load_faiss()
    n = len(codes)
    k = n_cells_for(n) if n_cells is None else int(n_cells)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, min(n, points_per_cell * k), replace=False))
    sample = np.ascontiguousarray(codec.decode(np.ascontiguousarray(codes[rows])), np.float32)
    km = faiss.Kmeans(sample.shape[1], k, niter=10, seed=seed, spherical=True,
                      max_points_per_centroid=points_per_cell, min_points_per_centroid=1)
    km.train(sample)
    centroids = fp16_round(km.centroids)  # what the index stores: assign with exactly those
    flat = faiss.IndexFlatIP(centroids.shape[1])
    flat.add(centroids)
    assign = np.empty(n, assign_dtype(k))
    for i in range(0, n, CHUNK):
        dec = np.ascontiguousarray(codec.decode(np.ascontiguousarray(codes[i:i + CHUNK])), np.float32)
        assign[i:i + CHUNK] = flat.search(dec, 1)[1][:, 0]
    return centroids, assign


def cell_lists(assign: np.ndarray, offsets: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """``(docs, ptr)``: the documents with a token in cell ``c`` are ``docs[ptr[c]:ptr[c + 1]]``
    (sorted, unique), from each token's cell id ``assign [n_tokens]`` (one sort)."""
    n_docs = len(offsets) - 1
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(offsets))
    pairs = np.unique(np.asarray(assign, np.int64) * n_docs + doc_of)  # (cell, document), by cell
    ptr = np.searchsorted(pairs // max(n_docs, 1), np.arange(n_cells + 1)).astype(np.int64)
    return pairs % max(n_docs, 1), ptr
