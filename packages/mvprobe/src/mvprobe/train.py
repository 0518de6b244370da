"""One trainer for every torch learner (MVProbe, ProbeX, the ablations, flat linear / MLP) and the
metrics of the paper: per-label accuracy at p ≥ 0.5, exact-subset accuracy and mAP.

Training follows the authors' loop [C]: Adam (lr, weight decay 1e-5), shuffled minibatches of 128,
BCE-with-logits, the epoch with the best validation per-label accuracy kept. Early stopping after
``patience`` epochs without improvement is ours [R] (the authors run all 3000 epochs).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import TrainConfig


def per_label_accuracy(probs: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> float:
    """The paper's metric: mean over models and labels of [p ≥ threshold] == label."""
    return float(((np.asarray(probs) >= threshold) == (np.asarray(labels) > 0.5)).mean())


def exact_subset_accuracy(probs: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> float:
    """Fraction of models whose whole predicted label set is right."""
    hit = (np.asarray(probs) >= threshold) == (np.asarray(labels) > 0.5)
    return float(hit.all(axis=1).mean())


def mean_average_precision(probs: np.ndarray, labels: np.ndarray) -> float:
    """Macro mAP over labels (scikit-learn ``average_precision_score``); labels with one value only
    in ``labels`` are skipped."""
    from sklearn.metrics import average_precision_score

    labels = np.asarray(labels) > 0.5
    keep = [k for k in range(labels.shape[1]) if 0 < labels[:, k].sum() < labels.shape[0]]
    if not keep:
        return float("nan")
    return float(average_precision_score(labels[:, keep], np.asarray(probs)[:, keep], average="macro"))


def metrics(probs: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    return {"per_label_accuracy": per_label_accuracy(probs, labels, threshold),
            "exact_subset_accuracy": exact_subset_accuracy(probs, labels, threshold),
            "mAP": mean_average_precision(probs, labels)}


@dataclass
class History:
    best_epoch: int = 0
    best_val_accuracy: float = float("nan")
    epochs_run: int = 0
    train_loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    val_epochs: list[int] = field(default_factory=list)


def converged(best_epoch: int, epochs: int, patience: int | None) -> bool:
    """A run counts as converged when its kept epoch sits more than ``patience`` epochs before the
    cap: had the cap been hit while it still improved, a longer budget could have kept a later one.
    Without patience (every epoch run) the window is a tenth of the cap."""
    window = patience if patience is not None else max(1, epochs // 10)
    return best_epoch <= epochs - window


def _logits(model: nn.Module, X: torch.Tensor, batch: int = 512) -> torch.Tensor:
    was = model.training
    model.eval()
    with torch.no_grad():
        out = torch.cat([model(X[i:i + batch]) for i in range(0, len(X), batch)])
    model.train(was)
    return out


def predict_proba(model: nn.Module, X: torch.Tensor, batch: int = 512) -> np.ndarray:
    """Sigmoid probabilities ``[N, K]``."""
    return torch.sigmoid(_logits(model, X, batch)).cpu().numpy()


def fit(model: nn.Module, X: torch.Tensor, Y: torch.Tensor, cfg: TrainConfig,
        X_val: torch.Tensor | None = None, Y_val: torch.Tensor | None = None,
        progress=None) -> History:
    """Train ``model`` (logits ``[B, K]`` from inputs ``[B, ...]``) with BCE on multi-hot ``Y``.

    With validation data the weights of the best validation epoch (per-label accuracy, ties
    broken by the lower validation loss) are restored at the end; ``cfg.patience`` stops early.
    Batches come from a local generator seeded by ``cfg.seed``; torch's global random state is left
    as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)  # dropout-free models: only for layers that might draw
        return _fit(model, X, Y, cfg, X_val, Y_val, progress)


def _fit(model, X, Y, cfg, X_val, Y_val, progress) -> History:
    g = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    hist = History()
    best_key, best_state, stale = (-math.inf, -math.inf), None, 0
    n = len(X)
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        order = torch.randperm(n, generator=g)
        total = 0.0
        for i in range(0, n, cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            loss = F.binary_cross_entropy_with_logits(model(X[idx]), Y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        hist.train_loss.append(total / n)
        hist.epochs_run = epoch
        if not math.isfinite(hist.train_loss[-1]):
            break
        if X_val is None or epoch % cfg.eval_every:
            continue
        logits = _logits(model, X_val)
        acc = per_label_accuracy(torch.sigmoid(logits).cpu().numpy(), Y_val.cpu().numpy())
        vloss = float(F.binary_cross_entropy_with_logits(logits, Y_val))
        hist.val_accuracy.append(acc)
        hist.val_epochs.append(epoch)
        if (acc, -vloss) > best_key:
            best_key, stale = (acc, -vloss), 0
            best_state = copy.deepcopy(model.state_dict())
            hist.best_epoch, hist.best_val_accuracy = epoch, acc
        else:
            stale += cfg.eval_every
            if cfg.patience is not None and stale >= cfg.patience:
                break
        if progress is not None:
            progress(epoch, acc)
    if best_state is not None:
        model.load_state_dict(best_state)
    else:
        hist.best_epoch = hist.epochs_run
    return hist
