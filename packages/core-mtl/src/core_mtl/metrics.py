"""Evaluation (mIoU, pixel accuracy, depth abs / rel error, normal mean / median angle, attribute
accuracy, Delta_m%) and diagnostics: gradient conflict, CKA(z_s, z_p), the hue probe on z_s."""

from __future__ import annotations

import math

import numpy as np
import torch

from .config import TaskSpec
from .core import angle_degrees, delta_m, gradient_conflict, linear_cka
from .losses import task_losses

LOWER = {"depth_abs", "depth_rel", "normal_mean", "normal_median"}


@torch.no_grad()
def predict(models: dict, images: torch.Tensor, batch_size: int = 64) -> dict:
    """Task outputs and pooled features. ``models`` maps a task name (or ``"*"``) to a model."""
    preds: dict[str, list] = {}
    feats = {"z_s": [], "z_p": []}
    for key, model in models.items():
        model.eval()
        dev = next(model.parameters()).device
        for i in range(0, images.shape[0], batch_size):
            out = model(images[i:i + batch_size].to(dev))
            for n, v in out["tasks"].items():
                if key in ("*", n):
                    preds.setdefault(n, []).append(v.cpu().numpy())
            if key in ("*", next(iter(models))):
                feats["z_s"].append(out["z_s"].mean((2, 3)).cpu().numpy())
                if out["z_p"] is not None:
                    feats["z_p"].append(out["z_p"].cpu().numpy())
    res = {n: np.concatenate(v) for n, v in preds.items()}
    res["_z_s"] = np.concatenate(feats["z_s"])
    res["_z_p"] = np.concatenate(feats["z_p"]) if feats["z_p"] else None
    return res


def evaluate(tasks: tuple[TaskSpec, ...], preds: dict, targets: dict) -> dict[str, float]:
    m: dict[str, float] = {}
    for t in tasks:
        p, y = preds[t.name], np.asarray(targets[t.name])
        if t.kind == "segmentation":
            lab = p.argmax(1)
            valid = y >= 0
            m["seg_pixacc"] = float((lab[valid] == y[valid]).mean())
            ious = []
            for c in range(t.classes):
                inter = ((lab == c) & (y == c) & valid).sum()
                union = (((lab == c) | (y == c)) & valid).sum()
                if union > 0:
                    ious.append(inter / union)
            m["seg_miou"] = float(np.mean(ious))
        elif t.kind == "depth":
            valid = y > 0
            err = np.abs(p - y)[valid]
            m["depth_abs"] = float(err.mean())
            m["depth_rel"] = float((err / y[valid]).mean())
        elif t.kind == "normal":
            valid = np.abs(y).sum(1) > 0
            ang = angle_degrees(p, y)[valid]
            m["normal_mean"] = float(ang.mean())
            m["normal_median"] = float(np.median(ang))
        else:
            m["attr_acc"] = float(((p > 0) == (y > 0.5)).mean())
    return m


def delta_m_percent(metrics: dict[str, float], single: dict[str, float]) -> float:
    """Delta_m% against the single-task models on the same split."""
    return delta_m(metrics, single, LOWER)


def cka_streams(preds: dict) -> float:
    """CKA between pooled z_s and z_p over an evaluation set (NaN without a residual stream)."""
    return math.nan if preds.get("_z_p") is None else linear_cka(preds["_z_s"], preds["_z_p"])


def hue_probe(features: np.ndarray, hue: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Accuracy of a logistic-regression probe of the object hue from pooled z_s (fit on one half
    of a probe set whose hue is independent of class, scored on the other) and the chance rate."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(hue))
    a, b = idx[: len(idx) // 2], idx[len(idx) // 2:]
    sc = StandardScaler().fit(features[a])
    clf = LogisticRegression(max_iter=2000, C=1.0).fit(sc.transform(features[a]), hue[a])
    acc = float((clf.predict(sc.transform(features[b])) == hue[b]).mean())
    chance = float(np.bincount(hue[b]).max() / len(b))
    return acc, chance


def conflict_on(model, tasks: tuple[TaskSpec, ...], images, targets, batch_size: int = 32,
                n_batches: int = 4) -> tuple[float, float]:
    """Mean pairwise cosine and fraction negative of task gradients on the shared parameters,
    averaged over ``n_batches`` batches (model in eval mode; parameters unchanged)."""
    from .train import task_gradients

    model.eval()
    shared = model.shared_parameters()
    dev = shared[0].device
    cs, ns = [], []
    for i in range(min(n_batches, max(1, images.shape[0] // batch_size))):
        sl = slice(i * batch_size, (i + 1) * batch_size)
        out = model(images[sl].to(dev))
        L = task_losses(model.tasks, out["tasks"], {k: v[sl].to(dev) for k, v in targets.items()})
        G = task_gradients([L[t.name] for t in tasks], shared)
        c, n = gradient_conflict(G.detach().double().cpu().numpy())
        cs.append(c)
        ns.append(n)
    model.zero_grad(set_to_none=True)
    return float(np.mean(cs)), float(np.mean(ns))
