"""Baseline codecs at matched bytes per token [S]: fp16, int8 scalar, faiss PQ and OPQ, faiss
residual quantization with beam search (RQ) and local-search quantization (LSQ), and
ColBERTv2/PLAID-style residual compression. Each is one registered class (see ``codecs.py``);
token-wise conditional quantization is ``codecs.TokenwiseCodec``. Every codebook-like array is
rounded to fp16 once fitted (the stored precision), then used for encoding.
"""

from __future__ import annotations

import numpy as np

from icml26_shared import UserError

from .codecs import Codec, check_bytes, fp16_round, fp16_state, register
from .config import CODEBOOK_SIZE


@register("fp16")
class FP16(Codec):
    """Full precision reference: the token vector in IEEE half precision (2 bytes per dim)."""

    @classmethod
    def check_budget(cls, dim, bytes_per_token):
        return check_bytes(cls.name, bytes_per_token, 2 * dim, lambda b: b == 2 * dim,
                           f"fp16 stores exactly 2 x dim = {2 * dim} bytes/token")

    def encode(self, X, offsets):
        return np.ascontiguousarray(X, np.float16).view(np.uint8).reshape(len(X), -1)

    def decode(self, codes):
        return np.ascontiguousarray(codes).view(np.float16).astype(np.float32)


@register("int8")
class Int8(Codec):
    """Symmetric per-dimension int8 scalar quantization (1 byte per dim + a scale per dim)."""

    @classmethod
    def check_budget(cls, dim, bytes_per_token):
        return check_bytes(cls.name, bytes_per_token, dim, lambda b: b == dim,
                           f"int8 stores exactly dim = {dim} bytes/token")

    def fit(self, X, offsets, seed=0, training=None):
        super().fit(X, offsets, seed)
        self.scale = (np.abs(X).max(0) / 127.0).clip(min=1e-12).astype(np.float32)

    def encode(self, X, offsets):
        q = np.clip(np.rint(X / self.scale), -127, 127).astype(np.int8)
        return q.view(np.uint8)

    def decode(self, codes):
        return np.ascontiguousarray(codes).view(np.int8).astype(np.float32) * self.scale

    def search_state(self):
        return {"scale": self.scale}


def _pad_subspaces(cent: np.ndarray, dim: int) -> np.ndarray:
    """PQ centroids ``[M, K, d/M]`` as full-dim additive codebooks ``[M, K, d]``."""
    M, K, ds = cent.shape
    books = np.zeros((M, K, dim), np.float32)
    for m in range(M):
        books[m, :, m * ds:(m + 1) * ds] = cent[m]
    return books


@register("pq")
class PQ(Codec):
    """faiss product quantization: ``B`` sub-spaces of ``d / B`` dims, 256 centroids each."""

    min_train_tokens = CODEBOOK_SIZE

    @classmethod
    def check_budget(cls, dim, bytes_per_token):
        return check_bytes(cls.name, bytes_per_token, 4, lambda b: 1 <= b <= dim and dim % b == 0,
                           f"the budget must divide dim = {dim}: one byte per sub-space")

    def _train_pq(self, X, seed):
        from ._faiss import load_faiss

        faiss = load_faiss()

        pq = faiss.ProductQuantizer(self.dim, self.bytes_per_token, 8)
        pq.cp.seed = seed
        pq.cp.min_points_per_centroid = 1
        pq.train(np.ascontiguousarray(X, np.float32))
        self.pq_ = pq
        self.centroids = fp16_round(faiss.vector_to_array(pq.centroids).reshape(
            self.bytes_per_token, CODEBOOK_SIZE, -1))

    def fit(self, X, offsets, seed=0, training=None):
        super().fit(X, offsets, seed)
        self._train_pq(X, seed)

    def _assign(self, Y):
        """Nearest centroid in each sub-space (numpy, no faiss state needed)."""
        M, _, ds = self.centroids.shape
        codes = np.empty((len(Y), M), np.uint8)
        for m in range(M):
            sub = Y[:, m * ds:(m + 1) * ds]
            C = self.centroids[m]
            codes[:, m] = np.argmin((C * C).sum(1)[None, :] - 2 * sub @ C.T, axis=1)
        return codes

    def encode(self, X, offsets):
        return self._assign(np.asarray(X, np.float32))

    def search_state(self):
        return fp16_state(centroids=self.centroids)

    def codebooks(self):
        return _pad_subspaces(self.centroids, self.dim)


