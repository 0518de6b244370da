"""MES-RET (``MES_RET.m`` / ``sMES_RET.m`` [C]) as an ask/tell object over many tasks.

Each task owns its CMA-ES state and its own random stream (``task_rng(seed, t)``), so a task's
samples never depend on how the other tasks are scheduled; the reward coin flips and the roulette
draws use one separate stream. ``run()`` is the authors' outer loop: self-evolution of every task,
the fitness/diversity reward, reward-weighted knowledge extraction, T roulette-drawn generations,
the stop rule and the IPOP-like restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import core
from .config import MESRETConfig, default_popsize
from .tasks import TaskSpec, check_first_generation, check_tasks, evaluate, to_real

CURVE_POINTS = 50  # error-vs-evaluations checkpoints per run (+ the start) [R]


def task_rng(seed: int, t: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(t), 7]))


class CurveLog:
    """Each task's best objective at ``k + 1`` evenly spaced checkpoints of a clock running from 0
    to ``max_fe`` evaluations (all tasks together). Arms that interleave tasks (MES-RET, MFEA) use
    the global evaluation count; arms that run the tasks one after another on an even split use
    T × the task's own count, i.e. the clock of running them side by side. A checkpoint takes the
    best after the first generation that reaches it (one generation of slack) [R]."""

    def __init__(self, T: int, max_fe: int, k: int = CURVE_POINTS):
        self.k, self.max_fe = int(k), max(int(max_fe), 1)
        self.best = np.full((T, self.k + 1), np.nan)
        self.last = np.full(T, -1, dtype=np.int64)

    def log(self, t: int, clock: int, best: float) -> None:
        j = min(self.k, int(clock) * self.k // self.max_fe)
        if j > self.last[t]:
            self.best[t, self.last[t] + 1: j + 1] = best
            self.last[t] = j

    def finish(self, best_f: np.ndarray) -> np.ndarray:
        """``[T, k + 1]`` best objective per checkpoint (the final best carried to the end)."""
        out = self.best.copy()
        for t, j in enumerate(self.last):
            out[t, j + 1:] = best_f[t]
        return out

    def fe_per_task(self, T: int) -> np.ndarray:
        """The checkpoints in evaluations per task (clock / T)."""
        return np.arange(self.k + 1) * self.max_fe / (self.k * max(T, 1))


@dataclass
class Result:
    best_f: np.ndarray  # [T] best objective per task (feasible first)
    best_x: list[np.ndarray]  # per task, real coordinates
    fe_used: np.ndarray  # [T] evaluations spent per task
    trace_fe: list[int] = field(default_factory=list)  # total FE after each outer iteration
    trace_best: list[np.ndarray] = field(default_factory=list)  # [T] best_f at those points
    info: dict = field(default_factory=dict)  # transfer survival, allocation counts, restarts


class TaskCMA:
    """One task's CMA-ES state in the unified box (``InitCMA`` for one task [C])."""

    def __init__(self, n: int, lam: int, sigma0: float, separable: bool, rng: np.random.Generator):
        self.k = core.cma_constants(n, lam, separable)
        self.n, self.lam, self.separable = n, lam, separable
        self.m = rng.uniform(size=(lam, n)).mean(axis=0)  # [C] mean of λ uniform samples
        self.sigma = float(sigma0)
        self.C = np.ones(n) if separable else np.eye(n)
        self.B, self.D = np.eye(n), np.ones(n)
        self.ps, self.pc = np.zeros(n), np.zeros(n)
        self.gen, self.eigen_gen, self.stopped = 0, 0, False

    def std(self) -> np.ndarray:
        return np.sqrt(self.C if self.separable else np.diag(self.C))

    def sample(self, Z: np.ndarray) -> np.ndarray:
        return core.sample_normal(self.m, self.sigma, self.B, self.D, Z, self.separable, self.C)

    def update(self, X_sorted: np.ndarray) -> None:
        k = self.k
        self.m, self.sigma, self.C, self.ps, self.pc = core.cma_update(
            k, self.m, self.sigma, self.C, self.ps, self.pc, self.B, self.D, X_sorted, self.gen)
        self.gen += 1
        if self.separable:
            if not np.all(np.isfinite(self.C)) or self.C.min() <= 0:
                self.stopped = True
        elif self.gen - self.eigen_gen > 1.0 / ((k.c1 + k.cmu) * self.n * 10):  # lazy, O(n²) [C]
            self.eigen_gen = self.gen
            B, D, ok = core.eigen(self.C)
            if ok and D.min() > 0:
                self.B, self.D = B, D
            else:
                self.stopped = True


