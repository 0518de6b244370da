"""Document features: TF-IDF (fitted on TRAIN), frozen all-MiniLM-L6-v2 sentence embeddings
(sentence-transformers, 128 tokens) or ``st:DIR``, a local sentence-transformers folder of the
user's (the same frozen recipe); embeddings are cached by content hash under
``icml26_shared.data.cache_dir("nbcg")`` so a second run embeds nothing."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np

from icml26_shared import UserError

MAX_TOKENS = 128   # the 128 tokens [R]
KINDS = ("tfidf", "minilm", "st:DIR")


def _require_minilm():
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise UserError("--features minilm needs sentence-transformers: pip install 'nbcg[minilm]'") from None
    from icml26_shared.data import minilm_dir

    return SentenceTransformer, minilm_dir()


def st_dir(kind: str) -> Path:
    """The folder of ``st:DIR``; ``UserError`` (one line) when it is not a sentence-transformers folder."""
    d = Path(kind[3:]).expanduser()
    if not kind[3:]:
        raise UserError("--features st:DIR needs a folder after 'st:'")
    if not d.is_dir():
        raise UserError(f"--features {kind}: no such folder")
    if not any((d / f).is_file() for f in ("modules.json", "config_sentence_transformers.json", "config.json")):
        raise UserError(f"--features {kind}: not a sentence-transformers folder (no modules.json or config.json)")
    return d.resolve()


def _require_st(kind: str):
    d = st_dir(kind)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise UserError(f"--features {kind} needs sentence-transformers: pip install 'nbcg[minilm]'") from None
    return SentenceTransformer, d


def _folder_id(d: Path) -> str:
    """The folder's path and its files' names, sizes and mtimes: a changed model misses the cache."""
    files = sorted(p for p in d.rglob("*") if p.is_file())
    return str(d) + "|" + "|".join(f"{p.relative_to(d)}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in files)


def content_key(texts: list[str], model: str, max_tokens: int) -> str:
    """SHA-256 over the model id, the token limit and every text (length-prefixed)."""
    h = hashlib.sha256(f"{model}\0{max_tokens}\0".encode())
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def embed_minilm(texts: list[str], max_tokens: int = MAX_TOKENS, batch_size: int = 64,
                 cache: bool = True) -> np.ndarray:
    """n×384 L2-normalised MiniLM embeddings; read from / written to the content-hash cache."""
    SentenceTransformer, mdir = _require_minilm()
    return _embed(texts, SentenceTransformer, mdir, "all-MiniLM-L6-v2", max_tokens, batch_size, cache)


def embed_st(texts: list[str], kind: str, max_tokens: int = MAX_TOKENS, batch_size: int = 64,
             cache: bool = True) -> np.ndarray:
    """L2-normalised embeddings of a local sentence-transformers folder (``kind`` = ``st:DIR``),
    frozen, on the CPU, cached like MiniLM's (the key names the folder's files)."""
    SentenceTransformer, d = _require_st(kind)
    return _embed(texts, SentenceTransformer, d, _folder_id(d), max_tokens, batch_size, cache)


def _embed(texts, SentenceTransformer, mdir, model_id: str, max_tokens: int, batch_size: int,
           cache: bool) -> np.ndarray:
    from icml26_shared.data import cache_dir

    key = content_key(texts, model_id, max_tokens)
    path = cache_dir("nbcg", "embeddings") / f"{key}.npy"
    if cache and path.is_file():
        try:
            E = np.load(path)
            if E.shape[0] == len(texts):
                return E
        except (OSError, ValueError):
            pass                                     # a corrupt cache entry is recomputed
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    import logging

    from .finetune import quiet

    quiet()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    try:
        model = SentenceTransformer(str(mdir), device="cpu", local_files_only=True)
        model.max_seq_length = max_tokens
        E = model.encode(list(texts), batch_size=batch_size, show_progress_bar=False,
                         normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
    finally:
        torch.set_num_threads(threads)   # the caller's setting (the reproduction trains on one thread)
    if cache:
        from icml26_shared.io import atomic_write_bytes

        buf = io.BytesIO()
        np.save(buf, E)
        atomic_write_bytes(path, buf.getvalue())
    return E


class Featurizer:
    """``fit(train texts)`` then ``transform(texts)``; ``state()`` / ``from_state`` for the model
    folder (TF-IDF stores its vocabulary and idf; MiniLM stores only its name)."""

    def __init__(self, kind: str = "tfidf", max_features: int = 5000):
        if kind not in KINDS[:2] and not kind.startswith("st:"):
            raise UserError(f"unknown --features {kind!r} (known: {', '.join(KINDS)})")
        self.kind, self.max_features, self.vec = kind, max_features, None

    def fit(self, texts: list[str]) -> Featurizer:
        if self.kind == "tfidf":
            from sklearn.feature_extraction.text import TfidfVectorizer

            self.vec = TfidfVectorizer(max_features=self.max_features, sublinear_tf=True)
            try:
                self.vec.fit(texts)
            except ValueError:
                raise UserError("training texts contain no words (empty vocabulary)") from None
        elif self.kind == "minilm":
            _require_minilm()
        else:
            _require_st(self.kind)
        return self

    def transform(self, texts: list[str]) -> np.ndarray:
        if self.kind == "minilm":
            return embed_minilm(texts)
        if self.kind.startswith("st:"):
            return embed_st(texts, self.kind)
        return self.vec.transform(texts).toarray().astype(np.float32)

    @property
    def dim(self) -> int:
        if self.kind == "tfidf":
            return len(self.vec.vocabulary_)
        return 384 if self.kind == "minilm" else int(self.transform(["x"]).shape[1])

    def state(self) -> dict:
        if self.kind == "minilm":
            return {"kind": "minilm", "max_tokens": MAX_TOKENS}
        if self.kind.startswith("st:"):     # the folder must still be there to predict
            return {"kind": f"st:{st_dir(self.kind)}", "max_tokens": MAX_TOKENS}
        return {"kind": "tfidf", "vocabulary": {k: int(v) for k, v in self.vec.vocabulary_.items()},
                "idf": self.vec.idf_.tolist(), "max_features": self.max_features}

    @classmethod
    def from_state(cls, st: dict) -> Featurizer:
        from sklearn.feature_extraction.text import TfidfVectorizer

        f = cls(st.get("kind", "tfidf"), st.get("max_features", 5000))
        if f.kind == "tfidf":
            f.vec = TfidfVectorizer(sublinear_tf=True, vocabulary=st["vocabulary"])
            f.vec.idf_ = np.asarray(st["idf"], dtype=np.float64)
        return f

    def save(self, path: Path) -> None:
        from icml26_shared.io import atomic_write_text, dumps_json

        atomic_write_text(path, dumps_json(self.state(), indent=None), mkdir=False)