@register("opq")
class OPQ(PQ):
    """faiss OPQ: a learned rotation ``A`` (stored, d x d) before PQ; decoding rotates back."""

    def __init__(self, dim, bytes_per_token=None, niter: int = 25, train_tokens: int = 65536, **params):
        self.niter = int(niter)
        super().__init__(dim, bytes_per_token, niter=self.niter, train_tokens=int(train_tokens), **params)

    def fit(self, X, offsets, seed=0, training=None):
        Codec.fit(self, X, offsets, seed)
        from ._faiss import load_faiss

        faiss = load_faiss()

        X = np.ascontiguousarray(X, np.float32)
        opq = faiss.OPQMatrix(self.dim, self.bytes_per_token)
        opq.niter = self.niter
        opq.max_train_points = self.params["train_tokens"]  # faiss samples that many (default 65536)
        inner = faiss.ProductQuantizer(self.dim, self.bytes_per_token, 8)
        inner.cp.min_points_per_centroid = 1  # no faiss warnings on small corpora
        inner.cp.seed = seed
        opq.pq = inner  # (kept alive by ``inner`` until training ends)
        opq.train(X)
        self.rotation = fp16_round(faiss.vector_to_array(opq.A).reshape(self.dim, self.dim))
        self._train_pq(X @ self.rotation.T, seed)

    def encode(self, X, offsets):
        return self._assign(np.asarray(X, np.float32) @ self.rotation.T)

    def search_state(self):
        return fp16_state(centroids=self.centroids, rotation=self.rotation)

    def codebooks(self):
        return _pad_subspaces(self.centroids, self.dim) @ self.rotation


