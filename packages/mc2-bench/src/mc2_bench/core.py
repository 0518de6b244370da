"""The paper's maths as pure functions: prompts, answer mapping, ratios, directions, steering.

No I/O, no logging, no global state. Array inputs are NumPy (torch tensors go through
``np.asarray``); the steering update ``steer_update`` is written for torch tensors.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .config import ANSWER_INSTRUCTION, CONTEXT_PREFIX, FOLLOW, MODES


@dataclass(frozen=True)
class MC2Item:
    """One image-text conflict [C] evaluate_final.json: the image supports ``answer_vision``, the
    text ``context`` supports the counterfactual ``answer_text``."""

    id: str
    task: str
    question: str
    answer_vision: str
    answer_text: str
    context: str
    image: str = ""  # path of the image file (resolved by io.load_mc2)


def options(item: MC2Item, order: int) -> tuple[str, str]:
    """(option A, option B): order 0 puts the vision answer first, order 1 swaps them [C]."""
    if order not in (0, 1):
        raise ValueError(f"order must be 0 or 1, got {order}")
    return (item.answer_vision, item.answer_text) if order == 0 else (item.answer_text, item.answer_vision)


def prompt_text(item: MC2Item, mode: str, order: int, follow: str | None = None) -> str:
    """The text part of the authors' prompt [C]: context (unless base_image), instruction (icc),
    question, the two options, and the answer instruction. The image goes in by the processor."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (choose one of {', '.join(MODES)})")
    a, b = options(item, order)
    parts = []
    if mode != "base_image":
        parts.append(CONTEXT_PREFIX + item.context)
    if mode == "icc":
        if follow not in FOLLOW:
            raise ValueError("icc needs follow='vision' or 'text'")
        parts.append(FOLLOW[follow])
    parts += [item.question, f"A. {a}\nB. {b}", ANSWER_INSTRUCTION]
    return "\n".join(parts)


def uses_image(mode: str) -> bool:
    return mode != "base_text"


_LETTER = re.compile(r"\b([AB])\b")


def parse_letter(text: str) -> str | None:
    """The first standalone A or B in a generated answer ("B", "B.", "Answer: A"); None if none or
    both appear first-equal (an invalid answer) [C]-style parsing."""
    text = text.strip()
    if not text:
        return None
    if text[0] in "AB" and (len(text) == 1 or not text[1].isalpha()):
        return text[0]
    m = _LETTER.search(text)
    return m.group(1) if m else None


def letter_to_modality(letter: str | None, order: int) -> str | None:
    """"A" in order 0 and "B" in order 1 both name the vision answer."""
    if letter not in ("A", "B"):
        return None
    first = "vision" if order == 0 else "text"
    return first if letter == "A" else ("text" if first == "vision" else "vision")


def modality_to_letter(modality: str, order: int) -> str:
    return "A" if (modality == "vision") == (order == 0) else "B"


def preference_metrics(mod0: Sequence[str | None], mod1: Sequence[str | None]) -> dict[str, float]:
    """Ratios from the modalities chosen per item in order 0 and order 1 (None = invalid) [C].

    vision_ratio = #vision / #valid answers (both orders pooled), text_ratio likewise;
    order_consistency = share of items valid in both orders whose two answers name one modality;
    invalid_rate = share of the 2n answers that were invalid; n_valid = #valid answers. With no
    valid answer the ratios are NaN (``null`` in JSON, "n/a" in text)."""
    if len(mod0) != len(mod1):
        raise ValueError("both orders need one answer per item")
    answers = list(mod0) + list(mod1)
    valid = [m for m in answers if m is not None]
    nv = len(valid)
    both = [(a, b) for a, b in zip(mod0, mod1) if a is not None and b is not None]
    return {
        "vision_ratio": sum(m == "vision" for m in valid) / nv if nv else float("nan"),
        "text_ratio": sum(m == "text" for m in valid) / nv if nv else float("nan"),
        "order_consistency": sum(a == b for a, b in both) / len(both) if both else float("nan"),
        "invalid_rate": 1.0 - nv / len(answers) if answers else float("nan"),
        "n_items": float(len(mod0)),
        "n_valid": nv,
        "n_valid_both_orders": len(both),
    }


def item_scores(mod0: Sequence[str | None], mod1: Sequence[str | None], target: str) -> np.ndarray:
    """Per-item share of the two orders answered with ``target`` (invalid counts as 0). This is
    the basis of instruction following (all answers) and of the paired steering figures; the
    ratios' own intervals are ``ratio_intervals``."""
    return np.array([((a == target) + (b == target)) / 2.0 for a, b in zip(mod0, mod1)])


