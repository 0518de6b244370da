"""``--model DIR``: fine-tune a local Hugging Face encoder (BERT, RoBERTa, MiniLM...) under any arm.

The encoder's mean-pooled output feeds the same masked multi-coalition head as the frozen-feature
path (``nbcg.train.CoalitionMLP``); the arm's loss, coalitions and weighting are those of
``nbcg.train.train`` (which shards batches over processes under ``accelerate launch``). The
encoder gets a small learning rate (``ENCODER_LR``), the head the config's [R].
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch

from icml26_shared import UserError

from .baselines import Arm
from .config import NBCGConfig
from .train import CoalitionMLP, Local, TrainLog, train

ENCODER_LR = 2e-5   # the usual BERT fine-tuning rate [R]
MAX_TOKENS = 128


def quiet() -> None:
    """No progress bars or library log lines on the user's terminal."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)


def load_encoder(model_dir: Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """(tokenizer, encoder) from a local folder, offline; ``UserError`` when it is not one."""
    from transformers import AutoModel, AutoTokenizer

    quiet()
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise UserError(f"{model_dir}: not a Hugging Face model folder (no config.json)")
    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        enc = AutoModel.from_pretrained(str(model_dir), local_files_only=True, dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"{model_dir}: cannot load the encoder ({type(exc).__name__})") from None
    return tok, enc.to(device)


class EncoderClassifier(torch.nn.Module):
    """Mean-pooled encoder output → the masked multi-coalition head."""

    def __init__(self, encoder: torch.nn.Module, hidden: int, coalitions: list[list[int]], n_labels: int,
                 masked: bool = True):
        super().__init__()
        self.encoder = encoder
        self.head = CoalitionMLP(int(encoder.config.hidden_size), hidden, coalitions, n_labels, masked=masked)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.head(pooled.float())

    def shared_params(self) -> list[torch.nn.Parameter]:
        return self.head.shared_params()


def tokenize(tok, texts: list[str], device: str = "cpu", max_tokens: int = MAX_TOKENS):
    b = tok(list(texts), padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
    return b["input_ids"].to(device), b["attention_mask"].to(device)


def fit_encoder(texts: list[str], Y: np.ndarray, coalitions: list[list[int]], arm: Arm,
                cfg: NBCGConfig, seed: int, model_dir: Path, group: Local | None = None,
                device: str = "cpu", dtype: torch.dtype = torch.float32
                ) -> tuple[EncoderClassifier, object, TrainLog]:
    """Fine-tune the encoder in ``model_dir`` and the head together; returns (model, tokenizer, log)."""
    tok, enc = load_encoder(model_dir, device, dtype)
    torch.manual_seed(seed)
    model = EncoderClassifier(enc, cfg.hidden, coalitions, Y.shape[1], masked=arm.masks).to(device)
    ids, mask = tokenize(tok, texts, "cpu")

    def forward(idx: torch.Tensor) -> torch.Tensor:
        sub = mask[idx]
        width = max(int(sub.sum(1).max()), 1)
        return model(ids[idx, :width].to(device), sub[:, :width].to(device)).cpu()

    groups = [{"params": list(model.encoder.parameters()), "lr": ENCODER_LR},
              {"params": list(model.head.parameters()), "lr": cfg.lr}]
    model.train()
    model, log = train(np.zeros((len(texts), 0), np.float32), Y, coalitions, arm, cfg, seed,
                       model=model, forward=forward, group=group, params=groups)
    model.eval()
    return model, tok, log


def encoder_scores(model: EncoderClassifier, tok, texts: list[str], device: str = "cpu",
                   batch_size: int = 32) -> np.ndarray:
    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            ids, mask = tokenize(tok, texts[s:s + batch_size], device)
            out.append(torch.sigmoid(model(ids, mask)).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.head.head.out_features), np.float32)


def pooled_features(model: EncoderClassifier, tok, texts: list[str], device: str = "cpu",
                    batch_size: int = 32) -> np.ndarray:
    """The mean-pooled encoder outputs (the head's input), without gradients."""
    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            ids, mask = tokenize(tok, texts[s:s + batch_size], device)
            h = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            out.append(((h * m).sum(1) / m.sum(1).clamp(min=1.0)).float().cpu().numpy())
    return np.concatenate(out)


def encoder_gradient_shares(model: EncoderClassifier, tok, texts: list[str], Y: np.ndarray,
                            coalitions: list[list[int]], coef: np.ndarray, device: str = "cpu") -> np.ndarray:
    """Each coalition's share of the gradient norm on the head's shared layer (the parameters
    every coalition reads), as ``train.gradient_shares`` for the frozen-feature MLP."""
    from .train import gradient_shares

    head = model.head.float().cpu()
    shares = gradient_shares(head, pooled_features(model, tok, texts, device), Y, coalitions, coef)
    model.head.to(device)
    return shares