class MESRET:
    """Many-task ES: ``ask(t)`` → λ unit-box samples of task t; ``tell(t, X, f, cv)`` updates it."""

    def __init__(self, tasks: Sequence[TaskSpec], config: MESRETConfig | None = None, *, seed: int = 0,
                 max_fe: int | None = None):
        self.tasks = check_tasks(tasks)
        self.cfg = config or MESRETConfig()
        self.cfg.validate()
        self.T = len(self.tasks)
        self.dims = np.array([t.dim for t in self.tasks])
        self.N = int(self.cfg.popsize or default_popsize(int(self.dims.max())))
        self.max_fe = int(max_fe) if max_fe is not None else 10**18
        self.seed = seed
        self.rngs = [task_rng(seed, t) for t in range(self.T)]
        self.rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2**20 + 1]))
        self.fe = 0
        self.fe_used = np.zeros(self.T, dtype=np.int64)
        self.best_f = np.full(self.T, np.inf)
        self.best_cv = np.full(self.T, np.inf)
        self.best_x: list[np.ndarray] = [np.full(d, np.nan) for d in self.dims]
        self.restarts = 0
        self.survived = np.zeros(self.T)
        self.transferred = np.zeros(self.T)
        self.generations = np.zeros(self.T, dtype=np.int64)
        self.nonfinite = np.zeros(self.T, dtype=np.int64)  # NaN/inf objective values seen per task
        self.curve = CurveLog(self.T, self.max_fe if max_fe is not None else 1)
        self.reward_log: list[np.ndarray] = []  # the reward vector of every outer iteration
        self._init_all(self.N)

    # --- state ----------------------------------------------------------------------------------
    def _init_all(self, lam: int) -> None:
        self.es = [TaskCMA(int(d), lam, self.cfg.sigma0, self.cfg.separable, self.rngs[t])
                   for t, d in enumerate(self.dims)]
        Dmax = int(self.dims.max())
        self.sigma_ratio = np.ones(self.T)
        self.std_ratio = np.full((self.T, Dmax), np.nan)
        self.mdec = np.full((self.T, Dmax), np.nan)
        self.prev: list[dict | None] = [None] * self.T
        self.obj_init = np.zeros(self.T)
        self.cv_init = np.zeros(self.T)
        self.cv_max = np.zeros(self.T)
        self.knowledge = (1.0, np.full(Dmax, np.nan), np.full(Dmax, np.nan))
        self._pending: dict[int, int] = {}

    @property
    def stopped(self) -> np.ndarray:
        return np.array([e.stopped for e in self.es])

    def transfer_on(self) -> bool:
        return self.cfg.tau_value > 0 and self.fe > self.cfg.transfer_after * self.N * self.T

    # --- ask / tell -----------------------------------------------------------------------------
    def ask(self, t: int) -> np.ndarray:
        """λ samples of task t (rows, unit box), with transferred samples first when transfer is on."""
        es, rng = self.es[t], self.rngs[t]
        if es.gen > 0:  # SavePara [C]: the state before this generation
            self.prev[t] = dict(std=es.std(), sigma=es.sigma, trace=float(np.sum(es.std() ** 2)),
                                best=(self.best_cv[t], self.best_f[t]))
        X = es.sample(rng.standard_normal((es.lam, es.n)))
        n_tr = 0
        if es.gen > 0 and self.transfer_on():
            tau = self.cfg.tau_value
            n_tr = int(np.floor(tau + 0.5)) if tau >= 1 else int(rng.random() < tau)
            n_tr = min(n_tr, es.lam // 2)
        if n_tr:
            sig_bar, std_bar, m_bar = self.knowledge
            step = float(np.mean(np.linalg.norm(X - es.m, axis=1)))
            X[:n_tr] = core.phenotypic_samples(es.m, es.sigma, es.B, es.D, rng.standard_normal((n_tr, es.n)),
                                               m_bar[: es.n], step, es.separable, es.C)
            X[n_tr:2 * n_tr] = core.genotypic_samples(es.m, es.sigma, es.C, rng.standard_normal((n_tr, es.n)),
                                                      sig_bar, std_bar[: es.n], es.separable)
        self._pending[t] = n_tr
        return X

    def tell(self, t: int, X: np.ndarray, f: np.ndarray, cv: np.ndarray | None = None) -> None:
        es = self.es[t]
        X, f = np.asarray(X, float), np.asarray(f, float)
        cv = np.zeros(len(f)) if cv is None else np.asarray(cv, float)
        if self.fe_used[t] == 0:
            check_first_generation(self.tasks[t], t, f)
        self.nonfinite[t] += int(np.sum(~np.isfinite(f)))
        self.fe += len(f)
        self.fe_used[t] += len(f)
        self.generations[t] += 1
        b = np.lexsort((f, cv))[0]
        if (cv[b], f[b]) < (self.best_cv[t], self.best_f[t]):
            self.best_cv[t], self.best_f[t] = cv[b], f[b]
            self.best_x[t] = to_real(self.tasks[t], X[b])
        self.curve.log(t, self.clock(t), self.best_f[t])
        eps = core.epsilon_level(self.eps_fe(t), self.max_fe, self.cv_max[t], self.cfg.eps_fraction, self.cfg.eps_power)
        order = core.rank_samples(X, f, cv, eps, self.cfg.bound_low, self.cfg.bound_high)
        n_tr = self._pending.pop(t, 0)
        if n_tr:
            self.transferred[t] += 2 * n_tr
            self.survived[t] += int(np.sum(order[: es.k.mu] < 2 * n_tr))
        first = es.gen == 0
        es.update(X[order])
        if first:  # InitCMA [C]: cv_max and the initial bests from the first population
            i = max(int(np.floor(self.cfg.cv_quantile * len(cv) + 0.5)), 1) - 1
            self.cv_max[t] = float(np.sort(cv)[i])
            self.obj_init[t], self.cv_init[t] = f[order[0]], cv[order[0]]
        elif self.prev[t] is not None and not es.stopped:
            self.sigma_ratio[t] = es.sigma / self.prev[t]["sigma"]
            self.std_ratio[t, : es.n] = es.std() / self.prev[t]["std"]
            self.mdec[t, : es.n] = es.m

    # --- the outer loop -------------------------------------------------------------------------
    def affordable(self, t: int) -> bool:
        return self.fe + self.es[t].lam <= self.max_fe

    def generation(self, t: int) -> None:
        X = self.ask(t)
        f, cv = evaluate(self.tasks[t], t, X)
        self.tell(t, X, f, cv)

    def rewards(self) -> np.ndarray:
        active = ~self.stopped
        if self.rng.random() < 1 - self.fe / self.max_fe:
            prev = [p["best"] if p is not None else (self.best_cv[t], self.best_f[t])
                    for t, p in enumerate(self.prev)]
            feas = self.best_cv <= 0
            old = np.array([p[1] if feas[t] else p[0] for t, p in enumerate(prev)])
            new = np.where(feas, self.best_f, self.best_cv)
            init = np.where(feas, self.obj_init, self.cv_init)
            return core.fitness_reward(old, new, init, active)
        ps = np.array([p["sigma"] if p else e.sigma for p, e in zip(self.prev, self.es, strict=True)])
        pt = np.array([p["trace"] if p else np.sum(e.std() ** 2) for p, e in zip(self.prev, self.es, strict=True)])
        s = np.array([e.sigma for e in self.es])
        tr = np.array([np.sum(e.std() ** 2) for e in self.es])
        return core.diversity_reward(ps, pt, s, tr, self.dims, active)

    def run(self) -> Result:
        """Spend the budget (``max_fe``) and return the per-task bests and traces."""
        if self.max_fe >= 10**18:
            raise ValueError("run() needs max_fe")
        alloc = np.zeros(self.T, dtype=np.int64)
        trace_fe, trace_best = [], []
        self._initial_round()
        while True:
            progressed = False
            for t in range(self.T):
                if not self.es[t].stopped and self._can_run(t):
                    self.generation(t)
                    progressed = True
            if not progressed:
                break
            reward = self.rewards()
            self.reward_log.append(np.asarray(reward, float).copy())
            self.knowledge = core.extract_knowledge(reward, self.sigma_ratio, self.std_ratio, self.mdec,
                                                    ~self.stopped)
            if self.cfg.allocation != "none":
                if self.cfg.allocation == "uniform":  # ablation: the same T extra draws, unweighted [R]
                    reward = np.where(~self.stopped, 1.0, 0.0)
                for t in core.roulette(reward, self.rng, self.T):
                    if not self.es[t].stopped and self._can_run(t):
                        self.generation(int(t))
                        alloc[t] += 1
            for e in self.es:
                if core.should_stop(e.sigma, e.pc, e.C, e.separable, self.cfg.stop_tol):
                    e.stopped = True
            if all(e.stopped for e in self.es):
                self.restarts += 1
                self._init_all(self.es[0].lam * self.cfg.restart_factor)
                self._initial_round()
            trace_fe.append(self.fe)
            trace_best.append(self.best_f.copy())
        return self.result(trace_fe, trace_best, alloc)

    def _initial_round(self) -> None:
        for t in range(self.T):  # InitCMA's first sampling and update of every task [C]
            if self._can_run(t):
                self.generation(t)

    def eps_fe(self, t: int) -> int:
        """The evaluation count the ε schedule reads (the global FE, as in MToP) [C]."""
        return self.fe

    def clock(self, t: int) -> int:
        """The evaluation count the error-vs-evaluations curve reads (global: tasks interleave)."""
        return self.fe

    def _can_run(self, t: int) -> bool:
        if self.cfg.allocation == "none":  # no reward-weighted evaluation: the even split stays [R]
            share = self.max_fe // self.T
            return self.fe_used[t] + self.es[t].lam <= share and self.affordable(t)
        return self.affordable(t)

    def result(self, trace_fe=(), trace_best=(), alloc=None) -> Result:
        with np.errstate(invalid="ignore", divide="ignore"):
            surv = np.where(self.transferred > 0, self.survived / self.transferred, np.nan)
        info = dict(restarts=self.restarts, transfer_survival=surv, extra_generations=alloc,
                    generations=self.generations.copy(), popsize=self.N,
                    nonfinite=self.nonfinite.copy(), curve=self.curve.finish(self.best_f),
                    curve_fe=self.curve.fe_per_task(self.T),
                    rewards=np.array(self.reward_log).reshape(-1, self.T))
        return Result(self.best_f.copy(), [x.copy() for x in self.best_x], self.fe_used.copy(),
                      list(trace_fe), list(trace_best), info)
