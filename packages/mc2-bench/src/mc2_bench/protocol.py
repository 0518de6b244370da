"""The MC2 protocol over any adapter: evaluate a mode in both option orders, fit a preference
direction on hidden states, and sweep steering strengths against a control."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from icml26_shared.eval import paired_interval

from .core import (
    MC2Item,
    item_scores,
    letter_to_modality,
    preference_direction,
    preference_metrics,
    ratio_intervals,
)
from .steering import SteeringHook


def _modalities(adapter, items, mode, order, answer_mode, follow=None):
    recs = adapter.answer(items, mode, order, answer_mode, follow)
    for r in recs:
        r["modality"] = letter_to_modality(r["letter"], order)
        r["valid"] = r["modality"] is not None
    return recs


def _ci(x: np.ndarray) -> list[float]:
    iv = paired_interval(x, n_resamples=1999)
    return [iv.low, iv.high]


def evaluate(adapter, items: Sequence[MC2Item], mode: str = "single", answer_mode: str = "letter",
             follow: str | None = None, per_item: bool = False) -> dict:
    """Metrics of one mode over both option orders (icc: both instruction directions unless
    ``follow`` names one) [C]: vision/text ratios, order consistency, invalid rate, per-task ratios,
    instruction following (icc), and 95% bootstrap intervals over items."""
    items = list(items)
    follows = ([follow] if follow else ["vision", "text"]) if mode == "icc" else [None]
    records = []
    for fol in follows:
        r0 = _modalities(adapter, items, mode, 0, answer_mode, fol)
        r1 = _modalities(adapter, items, mode, 1, answer_mode, fol)
        for it, a, b in zip(items, r0, r1):
            records.append({"id": it.id, "task": it.task, "mode": mode, "answer_mode": answer_mode,
                            "follow": fol,
                            "prompt_order0": a["prompt"], "prompt_order1": b["prompt"],
                            "answer_order0": a["text"], "answer_order1": b["text"],
                            "letter_order0": a["letter"], "letter_order1": b["letter"],
                            "modality_order0": a["modality"], "modality_order1": b["modality"],
                            "valid_order0": a["valid"], "valid_order1": b["valid"]})
    out = evaluate_records(records, items, mode, answer_mode)
    if not per_item:
        out.pop("records")
    return out


def with_intervals(m0, m1) -> dict:
    """``preference_metrics`` plus its intervals on the same basis (``core.ratio_intervals``)."""
    met = preference_metrics(m0, m1)
    met.update(ratio_intervals(m0, m1))
    return met


def evaluate_records(records: Sequence[dict], items: Sequence[MC2Item] | None = None,
                     mode: str | None = None, answer_mode: str | None = None) -> dict:
    """``evaluate``'s summary from its per-item records (what sharded processes gather, and what
    ``report`` reads back from ``--per-item``: without ``items`` the tasks and the mode come from
    the records)."""
    records = list(records)
    if mode is None:
        mode = records[0].get("mode", "single") if records else "single"
    if answer_mode is None:
        answer_mode = records[0].get("answer_mode") if records else None
    follows = list(dict.fromkeys(r.get("follow") for r in records))
    ids = list(dict.fromkeys(r["id"] for r in records)) if items is None else [it.id for it in items]
    tasks = sorted({r.get("task", "unknown") for r in records} if items is None else {it.task for it in items})
    out: dict = {"mode": mode, "answer_mode": answer_mode, "n_items": len(ids)}
    for fol in follows:
        recs = [r for r in records if r.get("follow") == fol]
        m0, m1 = [r["modality_order0"] for r in recs], [r["modality_order1"] for r in recs]
        met = with_intervals(m0, m1)
        met["per_task"] = {t: with_intervals([r["modality_order0"] for r in recs if r.get("task", "unknown") == t],
                                             [r["modality_order1"] for r in recs if r.get("task", "unknown") == t])
                           for t in tasks}
        if fol is not None:
            sc = item_scores(m0, m1, fol)
            met["instruction_following"] = float(sc.mean())
            met["instruction_following_ci"] = _ci(sc)
            met["instruction_following_basis"] = "all answers (an invalid answer counts as not following)"
        out[f"follow_{fol}" if fol else "all"] = met
    if mode == "icc":
        out["instruction_following"] = float(np.mean([out[f"follow_{f}"]["instruction_following"]
                                                      for f in follows]))
        out["instruction_following_basis"] = "all answers (an invalid answer counts as not following)"
        for k in ("vision_ratio", "text_ratio", "order_consistency", "invalid_rate"):
            out[k] = float(np.mean([out[f"follow_{f}"][k] for f in follows]))
        out["n_valid"] = int(sum(out[f"follow_{f}"]["n_valid"] for f in follows))
        out["per_task"] = out[f"follow_{follows[0]}"]["per_task"]
    else:
        out.update(out.pop("all"))
    out["records"] = records
    return out


def metrics_from_records(records: Sequence[dict]) -> dict:
    """``evaluate``'s JSON recomputed from per-item records (what ``--per-item`` writes)."""
    out = evaluate_records(records)
    out.pop("records")
    return out


CONTRASTS = ("instruction", "answer")


