"""``mths replay`` (rerun a recorded run from its call log; every individual and score must
come out identical) and ``mths report`` (a run folder's summary), plus the run's Results."""

from __future__ import annotations

import json
import math
from pathlib import Path

from icml26_shared import Results, UserError
from icml26_shared.io import to_jsonable

from .registry import DESCRIPTOR


def _jsonl(text: str) -> list:
    """The rows of a JSONL text as written now (``to_jsonable``: -inf/NaN as null), so that a run
    recorded by an earlier version (which wrote -Infinity) compares equal to its replay."""
    return [to_jsonable(json.loads(x)) for x in text.splitlines() if x.strip()]


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path.parent} is not an mths run folder (no {path.name})") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: corrupt ({exc})") from None


def run_results(search, llm, ev, meta: dict) -> Results:
    """An ``icml26_shared.Results`` for one run (train scores; no held-out split here)."""
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=int(meta["seed"]))
    for t, (s, i) in search.archive.items():
        res.add(f"train_{t}", meta["method"], "best_train_score", s, seeds=[meta["seed"]], individual=i)
    res.add("search", meta["method"], "calls", llm.calls, seeds=[meta["seed"]])
    res.add("search", meta["method"], "evaluations", ev.evaluations, seeds=[meta["seed"]])
    res.add("search", meta["method"], "invalid", search.invalid, seeds=[meta["seed"]])
    res.add("search", meta["method"], "transfer_elites", search.transfer_elites(), seeds=[meta["seed"]])
    res.notes.append(f"mths run: {meta['method']} with llm={meta['llm']} (scale field 'full' = a user run)")
    return res


def replay(run: Path, out: Path, staging) -> str:
    from .cli import _train_instances
    from .llm import ReplayLLM, read_log
    from .pipeline import config_from_meta, run_search, save_run

    meta = _read_json(run / "run.json")
    records = read_log(run / "calls.jsonl")
    cfg, lim = config_from_meta(meta)

    class A:
        instances = meta.get("instances")

    train = _train_instances(A, meta["tasks"])
    search, llm, ev = run_search(meta["method"], meta["tasks"], train, ReplayLLM(records), meta["budget_calls"],
                                 lim, meta["workers"], meta["seed"], cfg)
    with staging(out) as tmp:
        save_run(tmp, search, llm, ev, meta)
        run_results(search, llm, ev, meta).to_json(tmp / "results.json")
    old = _jsonl((run / "lineage.jsonl").read_text())
    new = _jsonl((out / "lineage.jsonl").read_text())
    same = old == new and (run / "calls.jsonl").read_text() == (out / "calls.jsonl").read_text()
    n = len(new)
    if not same:
        raise UserError(f"replay of {run} differs from the record (see {out}/lineage.jsonl)")
    return f"replayed {llm.calls} calls: {n} individuals, every program and score identical -> {out}"


def report(run: Path) -> str:
    from . import lineage as L

    meta = _read_json(run / "run.json")
    rows = [json.loads(x) for x in (run / "lineage.jsonl").read_text().splitlines() if x.strip()]
    g = _read_json(run / "lineage.json") if (run / "lineage.json").is_file() else L.build(
        rows, meta["archive"], meta.get("best_individual"))
    sm = L.summary(g)
    lines = [f"run {run}: {meta['method']} on {', '.join(meta['tasks'])} with llm={meta['llm']}, seed {meta['seed']}",
             f"calls {meta['calls']} / {meta['budget_calls']}, evaluations {meta['evaluations']}, "
             f"invalid replies {meta['invalid']}, individuals {sm['individuals']}, lineage edges {sm['edges']}",
             "operators: " + ", ".join(f"{k} {v}" for k, v in sm["operators"].items()),
             f"archive elites from transfer: {sm['elites_from_transfer']} of {len(sm['elites'])} "
             f"(with a transfer into the same task among their ancestors: {sm['elites_with_transfer_ancestor']})",
             "archive elites by operator: " + ", ".join(f"{k} {v}" for k, v in sm["elites_by_operator"].items())]
    for t, a in sorted(meta["archive"].items()):
        s = a["score"]
        e = sm["elites"].get(t, {})
        lines.append(f"  {t}: best train gap {(-s if s is not None and math.isfinite(s) else float('nan')):.4%} "
                     f"(individual {a['individual']}, {e.get('op')}" + (f" from {e['donor']}" if e.get("donor") else "")
                     + ")")
    best = run / "best" / "metaheuristic.md"
    if best.is_file():
        lines.append("best metaheuristic: " + best.read_text().splitlines()[0])
    if (run / "lineage.dot").is_file():
        lines.append(f"lineage graph: {run / 'lineage.json'} (node-link), {run / 'lineage.dot'} (Graphviz)")
    return "\n".join(lines)
