"""The search: MTHS (two-level, multi-task, with transfer), MTHS without transfer, EoH (one
search per task, calls split evenly) and random search (a fresh program per call, tasks in turn:
the trivial anchor), all on the same evaluator and call budget [R]."""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import core
from .config import SearchConfig
from .llm import BudgetExhausted, EndpointError, LoggedLLM, build_prompt, parse_mh, parse_program
from .sandbox import Limits, run_jobs
from .tasks import Instance, get_task


@dataclass
class Individual:
    id: int
    metaheuristic: str | None
    programs: dict[str, str | None]
    scores: dict[str, float]
    fitness: float = -math.inf
    lineage: dict[str, Any] = field(default_factory=dict)


class Evaluator:
    """Scores programs on each task's training instances in the sandbox (cached by source)."""

    def __init__(self, instances: dict[str, list[Instance]], limits: Limits, workers: int = 1, seed: int = 0):
        self.instances, self.limits, self.workers, self.seed = instances, limits, workers, seed
        self.cache: dict[str, float] = {}
        self.evaluations = 0  # program x task evaluations actually run (cache misses)

    def scores(self, progs: dict[str, str | None]) -> dict[str, float]:
        out, jobs, keys = {}, [], []
        for t, src in progs.items():
            if src is None:
                out[t] = -math.inf
                continue
            key = t + hashlib.sha256(src.encode()).hexdigest()
            if key in self.cache:
                out[t] = self.cache[key]
                continue
            keys.append((t, key, len(jobs), len(self.instances[t])))
            jobs += [(get_task(t), src, inst) for inst in self.instances[t]]
        res = run_jobs(jobs, self.limits, self.workers, self.seed) if jobs else []
        for t, key, start, n in keys:
            self.evaluations += 1
            s = core.task_score([r["gap"] if r["gap"] is not None else math.inf for r in res[start:start + n]])
            self.cache[key] = out[t] = s
        return out


