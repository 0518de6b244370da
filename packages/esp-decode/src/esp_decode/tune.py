"""``esp-decode tune``: each drafter's settings chosen on the user's own (dev) prompts.

The criterion is fixed before the run: the highest mean accepted length over the prompts; grid
points within 2 % of the best tie, and the tie goes to fewer items per call (the cheaper call on a
GPU); tokens/s is recorded beside, never used. ESP's grid is pruned in two stages: every mask init
with masks on the best path (``attach="top"``), then ``attach="all"`` for the best init only.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from .config import ESPConfig, LADEConfig, PLDConfig, STANDConfig

TIE = 0.02
TOPKS = ((8, 4, 2, 2), (16, 4, 2, 2))
NODES = (32, 48)
GRIDS = {
    # LADE's README example (5, 7, 7) and smaller windows [C/R]
    "lade": [LADEConfig(ngram=n, window=w, guesses=g) for n, w, g in ((5, 7, 7), (4, 5, 5), (3, 5, 7), (6, 7, 7))],
    # transformers' prompt lookup (10 tokens, 2-gram, 1 match) and several matches merged [C/R]
    "pld": [PLDConfig(num_pred=p, max_ngram=n, max_matches=m) for p, n, m in ((10, 2, 1), (10, 2, 4), (10, 3, 4), (6, 2, 4))],
    "stand": [STANDConfig(store_topk=k, topk=t) for k in (4, 8) for t in ((4, 2, 2, 1, 1, 1), (8, 4, 2, 1, 1, 1))],
}


def choose(rows: list[dict]) -> int:
    """Index of the chosen grid point: best ``accepted``; within ``TIE`` of it, fewest ``items``
    (then the earlier point)."""
    best = max(r["accepted"] for r in rows)
    close = [i for i, r in enumerate(rows) if r["accepted"] >= (1 - TIE) * best]
    return min(close, key=lambda i: (rows[i]["items"], i))


def score(model, prompts, name, kw, tokens, eos) -> dict:
    from .baselines import make_drafter
    from .core import mean_accepted_length
    from .decode import generate

    mal, items, toks, secs = [], [], 0, 0.0
    for p in prompts:
        t0 = time.perf_counter()
        new, st = generate(model, [p], make_drafter(name, eos_token_id=eos, **kw), tokens, eos_token_id=eos)
        secs += time.perf_counter() - t0
        toks += len(new[0])
        mal.append(mean_accepted_length(len(new[0]), st[0]["model_calls"]))
        items.extend(st[0]["items"][1:])   # the prefill's call is not a drafting call
    return {"accepted": float(np.nanmean(mal)), "items": float(np.mean(items)) if items else 1.0,
            "tokens_per_s": toks / secs if secs else None}


def _grid_rows(model, prompts, name, section, grid, tokens, eos, log):
    rows = []
    for cfg in grid:
        r = score(model, prompts, name, {section: cfg}, tokens, eos)
        rows.append({"config": cfg, **r})
        log(f"{name:<6} {cfg}: accepted {r['accepted']:.3f}, items {r['items']:.1f}")
    return rows


def tune(model, prompts, drafters, tokens, eos=None, log=lambda s: None) -> dict:
    """``{section: {"chosen": config, "rows": [...]}}`` for each drafter in ``drafters``
    (``esp``, ``pld``, ``lade``, ``stand``)."""
    out = {}
    for name in drafters:
        if name == "esp":
            stage1 = [ESPConfig(mask_init=m, attach="top", topk=t, max_nodes=n)
                      for m in ("prompt_mean", "context_mean", "vocab_mean") for t in TOPKS for n in NODES]
            rows = _grid_rows(model, prompts, "esp", "esp", stage1, tokens, eos, log)
            init = rows[choose(rows)]["config"].mask_init
            stage2 = [replace(ESPConfig(mask_init=init, topk=t, max_nodes=n), attach="all") for t in TOPKS for n in NODES]
            rows += _grid_rows(model, prompts, "esp", "esp", stage2, tokens, eos, log)
        elif name in GRIDS:
            rows = _grid_rows(model, prompts, name, name, GRIDS[name], tokens, eos, log)
        else:
            raise ValueError(f"tune has no grid for drafter {name!r}")
        out[name] = {"chosen": rows[choose(rows)]["config"], "rows": rows}
    return out