def ratio_intervals(mod0: Sequence[str | None], mod1: Sequence[str | None], n_resamples: int = 1999,
                    confidence: float = 0.95, seed: int = 0) -> dict:
    """Percentile bootstrap intervals on the ratios' own basis [R]: items are resampled (an item's
    two orders together); each resample's vision (text) ratio is #vision (#text) / #valid answers,
    as for the point estimate, and its order consistency is #consistent / #items valid in both
    orders. Resamples without a valid answer (or without an item valid in both orders) are
    dropped and counted. Returns ``{"vision_ratio_ci", "text_ratio_ci", "order_consistency_ci",
    "resamples_dropped": {"ratios", "order_consistency"}}``; an interval is [NaN, NaN] when no
    answer is valid. (A percentile bootstrap: the core's ``paired_interval`` resamples means of
    per-unit values, not a ratio of two sums.)"""
    if len(mod0) != len(mod1):
        raise ValueError("both orders need one answer per item")
    a, b = np.array(mod0, dtype=object), np.array(mod1, dtype=object)
    vis = (a == "vision").astype(float) + (b == "vision")
    txt = (a == "text").astype(float) + (b == "text")
    valid = vis + txt
    both = ((a != None) & (b != None)).astype(float)  # noqa: E711
    cons = both * (a == b)
    nan2 = [float("nan"), float("nan")]
    out = {"vision_ratio_ci": nan2, "text_ratio_ci": nan2, "order_consistency_ci": nan2,
           "resamples_dropped": {"ratios": n_resamples, "order_consistency": n_resamples}}
    n = len(a)
    if n == 0:
        return out
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    q = [(1 - confidence) / 2, (1 + confidence) / 2]

    def ci(num, den, key):
        d = den[idx].sum(1)
        keep = d > 0
        out["resamples_dropped"][key] = int((~keep).sum())
        if not keep.any():
            return nan2
        return [float(x) for x in np.quantile(num[idx].sum(1)[keep] / d[keep], q)]
    out["vision_ratio_ci"] = ci(vis, valid, "ratios")
    out["text_ratio_ci"] = ci(txt, valid, "ratios")
    out["order_consistency_ci"] = ci(cons, both, "order_consistency")
    return out


# --- directions ----------------------------------------------------------------------------------

def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    if n == 0.0:
        raise ValueError("zero direction")
    return v / n


def diffmean_direction(h_vision: np.ndarray, h_text: np.ndarray) -> np.ndarray:
    """mean(h | follow image) - mean(h | follow text) [C] pca.py centroid arrow (unnormalised)."""
    return np.asarray(h_vision, float).mean(0) - np.asarray(h_text, float).mean(0)


def pca_direction(h_vision: np.ndarray, h_text: np.ndarray) -> np.ndarray:
    """Top principal component of the paired differences, signed toward vision [R]. Unpaired
    groups of different sizes (the ``answer`` contrast) use the top PC of the pooled states
    (centred on their pooled mean), signed toward the vision group [R]."""
    hv, ht = np.asarray(h_vision, float), np.asarray(h_text, float)
    if hv.shape == ht.shape:
        d = hv - ht
        _, _, vt = np.linalg.svd(d, full_matrices=False)  # uncentred: the mean shift dominates
    else:
        x = np.concatenate([hv, ht])
        _, _, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)
        d = hv.mean(0, keepdims=True) - ht.mean(0, keepdims=True)
    v = vt[0]
    return v if float(d.mean(0) @ v) >= 0 else -v


def probe_direction(h_vision: np.ndarray, h_text: np.ndarray, seed: int = 0) -> np.ndarray:
    """Weight vector of a logistic-regression probe (vision = 1) fitted on standardised features,
    mapped back to the raw space [R]. The L2 penalty acts in standardised space, so on separable
    data the vector leans away from the centroid difference (cosine ~0.87 in the planted test)."""
    from sklearn.linear_model import LogisticRegression

    x = np.concatenate([h_vision, h_text]).astype(float)
    y = np.r_[np.ones(len(h_vision)), np.zeros(len(h_text))]
    mu, sd = x.mean(0), x.std(0) + 1e-8
    clf = LogisticRegression(C=1.0, max_iter=2000, random_state=seed).fit((x - mu) / sd, y)
    return clf.coef_[0] / sd


def random_direction(dim: int, seed: int) -> np.ndarray:
    """The control: a uniformly random unit direction (matched norm after normalisation)."""
    return _unit(np.random.default_rng(seed).standard_normal(dim))


def preference_direction(h_vision, h_text, method: str = "diffmean", seed: int = 0) -> np.ndarray:
    """Unit preference direction pointing from follow-text toward follow-image states."""
    fns = {"diffmean": diffmean_direction, "pca": pca_direction,
           "probe": lambda a, b: probe_direction(a, b, seed)}
    if method == "random":
        return random_direction(np.asarray(h_vision).shape[1], seed)
    if method not in fns:
        raise ValueError(f"unknown direction {method!r} (choose diffmean, pca, probe or random)")
    return _unit(fns[method](np.asarray(h_vision, float), np.asarray(h_text, float)))


