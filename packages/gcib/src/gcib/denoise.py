"""Denoising diagnostics: does the learned keep probability separate injected (fake) auxiliary
edges from real ones? AUROC of p_e (real = positive), the share of noise the test-time mask
removes and the share of real edges it keeps."""

from __future__ import annotations

import numpy as np

from .data import Split
from .model import GCIBModel, keep_probabilities, kept_mask


def auroc(positive: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve by the Mann-Whitney rank formula (ties count one half); equals
    ``sklearn.metrics.roc_auc_score`` (tested) without importing scikit-learn."""
    from scipy.stats import rankdata

    positive = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(score)
    return float((r[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _metrics(p: np.ndarray, kept: np.ndarray, is_noise: np.ndarray) -> dict[str, float]:
    real = ~is_noise
    return {
        "auroc": auroc(real, p),
        "noise_removed": float((~kept[is_noise]).mean()) if is_noise.any() else float("nan"),
        "real_kept": float(kept[real].mean()) if real.any() else float("nan"),
        "keep_rate": float(kept.mean()) if len(kept) else float("nan"),
        "n_noise": int(is_noise.sum()),
        "n_real": int(real.sum()),
    }


def denoise_metrics(model: GCIBModel, split: Split, mask_mode, labels: dict[str, np.ndarray] | None = None
                    ) -> dict[str, dict[str, float]]:
    """Per auxiliary behaviour, against ``labels[b]`` (is-noise per training edge, in the split's
    edge order) or the split's own noise labels."""
    probs = keep_probabilities(model)
    kept = kept_mask(model, mask_mode)
    labels = labels or split.train_noise
    return {b: _metrics(probs[b], kept[b], np.asarray(labels[b], dtype=bool)) for b in model.aux}


def labels_for_split(split: Split, rows: list[tuple[str, str, str, bool]]) -> dict[str, np.ndarray]:
    """Map a labels file's (user id, item id, behaviour, is_noise) rows onto the split's training
    edges; pairs absent from the labels count as real."""
    d = split.data
    uix = {u: k for k, u in enumerate(d.user_ids)}
    iix = {i: k for k, i in enumerate(d.item_ids)}
    noisy: dict[str, set[int]] = {}
    for u, i, b, flag in rows:
        if flag and u in uix and i in iix:
            noisy.setdefault(b, set()).add(uix[u] * d.n_items + iix[i])
    out = {}
    for b in d.auxiliary:
        u, i = split.train[b]
        keys = u * d.n_items + i
        s = noisy.get(b, set())
        out[b] = np.fromiter((k in s for k in keys.tolist()), dtype=bool, count=len(keys))
    return out