@register("residual")
class Residual(Codec):
    """ColBERTv2 / PLAID-style residual compression [S]: a 1-byte centroid id (256 centroids) plus
    ``nbits`` per residual dimension with per-dimension bucket cutoffs and weights at quantiles.
    To meet budgets below ``1 + d * nbits / 8`` bytes, the residual is kept on its top
    ``(B - 1) * 8 / nbits`` principal directions [R]; at ``B = 1 + d * nbits / 8`` all dims are kept
    (ColBERTv2's native layout up to the rotation)."""

    min_train_tokens = CODEBOOK_SIZE

    def __init__(self, dim, bytes_per_token=None, nbits: int = 1, **params):
        if nbits not in (1, 2, 4, 8):
            raise UserError(f"residual nbits must be 1, 2, 4 or 8, not {nbits}")
        self.nbits = nbits
        super().__init__(dim, bytes_per_token, nbits=nbits, **params)

    @classmethod
    def check_budget(cls, dim, bytes_per_token):
        return check_bytes(cls.name, bytes_per_token, 4, lambda b: 2 <= b <= 1 + dim,
                           "1 byte of centroid id plus at least 1 byte of residual bits, "
                           f"at most 1 + dim = {1 + dim}")

    @property
    def n_res(self) -> int:
        return min(self.dim, (self.bytes_per_token - 1) * 8 // self.nbits)

    def fit(self, X, offsets, seed=0, training=None):
        super().fit(X, offsets, seed)
        from ._faiss import load_faiss

        faiss = load_faiss()

        X = np.ascontiguousarray(X, np.float32)
        km = faiss.Kmeans(self.dim, CODEBOOK_SIZE, niter=20, seed=seed, max_points_per_centroid=256,
                          min_points_per_centroid=1)
        km.train(X)
        self.centroids = fp16_round(km.centroids)
        R = X - self.centroids[self._ids(X)]
        _, vecs = np.linalg.eigh((R.T @ R).astype(np.float64))
        self.basis = fp16_round(np.ascontiguousarray(vecs[:, ::-1][:, :self.n_res].T))  # [n_res, d]
        Z = R @ self.basis.T
        levels = 2 ** self.nbits
        self.cutoffs = fp16_round(np.quantile(Z, np.arange(1, levels) / levels, axis=0).T)
        self.weights = fp16_round(np.quantile(Z, (np.arange(levels) + 0.5) / levels, axis=0).T)

    def _ids(self, X):
        C = self.centroids
        return np.argmin((C * C).sum(1)[None, :] - 2 * X @ C.T, axis=1)

    def encode(self, X, offsets):
        X = np.asarray(X, np.float32)
        ids = self._ids(X)
        Z = (X - self.centroids[ids]) @ self.basis.T
        bits = np.stack([np.searchsorted(self.cutoffs[j], Z[:, j]) for j in range(self.n_res)], 1)
        per = 8 // self.nbits
        codes = np.zeros((len(X), self.bytes_per_token), np.uint8)
        codes[:, 0] = ids
        for j in range(self.n_res):
            codes[:, 1 + j // per] |= (bits[:, j] << (self.nbits * (j % per))).astype(np.uint8)
        return codes

    def search_state(self):
        return fp16_state(centroids=self.centroids, basis=self.basis, weights=self.weights,
                          cutoffs=self.cutoffs)

    def coarse_cells(self):
        return self.centroids

    def codebooks(self):
        per, mask = 8 // self.nbits, 2 ** self.nbits - 1
        books = np.zeros((self.bytes_per_token, CODEBOOK_SIZE, self.dim), np.float32)
        books[0] = self.centroids
        v = np.arange(CODEBOOK_SIZE)
        for j in range(self.n_res):
            level = (v >> (self.nbits * (j % per))) & mask
            books[1 + j // per] += self.weights[j][level][:, None] * self.basis[j][None, :]
        return books


class _FaissAdditive(Codec):
    """faiss additive quantizers (one byte per codebook, no norm byte): trained on a sample of
    ``train_tokens`` token vectors [R], codebooks rounded to fp16 and written back before encoding."""

    min_train_tokens = CODEBOOK_SIZE

    @classmethod
    def check_budget(cls, dim, bytes_per_token):
        return check_bytes(cls.name, bytes_per_token, 4, lambda b: 1 <= b <= 64,
                           "one byte per codebook, 1 to 64 codebooks")

    def _make(self, faiss, seed: int):
        raise NotImplementedError

    def fit(self, X, offsets, seed=0, training=None):
        super().fit(X, offsets, seed)
        from ._faiss import load_faiss

        faiss = load_faiss()
        X = np.ascontiguousarray(X, np.float32)
        n = int(self.params.get("train_tokens", 16384))
        if len(X) > n:
            X = X[np.sort(np.random.default_rng(seed).choice(len(X), n, replace=False))]
        q = self._make(faiss, seed)
        q.train(X)
        M = self.bytes_per_token
        self.books = fp16_round(faiss.vector_to_array(q.codebooks).reshape(M, CODEBOOK_SIZE, self.dim))
        self._attach(faiss, q)

    def _attach(self, faiss, q) -> None:
        faiss.copy_array_to_vector(np.ascontiguousarray(self.books).ravel(), q.codebooks)
        q.is_trained = True
        if hasattr(q, "compute_codebook_tables"):
            q.compute_codebook_tables()
        self.q_ = q

    def encode(self, X, offsets):
        if getattr(self, "q_", None) is None:  # loaded from an index: rebuild from the codebooks
            from ._faiss import load_faiss

            faiss = load_faiss()
            self._attach(faiss, self._make(faiss, 0))
        X = np.ascontiguousarray(X, np.float32)
        out = [self.q_.compute_codes(X[i:i + 32768]) for i in range(0, len(X), 32768)]
        codes = np.concatenate(out) if out else np.zeros((0, self.bytes_per_token), np.uint8)
        assert codes.shape[1] == self.bytes_per_token
        return codes

    def search_state(self):
        return fp16_state(books=self.books)

    def codebooks(self):
        return self.books


@register("rq")
class RQ(_FaissAdditive):
    """faiss ``ResidualQuantizer`` with beam search (``beam`` = ``max_beam_size``; 1 = greedy)."""

    def __init__(self, dim, bytes_per_token=None, beam: int = 4, train_tokens: int = 16384, **params):
        super().__init__(dim, bytes_per_token, beam=int(beam), train_tokens=int(train_tokens), **params)

    def _make(self, faiss, seed):
        q = faiss.ResidualQuantizer(self.dim, self.bytes_per_token, 8)
        q.max_beam_size = self.params["beam"]
        q.cp.seed = seed
        q.cp.min_points_per_centroid = 1  # no faiss warning on small corpora
        return q

    def coarse_cells(self):
        return self.books[0]


@register("lsq")
class LSQ(_FaissAdditive):
    """faiss ``LocalSearchQuantizer`` (LSQ++); iteration counts default to faiss's (25 / 16)."""

    def __init__(self, dim, bytes_per_token=None, train_iters: int = 25, encode_ils_iters: int = 16,
                 train_tokens: int = 16384, **params):
        super().__init__(dim, bytes_per_token, train_iters=int(train_iters),
                         encode_ils_iters=int(encode_ils_iters), train_tokens=int(train_tokens),
                         **params)

    def _make(self, faiss, seed):
        q = faiss.LocalSearchQuantizer(self.dim, self.bytes_per_token, 8)
        q.train_iters = self.params["train_iters"]
        q.encode_ils_iters = self.params["encode_ils_iters"]
        q.random_seed = seed
        return q
