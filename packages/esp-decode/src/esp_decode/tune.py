"""``esp-decode tune``: each drafter's settings chosen on the user's own (dev) prompts.

The criterion is fixed before the run: the highest mean accepted length over the prompts; grid
points within 2 % of the best tie, and the tie goes to fewer items per call (the cheaper call on a
GPU); tokens/s is recorded beside, never used. ESP's grid is pruned in three stages, each keeping
the criterion's choice so far: every mask init with masks on the best path (``attach="top"``,
top-K (8, 4, 2, 2), 48 nodes); that init's other top-K x node budgets; then ``attach="all"`` for
the best point only (its calls cost ~3x a "top" call on a CPU). 3 + 2 + 1 ESP points, 2 LADE
(LADE's (5, 7, 7) and (4, 5, 5)), 2 PLD (transformers' (10, 2, 1 match) and 4 matches), 2 STAND:
13 points, sized to ~10 CPU-min for SmolLM2-135M on 12 prompts x 32 tokens on one CPU thread.
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
    # LADE's README example (5, 7, 7) and two smaller windows [C/R]
    "lade": [LADEConfig(ngram=n, window=w, guesses=g) for n, w, g in ((5, 7, 7), (4, 5, 5))],
    # transformers' prompt lookup (10 tokens, 2-gram, 1 match) and several matches merged [C/R]
    "pld": [PLDConfig(num_pred=p, max_ngram=n, max_matches=m) for p, n, m in ((10, 2, 1), (10, 2, 4))],
    # STAND's store size, one drafting shape [R]
    "stand": [STANDConfig(store_topk=k) for k in (4, 8)],
}


def esp_stage1() -> list[ESPConfig]:
    """Every mask init, masks on the best path, top-K (8, 4, 2, 2), 48 nodes."""
    return [ESPConfig(mask_init=m, attach="top", topk=TOPKS[0], max_nodes=48)
            for m in ("prompt_mean", "context_mean", "vocab_mean")]


def esp_stage2(best: ESPConfig) -> list[ESPConfig]:
    """The best init with the wider first level (16, 4, 2, 2) at 48 nodes, and with 32 nodes
    (still ``attach="top"``)."""
    return [replace(best, topk=TOPKS[1]), replace(best, max_nodes=NODES[0])]


def choose(rows: list[dict]) -> int:
    """Index of the chosen grid point: best ``accepted``; within ``TIE`` of it, fewest ``items``
    (then the earlier point)."""
    best = max(r["accepted"] for r in rows)
    close = [i for i, r in enumerate(rows) if r["accepted"] >= (1 - TIE) * best]
    return min(close, key=lambda i: (rows[i]["items"], i))


def score(model, prompts, name, kw, tokens, eos, batch: int = 1) -> dict:
    from .baselines import make_drafter
    from .core import mean_accepted_length
    from .decode import generate

    mal, items, toks, secs = [], [], 0, 0.0
    for i in range(0, len(prompts), batch):
        chunk = prompts[i: i + batch]
        t0 = time.perf_counter()
        new, stats = generate(model, chunk, make_drafter(name, eos_token_id=eos, **kw), tokens, eos_token_id=eos)
        secs += time.perf_counter() - t0
        for n, st in zip(new, stats, strict=True):
            toks += len(n)
            mal.append(mean_accepted_length(len(n), st["model_calls"]))
            items.extend(st["items"][1:])   # the prefill's call is not a drafting call
    return {"accepted": float(np.nanmean(mal)), "items": float(np.mean(items)) if items else 1.0,
            "tokens_per_s": toks / secs if secs else None}


def _grid_rows(model, prompts, name, section, grid, tokens, eos, log, batch=1):
    rows = []
    for cfg in grid:
        r = score(model, prompts, name, {section: cfg}, tokens, eos, batch)
        rows.append({"config": cfg, **r})
        log(f"{name:<6} {cfg}: accepted {r['accepted']:.3f}, items {r['items']:.1f}")
    return rows


def tune(model, prompts, drafters, tokens, eos=None, log=lambda s: None, batch: int = 1) -> dict:
    """``{section: {"chosen": config, "rows": [...]}}`` for each drafter in ``drafters``
    (``esp``, ``pld``, ``lade``, ``stand``); ``batch`` prompts decode together (per-row trees in
    one padded call: the same accepted lengths, cheaper on a CPU; tokens/s is then the batch's)."""
    out = {}
    for name in drafters:
        if name == "esp":
            rows = _grid_rows(model, prompts, "esp", "esp", esp_stage1(), tokens, eos, log, batch)
            best = rows[choose(rows)]["config"]
            rows += _grid_rows(model, prompts, "esp", "esp", esp_stage2(best), tokens, eos, log, batch)
            best = rows[choose(rows)]["config"]
            rows += _grid_rows(model, prompts, "esp", "esp", [replace(best, attach="all")], tokens, eos, log, batch)
        elif name in GRIDS:
            rows = _grid_rows(model, prompts, name, name, GRIDS[name], tokens, eos, log, batch)
        else:
            raise ValueError(f"tune has no grid for drafter {name!r}")
        out[name] = {"chosen": rows[choose(rows)]["config"], "rows": rows}
    return out