def split_fit_eval(items: Sequence[MC2Item], fraction: float = 0.5, seed: int = 0):
    """(fit items, evaluation items): within each task a seeded random ``fraction`` of the items
    (at least one, and at least one left when the task has two) fits; both lists keep the input
    order. ``steer``'s default, so a direction is never scored on the items it was fitted on."""
    items = list(items)
    rng = np.random.default_rng(seed)
    fit_idx: set[int] = set()
    for task in sorted({it.task for it in items}):
        idx = [i for i, it in enumerate(items) if it.task == task]
        k = int(round(fraction * len(idx)))
        k = min(max(k, 1), len(idx) - 1) if len(idx) >= 2 else 0
        fit_idx.update(int(i) for i in rng.permutation(idx)[:k])
    fit = [it for i, it in enumerate(items) if i in fit_idx]
    evaluated = [it for i, it in enumerate(items) if i not in fit_idx]
    return fit, evaluated


def state_position(positions: str) -> str:
    """Where a direction for a hook at ``positions`` is fitted: the last prompt position for
    ``all`` / ``generated`` [C] (the authors' probe position), else the mean over the same
    position set the hook touches [R]."""
    return "last" if positions in ("all", "generated") else positions


def hidden_pairs(adapter, items, layer: int, contrast: str = "instruction",
                 answer_mode: str = "letter", at: str = "last") -> tuple[np.ndarray, np.ndarray]:
    """States at ``layer`` of the two groups a preference direction separates, both option
    orders stacked: at the last prompt position, or averaged over ``at`` (``state_position``).

    ``instruction`` [C]: icc prompts told to follow the image vs the text (the authors probe and
    plot these, pca.py). ``answer`` [R]: the no-instruction conflict prompts (``single``) grouped
    by the model's own answer, vision vs text: the preference as the model expresses it."""
    kw = {} if at == "last" else {"at": at}  # adapters without position sets keep working
    if contrast == "instruction":
        hv = np.concatenate([adapter.hidden(items, "icc", o, "vision", **kw)[:, layer] for o in (0, 1)])
        ht = np.concatenate([adapter.hidden(items, "icc", o, "text", **kw)[:, layer] for o in (0, 1)])
        return hv, ht
    if contrast != "answer":
        raise ValueError(f"unknown contrast {contrast!r} (choose one of {', '.join(CONTRASTS)})")
    hs, mods = [], []
    for o in (0, 1):
        hs.append(adapter.hidden(items, "single", o, **kw)[:, layer])
        mods += [r["modality"] for r in _modalities(adapter, items, "single", o, answer_mode)]
    h, m = np.concatenate(hs), np.array(mods, dtype=object)
    hv, ht = h[m == "vision"], h[m == "text"]
    if len(hv) == 0 or len(ht) == 0:
        raise ValueError("the answer contrast needs items answered with each modality "
                         f"(got {len(hv)} vision, {len(ht)} text answers)")
    return hv, ht


def fit_direction(adapter, items, layer: int, method: str = "diffmean", seed: int = 0,
                  contrast: str = "instruction", answer_mode: str = "letter", at: str = "last"):
    """(unit direction, amps stats (c_vision, c_text)) at one layer from ``hidden_pairs``."""
    hv, ht = hidden_pairs(adapter, items, layer, contrast, answer_mode, at)
    return direction_and_stats(hv, ht, method, seed)


def direction_and_stats(hv, ht, method: str = "diffmean", seed: int = 0):
    """The unit direction and the AMPS statistics (mean normalised projections of each group)."""
    v = preference_direction(hv, ht, method, seed)
    return v, amps_stats(hv, ht, v)


def amps_stats(hv, ht, v) -> tuple[float, float]:
    """(c_vision, c_text): each group's mean normalised projection <h, v_hat> / ||h|| (AMPS)."""
    v = np.asarray(v, float) / np.linalg.norm(v)
    cn = lambda h: float(np.mean(np.asarray(h, float) @ v / np.linalg.norm(h, axis=1)))  # noqa: E731
    return cn(hv), cn(ht)


def single_modality_scores(adapter, items, answer_mode) -> np.ndarray:
    """Per-item accuracy averaged over base_image (vision answer correct) and base_text (text
    answer correct), both orders."""
    mi = [[r["modality"] for r in _modalities(adapter, items, "base_image", o, answer_mode)] for o in (0, 1)]
    mt = [[r["modality"] for r in _modalities(adapter, items, "base_text", o, answer_mode)] for o in (0, 1)]
    return 0.5 * (item_scores(*mi, "vision") + item_scores(*mt, "text"))


def alpha_sweep(adapter, items, layers: Sequence[int], vector, alphas: Sequence[float],
                answer_mode: str = "letter", positions: str = "all", adaptive: str | None = None,
                amps_stats=None, accuracy: bool = True) -> list[dict]:
    """Per alpha (single mode, no instruction): vision ratio, per-item vision scores, single-
    modality accuracy, and what the hook touched. alpha = 0 equals ``evaluate(mode='single')``."""
    rows = []
    for a in alphas:
        hook = SteeringHook(layers, vector, a, positions, adaptive, amps_stats).attach(adapter)
        with hook:
            m = [[r["modality"] for r in _modalities(adapter, items, "single", o, answer_mode)] for o in (0, 1)]
            acc = single_modality_scores(adapter, items, answer_mode) if accuracy else None
        vs = item_scores(*m, "vision")
        met = preference_metrics(*m)
        rows.append({"alpha": float(a), "vision_ratio": met["vision_ratio"],
                     "invalid_rate": met["invalid_rate"], "vision_scores": vs.tolist(),
                     "single_accuracy": None if acc is None else float(acc.mean()),
                     "accuracy_scores": None if acc is None else acc.tolist(), "hook": hook.record()})
    return rows