class Search:
    def __init__(self, tasks: list[str], llm: LoggedLLM, evaluator: Evaluator, cfg: SearchConfig,
                 norm: dict[str, float], seed: int = 0, method: str = "mths"):
        self.tasks, self.llm, self.ev, self.cfg, self.norm = tasks, llm, evaluator, cfg, norm
        self.rng = np.random.default_rng(seed)
        self.method = method
        self.population: list[Individual] = []
        self.history: list[Individual] = []
        self.archive: dict[str, tuple[float, int]] = {}
        self.invalid = 0
        self.stopped: str | None = None  # why the run stopped before its budget (endpoint failure)
        #: (calls made so far, task, train score) for every evaluated program: the best-so-far curves
        self.trace: list[tuple[int, str, float]] = []

    # ---------------------------------------------------------------- shared machinery
    def _ask_program(self, op: str, task: str, **kw) -> str | None:
        src = parse_program(self.llm(build_prompt(op, task, **kw), op, task), task)
        self.invalid += src is None
        return src

    def _ask_mh(self, op: str, **kw) -> str | None:
        mh = parse_mh(self.llm(build_prompt(op, None, **kw), op, None))
        self.invalid += mh is None
        return mh

    def _add(self, mh, progs, lineage, pool: list[Individual], inherit: Individual | None = None):
        """Evaluate the new programs ``progs``; the other tasks' programs and scores are
        inherited unchanged from ``inherit`` (a lower-level step rewrites one task)."""
        scores = {t: s for t, s in inherit.scores.items() if t not in progs} if inherit else {}
        full = {t: p for t, p in inherit.programs.items() if t not in progs} if inherit else {}
        scores.update(self.ev.scores(progs))
        full.update(progs)
        ind = Individual(len(self.history), mh, full, scores, lineage=lineage)
        ind.fitness = core.aggregate_fitness({t: scores[t] for t in self.tasks_of(ind)}, self.norm)
        self.history.append(ind)
        core.update_archive(self.archive, {t: scores[t] for t in progs}, ind.id)
        self.trace += [(self.llm.calls, t, scores[t]) for t in progs]
        pool.append(ind)
        return ind

    def tasks_of(self, ind: Individual) -> list[str]:
        return [t for t in self.tasks if t in ind.scores]

    def _select(self, pool: list[Individual], n: int) -> list[Individual]:
        keep = core.select_top([i.fitness for i in pool], n)
        return [pool[k] for k in sorted(keep)]

    def _tournament(self, pool: list[Individual]) -> Individual:
        k = self.rng.choice(len(pool), min(self.cfg.tournament, len(pool)), replace=False)
        return max((pool[i] for i in k), key=lambda i: (i.fitness, -i.id))

    def _scores_str(self, ind: Individual) -> str:
        return ", ".join(f"{t}={ind.scores[t]:.4f}" for t in self.tasks_of(ind))

    # ---------------------------------------------------------------- MTHS
    def run(self) -> None:
        try:
            if self.method == "eoh":
                self._run_eoh()
            elif self.method == "random":
                self._run_random()
            else:
                self._run_mths(self.cfg.p_transfer if self.method == "mths" else 0.0)
        except BudgetExhausted:
            pass  # the run stops exactly at its call budget; a half-built individual is dropped
        except EndpointError as exc:  # the endpoint failed past its retries: stop, keep what was done
            self.stopped = str(exc)

    def _instantiate_all(self, mh: str | None, parent: Individual | None) -> dict[str, str | None]:
        progs = {}
        for t in self.tasks:
            extra = (parent.programs[t],) if parent and parent.programs.get(t) else ()
            # an invalid metaheuristic still costs its instantiation calls (the LLM is asked)
            progs[t] = self._ask_program("instantiate", t, mhs=(mh or "",), programs=extra)
        return progs

    def _run_mths(self, p_transfer: float) -> None:
        cfg = self.cfg
        pop = self.population
        while len(pop) < cfg.pop:
            mh = self._ask_mh("init_mh")
            progs = self._instantiate_all(mh, None)
            self._add(mh, progs, {"op": "init"}, pop)
        step = 0
        while True:
            kind = cfg.schedule[step % len(cfg.schedule)]
            step += 1
            if kind == "upper":
                a = self._tournament(pop)
                if self.rng.random() < cfg.p_crossover and len(pop) > 1:
                    b = self._tournament([i for i in pop if i is not a])
                    mh = self._ask_mh("crossover_mh", mhs=(a.metaheuristic or "", b.metaheuristic or ""),
                                      scores=f"{self._scores_str(a)} | {self._scores_str(b)}")
                    lin = {"op": "crossover", "parents": [a.id, b.id]}
                else:
                    mh = self._ask_mh("mutate_mh", mhs=(a.metaheuristic or "",), scores=self._scores_str(a))
                    lin = {"op": "mutation", "parents": [a.id]}
                self._add(mh, self._instantiate_all(mh, a), lin, pop)
            else:
                a = self._tournament(pop)
                t = self.tasks[int(self.rng.integers(len(self.tasks)))]
                donors = [d for d in self.tasks if d != t and d in self.archive]
                mh = a.metaheuristic or ""
                if donors and self.rng.random() < p_transfer:
                    d = donors[int(self.rng.integers(len(donors)))]
                    elite = self.history[self.archive[d][1]]
                    src = self._ask_program("transfer", t, mhs=(mh,), donor_task=d,
                                            programs=(a.programs.get(t) or "", elite.programs[d] or ""),
                                            scores=f"{t}={a.scores.get(t, -math.inf):.4f}, {d}={self.archive[d][0]:.4f}")
                    lin = {"op": "transfer", "parents": [a.id, elite.id], "task": t, "donor": d}
                elif self.rng.random() < self.cfg.p_keyfn and a.programs.get(t):
                    src = self._ask_program("keyfn", t, programs=(a.programs[t],))
                    lin = {"op": "keyfn", "parents": [a.id], "task": t}
                else:
                    src = self._ask_program("refine", t, mhs=(mh,), programs=(a.programs.get(t) or "",),
                                            scores=self._scores_str(a))
                    lin = {"op": "refine", "parents": [a.id], "task": t}
                self._add(a.metaheuristic, {t: src}, lin, pop, inherit=a)
            pop[:] = self._select(pop, cfg.pop)

    # ---------------------------------------------------------------- EoH
    def _run_eoh(self) -> None:
        """One EoH search per task; the call budget is split evenly between them."""
        T = len(self.tasks)
        shares = [self.llm.budget // T + (k < self.llm.budget % T) for k in range(T)]
        total = self.llm.budget
        used = 0
        for t, share in zip(self.tasks, shares):
            used += share
            self.llm.budget = used  # this task's search stops at its share
            pool: list[Individual] = []
            try:
                while len(pool) < self.cfg.eoh_pop:
                    src = self._ask_program("eoh_init", t)
                    self._add(None, {t: src}, {"op": "eoh_init", "task": t}, pool)
                step = 0
                while True:
                    op = self.cfg.eoh_schedule[step % len(self.cfg.eoh_schedule)]
                    step += 1
                    if op in ("e1", "e2"):
                        idx = self.rng.choice(len(pool), min(self.cfg.n_parents, len(pool)), replace=False)
                        ps = [pool[i] for i in sorted(idx)]
                    else:
                        ps = [self._tournament(pool)]
                    src = self._ask_program(op, t, programs=tuple(p.programs[t] or "" for p in ps),
                                            scores=", ".join(f"{p.scores[t]:.4f}" for p in ps))
                    self._add(None, {t: src}, {"op": op, "parents": [p.id for p in ps], "task": t}, pool)
                    pool[:] = self._select(pool, self.cfg.eoh_pop)
            except BudgetExhausted:
                pass
            except EndpointError:
                self.population += pool
                self.llm.budget = total
                raise
            self.population += pool
        self.llm.budget = total
        raise BudgetExhausted

    # ---------------------------------------------------------------- random search
    def _run_random(self) -> None:
        """A fresh program per call (EoH's initialisation prompt, no parent), tasks in turn."""
        k = 0
        while True:
            t = self.tasks[k % len(self.tasks)]
            k += 1
            self._add(None, {t: self._ask_program("eoh_init", t)}, {"op": "random", "task": t}, [])  # no population

    def best_so_far(self, task: str, budget: int) -> list[float]:
        """The best train score on ``task`` after each call 1..budget (-inf before the first)."""
        out, best, events = [], -math.inf, sorted((c, s) for c, t, s in self.trace if t == task)
        j = 0
        for call in range(1, budget + 1):
            while j < len(events) and events[j][0] <= call:
                best = max(best, events[j][1])
                j += 1
            out.append(best)
        return out

    # ---------------------------------------------------------------- results
    def best_programs(self) -> dict[str, str]:
        return {t: self.history[i].programs[t] for t, (_, i) in self.archive.items()}

    def best_individual(self) -> Individual | None:
        cands = [i for i in self.history if i.metaheuristic and math.isfinite(i.fitness)]
        return max(cands, key=lambda i: (i.fitness, -i.id)) if cands else None

    def transfer_elites(self) -> int:
        """How many per-task archive elites came out of the transfer operator."""
        return sum(self.history[i].lineage.get("op") == "transfer" for _, i in self.archive.values())

    def lineage(self) -> list[dict]:
        return [{**{k: v for k, v in asdict(i).items() if k not in ("programs", "metaheuristic")},
                 "program_sha": {t: (hashlib.sha256(s.encode()).hexdigest()[:12] if s else None)
                                 for t, s in i.programs.items()}} for i in self.history]
