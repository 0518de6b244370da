"""The real-LLM row: a small MTHS search whose population is initialised by the offline grammar
operator and whose every later step (refine, key function, transfer: one program per call) is a
real LLM's reply, so an unusable reply costs one individual, never the run. Each LLM reply is
classified: a valid program, or the first way it failed (no code block, no solver class, syntax
error, raised, infeasible, timeout on a train instance); the valid programs are scored on the
held-out instances and the best held-out gap is reported (or "no valid program")."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np

from .config import SearchConfig
from .llm import GrammarLLM
from .pipeline import evaluate, mean_gap, run_search
from .sandbox import Limits
from .tasks import Instance, get_task

FAILURES = ("no_code_block", "no_solver_class", "syntax", "raised", "infeasible", "timeout")
_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)


def reply_failure(reply: str, task: str) -> str | None:
    """Why ``parse_program`` finds no program in ``reply`` (None: it finds one)."""
    m = _FENCE.search(reply)
    src = m.group(1) if m else reply
    if f"class {get_task(task).solver_class}" not in src:  # an opened fence (even unclosed) is a code block
        return "no_solver_class" if m or "```" in reply else "no_code_block"
    try:
        compile(src, "<reply>", "exec")
    except (SyntaxError, ValueError):
        return "syntax"
    return None


def rows_failure(rows: list[dict]) -> str | None:
    """The worst outcome over a program's instances (None: feasible on every one)."""
    status = {r.get("status") for r in rows}
    if "timeout" in status:
        return "timeout"
    if "error" in status:
        return "raised"
    if not all(r["feasible"] for r in rows):
        return "infeasible"
    return None


class GrammarFirst:
    """The first ``n`` calls go to the grammar operator (the initial population), the rest to
    ``then`` (the real LLM); ``name`` follows the client that answered last."""

    def __init__(self, seed: int, then, n: int):
        self.first, self.then, self.n, self.k = GrammarLLM(seed), then, n, 0
        self.name = "grammar"

    def complete(self, prompt: str) -> str:
        self.k += 1
        client = self.first if self.k <= self.n else self.then
        self.name = client.name
        return client.complete(prompt)


def real_llm_search(client, tasks: list[str], train: dict[str, list[Instance]], test: dict[str, list[Instance]],
                    calls: int, train_limits: Limits, test_limits: Limits, workers: int, seed: int,
                    cfg: SearchConfig, norm: dict[str, float]) -> dict:
    """Run the search (``cfg.pop`` grammar individuals, then ``calls`` lower-level steps by
    ``client``) and summarise the LLM's replies. Returns counts by failure kind, the valid
    programs' held-out gaps and the per-call classification."""
    init = cfg.pop * (1 + len(tasks))
    router = GrammarFirst(seed, client, init)
    search, llm, _ = run_search("mths", list(tasks), train, router, init + calls, train_limits, workers, seed,
                                replace(cfg, schedule=("lower",)), norm)
    counts = dict.fromkeys(FAILURES, 0)
    per_call, valid = [], []
    for rec in llm.log[init:]:
        t, reply = rec["task"], rec["reply"]
        kind = reply_failure(reply, t)
        src = None
        if kind is None:
            m = _FENCE.search(reply)
            src = m.group(1) if m else reply
            kind = rows_failure(evaluate(t, src, train[t], train_limits, workers, seed))
        if kind is None:
            gap = mean_gap(evaluate(t, src, test[t], test_limits, workers, seed))
            valid.append((t, gap))
        else:
            counts[kind] += 1
        per_call.append({"call": rec["call"], "operator": rec["operator"], "task": t, "outcome": kind or "valid"})
    answered = len(llm.log) - init
    best = {t: min(g for tt, g in valid if tt == t) for t in {tt for tt, _ in valid}}
    return {"calls": answered, "stopped": search.stopped,
            "parsable": sum(c["outcome"] not in ("no_code_block", "no_solver_class", "syntax") for c in per_call),
            "valid": len(valid), "failures": counts, "best_test_gap": best,
            "best_test_gap_any": min(best.values()) if best else math.nan,
            "per_call": per_call, "log": llm.log[init:], "model": getattr(client, "name", "?"),
            "seconds": round(float(llm.seconds), 1), "mean_valid_gap": float(np.mean([g for _, g in valid]))
            if valid and all(math.isfinite(g) for _, g in valid) else math.nan}
