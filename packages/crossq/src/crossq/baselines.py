"""Baseline codecs at matched bytes per token [S]: fp16, int8 scalar, faiss PQ and OPQ, and
ColBERTv2/PLAID-style residual compression. Each is one registered class (see ``codecs.py``).
"""

from __future__ import annotations

import numpy as np

from icml26_shared import UserError

from .codecs import Codec, check_bytes, register
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
        pq.train(np.ascontiguousarray(X, np.float32))
        self.pq_ = pq
        self.centroids = faiss.vector_to_array(pq.centroids).reshape(
            self.bytes_per_token, CODEBOOK_SIZE, -1).astype(np.float32)

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
        return {"centroids": self.centroids}

    def codebooks(self):
        return _pad_subspaces(self.centroids, self.dim)


@register("opq")
class OPQ(PQ):
    """faiss OPQ: a learned rotation ``A`` (stored, d x d) before PQ; decoding rotates back."""

    def __init__(self, dim, bytes_per_token=None, niter: int = 25, **params):
        self.niter = int(niter)
        super().__init__(dim, bytes_per_token, niter=self.niter, **params)

    def fit(self, X, offsets, seed=0, training=None):
        Codec.fit(self, X, offsets, seed)
        from ._faiss import load_faiss

        faiss = load_faiss()

        X = np.ascontiguousarray(X, np.float32)
        opq = faiss.OPQMatrix(self.dim, self.bytes_per_token)
        opq.niter = self.niter
        opq.train(X)
        self.rotation = faiss.vector_to_array(opq.A).reshape(self.dim, self.dim).astype(np.float32)
        self._train_pq(X @ self.rotation.T, seed)

    def encode(self, X, offsets):
        return self._assign(np.asarray(X, np.float32) @ self.rotation.T)

    def search_state(self):
        return {"centroids": self.centroids, "rotation": self.rotation}

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
        km = faiss.Kmeans(self.dim, CODEBOOK_SIZE, niter=20, seed=seed, max_points_per_centroid=256)
        km.train(X)
        self.centroids = km.centroids.astype(np.float32)
        R = X - self.centroids[self._ids(X)]
        _, vecs = np.linalg.eigh((R.T @ R).astype(np.float64))
        self.basis = np.ascontiguousarray(vecs[:, ::-1][:, :self.n_res].T, np.float32)  # [n_res, d]
        Z = R @ self.basis.T
        levels = 2 ** self.nbits
        self.cutoffs = np.quantile(Z, np.arange(1, levels) / levels, axis=0).T.astype(np.float32)
        self.weights = np.quantile(Z, (np.arange(levels) + 0.5) / levels, axis=0).T.astype(np.float32)

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
        return {"centroids": self.centroids, "basis": self.basis, "weights": self.weights,
                "cutoffs": self.cutoffs}

    def codebooks(self):
        per, mask = 8 // self.nbits, 2 ** self.nbits - 1
        books = np.zeros((self.bytes_per_token, CODEBOOK_SIZE, self.dim), np.float32)
        books[0] = self.centroids
        v = np.arange(CODEBOOK_SIZE)
        for j in range(self.n_res):
            level = (v >> (self.nbits * (j % per))) & mask
            books[1 + j // per] += self.weights[j][level][:, None] * self.basis[j][None, :]
        return books
