"""The task-agnostic metaheuristic loop every program runs, driven by its CONFIG [R].

A program is deterministic for a seed as long as its ``steps`` budget binds before
``time_limit`` (CPU seconds, ``time.process_time``): the step budget counts main-loop iterations.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

DEFAULTS: dict[str, Any] = {
    "init": "greedy", "pool": 1, "improve": "best", "accept": "better", "temp": 0.01,
    "credit": "uniform", "polish": False, "strength": 2, "restart_after": 20,
}


class Clock:
    def __init__(self, time_limit: float):
        self.start = time.process_time()
        self.limit = float(time_limit)

    def out(self) -> bool:
        return time.process_time() - self.start > self.limit


def ils(problem, cfg: dict, time_limit: float, steps: int, seed: int):
    """Initialisation (pool of constructions + local search), main loop (perturb, improve,
    accept, credit) and post-processing (polish); returns the best solution seen."""
    c = {**DEFAULTS, **cfg}
    rng = np.random.default_rng(seed)
    clock = Clock(time_limit)
    pool = []
    for k in range(max(1, int(c["pool"]))):
        randomized = c["init"] != "greedy" and (k > 0 or c["init"] == "randomized")
        s = problem.construct(c["construct"], c["key"], rng, randomized)
        pool.append(problem.local_search(s, c["ops"], c["improve"], clock))
        if clock.out():
            break
    costs = [problem.cost(s) for s in pool]
    best = pool[int(np.argmin(costs))]
    best_cost = min(costs)
    cur, cur_cost = best, best_cost
    perturbs = list(c["perturbs"]) or [problem.PERTURBS[0]]
    credit = np.ones(len(perturbs))
    scale = abs(best_cost) / max(problem.size, 1)
    temp0 = float(c["temp"]) * max(scale, 1e-9) * 10.0
    stall = 0
    for it in range(int(steps)):
        if clock.out():
            break
        if c["credit"] == "adaptive":
            k = int(rng.choice(len(perturbs), p=credit / credit.sum()))
        else:
            k = int(rng.integers(len(perturbs)))
        new = problem.perturb(cur, perturbs[k], int(c["strength"]), c["key"], rng)
        new = problem.local_search(new, c["ops"], c["improve"], clock)
        new_cost = problem.cost(new)
        accept = new_cost < cur_cost - 1e-12
        if not accept and c["accept"] == "threshold":
            accept = new_cost <= cur_cost * (1.0 + float(c["temp"]))
        elif not accept and c["accept"] == "annealing":
            t = temp0 * (1.0 - it / max(int(steps), 1)) + 1e-12
            accept = rng.random() < math.exp(-(new_cost - cur_cost) / t)
        if new_cost < best_cost - 1e-12:
            best, best_cost, stall = new, new_cost, 0
            credit[k] += 1.0
        else:
            stall += 1
        if accept:
            cur, cur_cost = new, new_cost
        if c["accept"] == "restart" and stall >= int(c["restart_after"]):
            cur, cur_cost, stall = best, best_cost, 0
    if c["polish"] and not clock.out():
        best = problem.local_search(best, problem.OPS, "best", clock)
    return problem.export(best)


def solve(task: str, data: dict, cfg: dict, time_limit: float, steps: int, seed: int = 0):
    """Run ``ils`` on one instance of ``task`` (tsp, cvrp, fssp, bpp) given as a dict of arrays."""
    from . import bpp, cvrp, fssp, tsp

    problem = {"tsp": tsp.TSP, "cvrp": cvrp.CVRP, "fssp": fssp.FSSP, "bpp": bpp.BPP}[task](**data)
    return ils(problem, cfg, time_limit, steps, seed)
