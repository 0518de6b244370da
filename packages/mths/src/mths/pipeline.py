"""What ``mths run`` / ``eval`` / ``port`` and the reproduction share: training-score
normalisation, one search run, held-out evaluation, porting, and the run folder's files."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import dumps_json, write_json

from . import grammar as G
from . import lineage
from .config import SearchConfig
from .io import atomic_write
from .llm import BudgetExhausted, EndpointError, LoggedLLM, build_prompt, parse_program
from .sandbox import Limits, run_jobs
from .search import Evaluator, Search
from .tasks import Instance, get_task

METHODS = ("mths", "mths-notransfer", "eoh", "random")


def evaluate(task: str, src: str, instances: list[Instance], limits: Limits, workers: int = 1,
             seed: int = 0) -> list[dict]:
    t = get_task(task)
    return run_jobs([(t, src, inst) for inst in instances], limits, workers, seed)


def mean_gap(rows: list[dict]) -> float:
    g = [r["gap"] for r in rows]
    return math.inf if any(x is None or not math.isfinite(x) for x in g) else float(np.mean(g))


def norm_scores(tasks, train: dict[str, list[Instance]], limits: Limits, workers: int) -> dict[str, float]:
    out = {}
    for t in tasks:
        task = get_task(t)
        if task.baseline is None:
            raise UserError(f"task {t!r} has no normalising baseline (Task.baseline); pass norm= to run_search")
        src = task.baseline()
        out[t] = -mean_gap(evaluate(t, src, train[t], limits, workers))
    return out


def run_search(method: str, tasks: list[str], train: dict[str, list[Instance]], client, budget: int,
               limits: Limits, workers: int, seed: int, cfg: SearchConfig | None = None,
               norm: dict[str, float] | None = None) -> tuple[Search, LoggedLLM, Evaluator]:
    if method not in METHODS:
        from icml26_shared import UserError

        raise UserError(f"unknown --method {method!r} ({', '.join(METHODS)})")
    if getattr(client, "name", None) == "grammar":  # before any evaluation: one line
        G.require_components(tasks)
    cfg = cfg or SearchConfig()
    norm = norm if norm is not None else norm_scores(tasks, train, limits, workers)
    llm = LoggedLLM(client, budget)
    ev = Evaluator({t: train[t] for t in tasks}, limits, workers, seed)
    s = Search(list(tasks), llm, ev, cfg, norm, seed, method)
    s.run()
    return s, llm, ev


def port(mh: str, task: str, client, instances: list[Instance], limits: Limits, workers: int,
         seed: int = 0) -> tuple[str | None, list[dict], LoggedLLM]:
    """Give a metaheuristic and a new task's description + interface to the LLM (one call)."""
    if getattr(client, "name", None) == "grammar":
        G.require_components([task])
    llm = LoggedLLM(client, 1)
    try:
        src = parse_program(llm(build_prompt("instantiate", task, mhs=(mh,)), "instantiate", task), task)
    except BudgetExhausted:  # pragma: no cover - budget is 1
        src = None
    except EndpointError as exc:  # nothing was written yet: one line, exit 2
        raise UserError(f"the LLM call failed: {exc}") from None
    rows = evaluate(task, src, instances, limits, workers, seed) if src else [
        {"instance": i.name, "feasible": False, "cost": math.inf, "reference": i.reference, "gap": math.inf}
        for i in instances]
    return src, rows, llm


def save_run(out: Path, search: Search, llm: LoggedLLM, ev: Evaluator, meta: dict) -> None:
    """RUN/best/metaheuristic.md, RUN/best/<task>.py, calls.jsonl, lineage.jsonl, lineage.json /
    lineage.dot (the graph), run.json."""
    out = Path(out)
    best = search.best_individual()
    if best is not None and best.metaheuristic:
        atomic_write(out / "best" / "metaheuristic.md", best.metaheuristic)
    for t, src in search.best_programs().items():
        if src:
            atomic_write(out / "best" / f"{t}.py", src)
    atomic_write(out / "calls.jsonl", "".join(dumps_json(r, indent=None, sort_keys=True) + "\n" for r in llm.log))
    rows = search.lineage()
    # an invalid program's fitness is -inf: written null (strict JSON)
    atomic_write(out / "lineage.jsonl", "".join(dumps_json(r, indent=None, sort_keys=True) + "\n" for r in rows))
    archive = {t: {"score": s, "individual": i} for t, (s, i) in search.archive.items()}
    graph = lineage.build(rows, archive, None if best is None else best.id)
    write_json(out / "lineage.json", graph, indent=1, sort_keys=True)
    atomic_write(out / "lineage.dot", lineage.to_dot(graph))
    summary = {**meta, "calls": llm.calls, "evaluations": ev.evaluations, "invalid": search.invalid,
               "archive": {t: {"score": s, "individual": i} for t, (s, i) in search.archive.items()},
               "transfer_elites": search.transfer_elites(),
               "best_individual": None if best is None else best.id}
    write_json(out / "run.json", summary, indent=1, sort_keys=True)


def run_meta(method, tasks, budget, limits: Limits, workers, seed, cfg: SearchConfig, llm: str, **extra) -> dict:
    return {"method": method, "tasks": list(tasks), "budget_calls": budget, "limits": asdict(limits),
            "sandbox": limits.sandbox,
            "workers": workers, "seed": seed, "search": asdict(cfg), "llm": llm, **extra}


def config_from_meta(meta: dict) -> tuple[SearchConfig, Limits]:
    sc = meta["search"]
    cfg = replace(SearchConfig(), **{k: tuple(v) if isinstance(v, list) else v for k, v in sc.items()})
    return cfg, Limits(**meta["limits"])
