"""Any Hugging Face encoder as a late-interaction (ColBERT-style) model.

Token states -> optional linear projection -> L2 normalisation, one vector per non-padding token.
The projection comes from, in order: a PyLate / sentence-transformers checkpoint's Dense module
(``modules.json``), a ColBERT checkpoint's ``linear.weight``, or is fitted by PCA on corpus token
states (the built-in all-MiniLM-L6-v2 default, which has no ColBERT head) [R].

ColBERT / PyLate checkpoints are encoded with ColBERT's conventions (``colbert=True``): a marker
token after ``[CLS]`` (``[unused0]`` for queries, ``[unused1]`` for documents; PyLate checkpoints
use their ``[Q] ``/``[D] `` prefixes instead), queries padded to ``query_maxlen`` with ``[MASK]``
tokens that are not attended to but do produce vectors (query augmentation), and document tokens
that are punctuation (ColBERT's skiplist) dropped. Plain encoders (the MiniLM default) are not.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icml26_shared import UserError

from .config import EncoderConfig


def _load_weights(folder: Path) -> dict[str, torch.Tensor]:
    st = sorted(folder.glob("*.safetensors"))
    if st:
        from safetensors.torch import load_file

        out: dict[str, torch.Tensor] = {}
        for f in st:
            out.update(load_file(str(f)))
        return out
    pt = folder / "pytorch_model.bin"
    return torch.load(pt, map_location="cpu", weights_only=True) if pt.is_file() else {}


def resolve_model_dir(model: str) -> Path:
    if model == "minilm":
        from icml26_shared.data import minilm_dir

        return minilm_dir()
    path = Path(model)
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise UserError(f"{model}: not a local Hugging Face model folder (no config.json)")
    return path


class LateInteractionEncoder:
    """``encode(texts, is_query)`` -> one ``float32 [L_i, dim]`` array per text, rows unit-norm."""

    def __init__(self, model: Any, tokenizer: Any, cfg: EncoderConfig,
                 projection: np.ndarray | None = None, source: str = "", colbert: bool = False):
        self.model, self.tokenizer, self.cfg, self.source = model.eval(), tokenizer, cfg, source
        self.colbert = bool(colbert)
        if self.colbert:
            self._check_colbert_tokens()
        self.projection = None if projection is None else np.asarray(projection, np.float32)  # [H, dim]
        self.projection_kind = "checkpoint" if projection is not None else "none"

    @property
    def dim(self) -> int:
        return self.projection.shape[1] if self.projection is not None else self.model.config.hidden_size

    @classmethod
    def load(cls, cfg: EncoderConfig | None = None) -> LateInteractionEncoder:
        """From ``cfg.model``: "minilm" or a local folder (HF, ColBERT or PyLate checkpoint)."""
        cfg = cfg or EncoderConfig()
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        root = resolve_model_dir(cfg.model)
        hf_dir, projection, colbert = root, None, False
        modules = root / "modules.json"
        if modules.is_file():  # sentence-transformers / PyLate layout
            mods = json.loads(modules.read_text())
            for mod in mods:
                sub = root / mod.get("path", "")
                if mod.get("type", "").endswith("Transformer") and (sub / "config.json").is_file():
                    hf_dir = sub
                elif mod.get("type", "").endswith("Dense"):
                    w = _load_weights(sub)
                    key = next((k for k in w if k.endswith("linear.weight")), None)
                    if key is not None:
                        projection = w[key].float().numpy().T
                        colbert = "pylate" in mod.get("type", "").lower()
            st_cfg = root / "config_sentence_transformers.json"
            if st_cfg.is_file():
                extra = json.loads(st_cfg.read_text())
                cfg = replace(cfg, query_prefix=extra.get("query_prefix") or cfg.query_prefix,
                              doc_prefix=extra.get("document_prefix") or cfg.doc_prefix)
        else:  # ColBERT checkpoints keep their projection as `linear.weight` beside the encoder
            w = _load_weights(root)
            if "linear.weight" in w:
                projection = w["linear.weight"].float().numpy().T
                colbert = True
        try:
            model = AutoModel.from_pretrained(hf_dir, dtype=torch.float32)
            tok = AutoTokenizer.from_pretrained(hf_dir)
        except (OSError, ValueError) as exc:
            raise UserError(f"{root}: cannot load the encoder: {str(exc).splitlines()[0]}") from None
        if projection is not None and projection.shape[0] != model.config.hidden_size:
            raise UserError(f"{root}: projection expects {projection.shape[0]} inputs, the encoder "
                            f"gives {model.config.hidden_size}")
        return cls(model, tok, cfg, projection, source=str(root), colbert=colbert)

    def info(self) -> dict[str, Any]:
        return {"source": self.source, "dim": self.dim, "projection": self.projection_kind,
                "colbert": self.colbert, **asdict(self.cfg)}

    def _check_colbert_tokens(self) -> None:
        tok = self.tokenizer
        if tok.mask_token_id is None or tok.pad_token_id is None:
            raise UserError(f"{self.source}: a ColBERT checkpoint's tokenizer needs [MASK] and [PAD]")
        self._markers = {}
        if not (self.cfg.query_prefix or self.cfg.doc_prefix):
            for is_query, name in ((True, "[unused0]"), (False, "[unused1]")):
                i = tok.convert_tokens_to_ids(name)
                if i is None or i == tok.unk_token_id:
                    raise UserError(f"{self.source}: the tokenizer has no {name} marker token")
                self._markers[is_query] = i
        self._skip = torch.tensor(sorted({tok.encode(c, add_special_tokens=False)[0]
                                          for c in string.punctuation
                                          if tok.encode(c, add_special_tokens=False)}))

    def tokenize(self, texts: Sequence[str], is_query: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Model inputs and the mask of positions that become vectors ``[B, L]``."""
        prefix = self.cfg.query_prefix if is_query else self.cfg.doc_prefix
        maxlen = self.cfg.query_maxlen if is_query else self.cfg.doc_maxlen
        texts = [prefix + t for t in texts]
        if not self.colbert:
            enc = self.tokenizer(texts, padding=True, truncation=True, max_length=maxlen,
                                 return_tensors="pt")
            return dict(enc), enc["attention_mask"].bool()
        marker = self._markers.get(is_query)
        n = maxlen - (marker is not None)
        enc = self.tokenizer(texts, padding="max_length" if is_query else "longest", truncation=True,
                             max_length=n, return_tensors="pt")
        ids, att = enc["input_ids"], enc["attention_mask"]
        if marker is not None:  # [CLS] marker tokens... [SEP]
            col = torch.full((len(ids), 1), marker, dtype=ids.dtype)
            ids = torch.cat([ids[:, :1], col, ids[:, 1:]], 1)
            att = torch.cat([att[:, :1], torch.ones_like(col), att[:, 1:]], 1)
        if is_query:  # [MASK] augmentation: pads become masks, not attended, but kept as vectors
            keep = torch.ones_like(ids, dtype=torch.bool)
            ids = torch.where(ids == self.tokenizer.pad_token_id, self.tokenizer.mask_token_id, ids)
        else:  # the skiplist: punctuation tokens produce no vector
            keep = att.bool() & ~torch.isin(ids, self._skip)
        inputs = {"input_ids": ids, "attention_mask": att}
        if "token_type_ids" in enc:
            inputs["token_type_ids"] = torch.zeros_like(ids)
        return inputs, keep

    @classmethod
    def from_info(cls, info: dict[str, Any], projection: np.ndarray | None) -> LateInteractionEncoder:
        """The encoder an index was built with (its manifest's ``encoder`` entry)."""
        fields = {k: info[k] for k in EncoderConfig.__dataclass_fields__ if k in info}
        enc = cls.load(EncoderConfig(**fields))
        enc.set_projection(projection if projection is not None else enc.projection,
                           info.get("projection", "none"))
        return enc

    @torch.no_grad()
    def hidden_states(self, texts: Sequence[str], is_query: bool) -> list[np.ndarray]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        out: list[np.ndarray | None] = [None] * len(texts)
        for i in range(0, len(texts), self.cfg.batch_size):
            idx = order[i:i + self.cfg.batch_size]
            inputs, keep = self.tokenize([texts[j] for j in idx], is_query)
            h = self.model(**inputs).last_hidden_state
            for j, row, mask in zip(idx, h, keep, strict=True):
                out[j] = row[mask].numpy()
        return out  # type: ignore[return-value]

    def fit_projection(self, texts: Sequence[str], seed: int = 0, max_tokens: int = 50_000) -> None:
        """PCA of the texts' token states to ``cfg.dim`` dims [R] (for encoders without a head)."""
        self.fit_projection_from(self.hidden_states(texts, is_query=False), seed, max_tokens)

    def fit_projection_from(self, hidden: list[np.ndarray], seed: int = 0, max_tokens: int = 50_000) -> None:
        H = np.concatenate(hidden).astype(np.float64)
        rng = np.random.default_rng(seed)
        if len(H) > max_tokens:
            H = H[rng.choice(len(H), max_tokens, replace=False)]
        dim = min(self.cfg.dim, H.shape[1])
        _, vecs = np.linalg.eigh(np.cov(H, rowvar=False))
        self.projection = np.ascontiguousarray(vecs[:, ::-1][:, :dim], np.float32)
        self.projection_kind = "pca"

    def project(self, hidden: list[np.ndarray]) -> list[np.ndarray]:
        """Projection (if any) and L2 normalisation of token states."""
        out = []
        for h in hidden:
            v = h @ self.projection if self.projection is not None else h
            out.append((v / np.linalg.norm(v, axis=1, keepdims=True).clip(min=1e-12)).astype(np.float32))
        return out

    def set_projection(self, projection: np.ndarray | None, kind: str) -> None:
        self.projection = None if projection is None else np.asarray(projection, np.float32)
        self.projection_kind = kind

    def encode(self, texts: Sequence[str], is_query: bool = False,
               progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        return self.project(self.hidden(texts, is_query, progress))

    def hidden(self, texts: Sequence[str], is_query: bool = False,
               progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """Token states in fixed steps of texts, so the same texts always batch the same way."""
        out: list[np.ndarray] = []
        step = self.cfg.batch_size * 8
        for i in range(0, len(texts), step):
            out.extend(self.hidden_states(texts[i:i + step], is_query))
            if progress is not None:
                progress(min(step, len(texts) - i))
        return out


def tiny_bert(folder: Path, seed: int = 0, hidden: int = 32, vocab_words: Sequence[str] = ()) -> Path:
    """Save a tiny random BERT to ``folder`` with a word-level vocabulary of the most frequent
    words of ``vocab_words`` (texts) plus punctuation (tests build their encoders with it)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    from collections import Counter

    counts = Counter(w for text in vocab_words for w in re.findall(r"[a-z0-9]+", text.lower()))
    words = sorted(w for w, _ in counts.most_common(3000))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.punctuation,
             *"abcdefghijklmnopqrstuvwxyz0123456789", *words, "[unused0]", "[unused1]"]
    vocab = list(dict.fromkeys(vocab))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=256,
                     initializer_range=0.5)  # large random word vectors: lexical matching
    BertModel(cfg).save_pretrained(folder)
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(folder)
    return folder
