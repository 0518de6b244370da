"""One interface for every token codec, with exact byte accounting, and the CrossQ codec.

A codec turns token vectors ``[n, d]`` into ``uint8`` codes ``[n, bytes_per_token]`` and back.
What search needs is ``search_state()`` (arrays stored in the index and counted as metadata);
``model_state()`` is what encoding more documents needs (for CrossQ: the context encoder and gates,
kept out of the index: the context is computed at indexing and discarded [S]).
Codecs whose decoder is additive over byte positions (PQ, OPQ, RQ, LSQ, residual, CrossQ) expose
full-dim ``codebooks [B, 256, d]`` and are scored by lookup tables (ADC) instead of decoding
documents. Codebooks are stored in fp16 (in the projected space: PQ keeps its ``d / B``-dim
sub-codebooks) and the fitted codec is rounded to those fp16 values, so that what the index decodes
is exactly what was encoded.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from icml26_shared import UserError

from .config import CODEBOOK_SIZE, CrossQConfig
from .core import adc_tables, adc_token_scores, additive_decode

CODECS: dict[str, type[Codec]] = {}


def fp16_round(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to the fp16 values it is stored as (kept as float32 for computing)."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def fp16_state(**arrays: np.ndarray) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).astype(np.float16) for k, v in arrays.items()}


def register(name: str):
    def deco(cls: type[Codec]) -> type[Codec]:
        cls.name = name
        CODECS[name] = cls
        return cls

    return deco


def get_codec(name: str) -> type[Codec]:
    from . import baselines  # noqa: F401  (registers the baseline codecs)

    if name not in CODECS:
        raise UserError(f"unknown codec {name!r} (choose one of {', '.join(CODECS)})")
    return CODECS[name]


class Codec:
    """Base class. Subclasses set ``bytes_per_token`` in ``__init__`` (raising ``UserError`` for a
    budget they cannot meet) and implement ``fit``/``encode`` and ``search_state``."""

    name: ClassVar[str] = ""
    min_train_tokens: ClassVar[int] = 0

    def __init__(self, dim: int, bytes_per_token: int | None = None, **params: Any):
        self.dim = int(dim)
        self.params = dict(params)
        self.bytes_per_token = self.check_budget(self.dim, bytes_per_token)

    # --- budget and configuration ---
    @classmethod
    def check_budget(cls, dim: int, bytes_per_token: int | None) -> int:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        return {"codec": self.name, "dim": self.dim, "bytes_per_token": self.bytes_per_token,
                **self.params}

    # --- fitting and encoding ---
    def fit(self, X: np.ndarray, offsets: np.ndarray, seed: int = 0, training: Any = None) -> None:
        if len(X) < self.min_train_tokens:
            raise UserError(f"codec {self.name} needs at least {self.min_train_tokens} token vectors "
                            f"to train, the corpus has {len(X)}")

    def encode(self, X: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # --- state ---
    def search_state(self) -> dict[str, np.ndarray]:
        return {}

    def model_state(self) -> dict[str, np.ndarray]:
        return self.search_state()

    def load_search_state(self, arrays: dict[str, np.ndarray]) -> None:
        for k, v in arrays.items():
            setattr(self, k, v.astype(np.float32) if v.dtype == np.float16 else v)

    def load_model_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.load_search_state(arrays)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Codec:
        cfg = {k: v for k, v in config.items() if k not in ("codec", "dim", "bytes_per_token")}
        return cls(config["dim"], config["bytes_per_token"], **cfg)

    def metadata_bytes(self) -> int:
        return int(sum(a.nbytes for a in self.search_state().values()))

    # --- decoding and scoring (search side) ---
    def codebooks(self) -> np.ndarray | None:
        """Full-dim additive codebooks ``[B, 256, d]`` when the decoder is additive, else None."""
        return None

    def decode(self, codes: np.ndarray) -> np.ndarray:
        books = self._books()
        if books is None:
            raise NotImplementedError
        return additive_decode(torch.from_numpy(codes), books).numpy()

    def token_scores(self, Q: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """``[Lq, n]`` scores ``q_i . x_hat_j``: lookup tables when additive, else decode + matmul."""
        return self.scorer(Q)(codes)

    def scorer(self, Q: torch.Tensor):
        """``codes [n, B] -> [Lq, n]`` scores for query ``Q`` (lookup tables built once)."""
        books = self._books()
        if books is not None:
            T = adc_tables(Q, books)
            return lambda codes: adc_token_scores(T, codes)
        return lambda codes: Q @ torch.from_numpy(self.decode(codes.numpy())).T

    def coarse_cells(self) -> np.ndarray | None:
        """``[256, d]`` centroids when byte 0 of a code is a coarse cell (residual-style codecs:
        the first stage of RQ / CrossQ, ColBERTv2's centroid id), for PLAID-style candidates."""
        return None

    def _books(self) -> torch.Tensor | None:
        if not hasattr(self, "_books_cache"):
            b = self.codebooks()
            self._books_cache = None if b is None else torch.from_numpy(np.ascontiguousarray(b, np.float32))
        return self._books_cache


def check_bytes(name: str, bytes_per_token: int | None, default: int, ok, why: str) -> int:
    """The budget (``default`` when None), or ``UserError`` when ``ok(budget)`` is false."""
    b = default if bytes_per_token is None else int(bytes_per_token)
    if not ok(b):
        raise UserError(f"codec {name} cannot meet {b} bytes/token ({why})")
    return b


@register("crossq")
class CrossQCodec(Codec):
    """CrossQ [S + R]: context-conditioned additive codes, ranking-aligned training.
    ``context=False`` is the token-wise ablation; ``steps=0`` is plain residual quantization (RQ)."""

    min_train_tokens = CODEBOOK_SIZE

    def __init__(self, dim: int, bytes_per_token: int | None = None, **params: Any):
        defaults = {f: getattr(CrossQConfig(), f) for f in CrossQConfig.__dataclass_fields__}
        defaults.pop("bytes_per_token")
        unknown = set(params) - set(defaults)
        if unknown:
            raise UserError(f"unknown crossq option(s): {', '.join(sorted(unknown))}")
        super().__init__(dim, bytes_per_token, **{**defaults, **params})
        self.cfg = CrossQConfig(bytes_per_token=self.bytes_per_token, **self.params)
        self.model = None
        self.books = None
        self.params_init = None  # optional precomputed residual k-means books (shared init) [R]

    @classmethod
    def check_budget(cls, dim: int, bytes_per_token: int | None) -> int:
        return check_bytes(cls.name, bytes_per_token, 4, lambda b: 1 <= b <= 64,
                           "one byte per codebook, 1 to 64 codebooks")

    def fit(self, X, offsets, seed=0, training=None, progress=None, every: int = 0,
            checkpoint=None) -> None:
        """``every`` / ``checkpoint``: learning-curve hook of ``train.fit_crossq``."""
        super().fit(X, offsets, seed)
        from .train import build_training_set, fit_crossq, pseudo_queries

        Xt = torch.from_numpy(np.ascontiguousarray(X, np.float32))
        offt = torch.from_numpy(np.asarray(offsets, np.int64))
        if training is None:
            qs, pos = pseudo_queries(Xt, offsets, 4 * self.cfg.steps, self.cfg.pseudo_query_tokens, seed)
            training = build_training_set(qs, Xt, offt, self.cfg.candidates, pos)
        self.model = fit_crossq(X, np.asarray(offsets, np.int64), training, self.cfg, seed, progress,
                                init=self.params_init, every=every, checkpoint=checkpoint)
        with torch.no_grad():  # the index stores fp16 codebooks: encode with exactly those
            self.model.codebooks.copy_(torch.from_numpy(fp16_round(self.model.codebooks.numpy())))
        self.books = self.model.codebooks.detach().numpy().copy()

    def encode(self, X, offsets) -> np.ndarray:
        if self.model is None:
            raise UserError("this CrossQ codec holds only codebooks (a search index); load its "
                            "codec model (crossq train --out DIR) to encode documents")
        with torch.no_grad():
            codes, _ = self.model.encode(torch.from_numpy(np.ascontiguousarray(X, np.float32)),
                                         torch.from_numpy(np.asarray(offsets, np.int64)))
        return codes.numpy().astype(np.uint8)

    def search_state(self):
        return fp16_state(books=self.books)

    def model_state(self):
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}

    def load_model_state(self, arrays):
        from .core import CrossQuantizer

        c = self.cfg
        self.model = CrossQuantizer(self.dim, c.bytes_per_token, CODEBOOK_SIZE, context=c.context,
                                    context_dim=c.context_dim, hidden=c.hidden)
        self.model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()})
        self.model.eval()
        self.books = self.model.codebooks.detach().numpy().copy()

    def codebooks(self):
        return self.books

    def coarse_cells(self):
        return self.books[0]


@register("tokenwise")
class TokenwiseCodec(CrossQCodec):
    """CrossQ without the document context: token-wise conditional quantization (the paper's
    ablation and baseline) [S]: the same encoder, training and losses, context input zeroed."""

    def __init__(self, dim: int, bytes_per_token: int | None = None, **params: Any):
        super().__init__(dim, bytes_per_token, **{**params, "context": False})