def probe_accuracy(train_x, train_y, test_x, test_y, seed: int = 0) -> float:
    """Held-out accuracy of a linear probe (standardised logistic regression) [C]-style probing."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed))
    clf.fit(np.asarray(train_x, float), np.asarray(train_y))
    return float((clf.predict(np.asarray(test_x, float)) == np.asarray(test_y)).mean())


# --- steering update -----------------------------------------------------------------------------

def steer_update(h, v_hat, alpha: float, mask=None, amps: tuple[float, float] | None = None):
    """h + alpha * v_hat * ||h|| at the positions in ``mask`` (torch tensors, h: (B, T, d),
    mask: (B, T) bool or None = all) [R] RepE-style, alpha > 0 toward vision.

    ``amps=(c_vision, c_text)``, the mean normalised projections <h, v_hat>/||h|| of follow-image
    and follow-text states, turns on per-instance scaling [R] (after AMPS, arXiv 2602.12533): each
    position's step is scaled by how far its own projection still is from the target side,
    w = clip((c_target - c) / (c_vision - c_text), 0, 1), so states already on the target side
    are left almost untouched. alpha = 0 returns ``h`` itself (bit-identical)."""
    import torch

    if alpha == 0.0:
        return h
    v = v_hat.to(h.dtype)
    norm = h.norm(dim=-1, keepdim=True)
    step = alpha * norm * v
    if amps is not None:
        c_vis, c_txt = amps
        span = (c_vis - c_txt) or 1e-6
        c = (h @ v).unsqueeze(-1) / norm.clamp_min(1e-12)
        target = c_vis if alpha > 0 else c_txt
        w = ((target - c) / span) * (1.0 if alpha > 0 else -1.0)
        step = step * w.clamp(0.0, 1.0)
    if mask is not None:
        step = step * mask.unsqueeze(-1).to(h.dtype)
    return h + step if mask is None else torch.where(mask.unsqueeze(-1), h + step, h)


def monotone_share(xs: Sequence[float]) -> float:
    """Share of consecutive steps of a sweep that do not go down (1 = monotone non-decreasing)."""
    d = np.diff(np.asarray(xs, float))
    return float((d >= -1e-12).mean()) if d.size else 1.0


def cost_upper_bound(acc0: Sequence[float], acc: Sequence[float], confidence: float = 0.95) -> float:
    """One-sided upper confidence bound of the mean accuracy cost mean(acc0 - acc) over paired
    items: the upper end of a two-sided (2 * confidence - 1) BCa bootstrap interval [R]."""
    from icml26_shared.eval import paired_interval

    d = np.asarray(acc0, float) - np.asarray(acc, float)
    return float(paired_interval(d, confidence=2.0 * confidence - 1.0, n_resamples=1999).high)


def choose_flip_alpha(rows: Sequence[dict], shift: float = 0.25, max_cost: float = 0.02,
                      confidence: float | None = None) -> dict:
    """The dev rule for the alpha that "flips" the preference [R] (0.2.5): the smallest alpha whose
    vision ratio moved by >= ``shift`` from alpha = 0 (toward vision for alpha > 0) AND whose
    single-modality accuracy fell by <= ``max_cost``; if no alpha keeps the cost, the smallest
    alpha that shifts (its cost reported); if none shifts, the alpha that shifts most.
    ``confidence`` (0.2.6): the cost compared with ``max_cost`` is then the one-sided upper
    confidence bound of the dev cost over items (``cost_upper_bound``; rows need per-item
    ``accuracy_scores``), so a dev cost that is small by chance does not pass.
    ``rows``: dicts with ``alpha``, ``vision_ratio``, ``single_accuracy`` (one at alpha = 0).
    Returns {"alpha", "shift", "cost", "cost_bound", "within_cost", "shifted"}."""
    zero = next(r for r in rows if r["alpha"] == 0.0)
    pos = sorted((r for r in rows if r["alpha"] > 0), key=lambda r: r["alpha"])
    if not pos:
        raise ValueError("the flip rule needs positive alphas")

    def info(r):
        s = r["vision_ratio"] - zero["vision_ratio"]
        c = zero["single_accuracy"] - r["single_accuracy"]
        b = c if confidence is None else cost_upper_bound(zero["accuracy_scores"], r["accuracy_scores"],
                                                          confidence)
        return {"alpha": r["alpha"], "shift": s, "cost": c, "cost_bound": b,
                "within_cost": b <= max_cost + 1e-12, "shifted": s >= shift - 1e-12}
    cands = [info(r) for r in pos]
    for pick in ([c for c in cands if c["shifted"] and c["within_cost"]], [c for c in cands if c["shifted"]]):
        if pick:
            return pick[0]
    return max(cands, key=lambda c: c["shift"])
