"""The algorithms behind ``optimize(algo=...)``: MES-RET and its ablations, and the baselines on
the same tasks, the same evaluation counter and the same per-task random streams. A new variant is
one decorated function ``fn(tasks, fe_per_task, seed, **config) -> Result``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from icml26_shared import UserError

from . import core
from .algorithm import MESRET, Result, TaskCMA, task_rng
from .config import MESRETConfig, MFEAConfig, OpenAIESConfig, default_popsize
from .tasks import check_tasks, evaluate, to_real

ALGOS: dict[str, Callable[..., Result]] = {}
MESRET_KEYS = set(MESRETConfig.__dataclass_fields__)


def register(name: str):
    def deco(fn):
        ALGOS[name] = fn
        return fn
    return deco


def _mesret_cfg(config: dict, **fixed) -> MESRETConfig:
    unknown = set(config) - MESRET_KEYS
    if unknown:
        raise UserError(f"unknown option(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(MESRET_KEYS))})")
    try:
        cfg = MESRETConfig(**{**config, **fixed})
        cfg.validate()
    except (TypeError, ValueError) as exc:
        raise UserError(str(exc)) from None
    return cfg


def _run_mesret(tasks, fe_per_task, seed, cfg) -> Result:
    return MESRET(tasks, cfg, seed=seed, max_fe=fe_per_task * len(tasks)).run()


@register("mesret")
def mesret(tasks, fe_per_task, seed=0, **config):
    return _run_mesret(tasks, fe_per_task, seed, _mesret_cfg(config))


@register("smesret")
def smesret(tasks, fe_per_task, seed=0, **config):
    return _run_mesret(tasks, fe_per_task, seed, _mesret_cfg(config, separable=True))


@register("mesret-norwe")
def mesret_norwe(tasks, fe_per_task, seed=0, **config):
    """Ablation: no reward-weighted evaluation (the budget stays evenly split)."""
    return _run_mesret(tasks, fe_per_task, seed, _mesret_cfg(config, allocation="none"))


@register("mesret-tau0")
def mesret_tau0(tasks, fe_per_task, seed=0, **config):
    """Ablation: no transfer (τ = 0)."""
    return _run_mesret(tasks, fe_per_task, seed, _mesret_cfg(config, tau=0.0))


class IndependentCMA(MESRET):
    """One CMA-ES per task on an even split of the budget, each with its own IPOP restart
    (σ·max(|p_c|, std) < 1e-12 → λ doubled for that task alone)."""

    def eps_fe(self, t: int) -> int:
        return int(self.fe_used[t]) * self.T  # the task's own share of the schedule

    def run(self) -> Result:
        share = self.max_fe // self.T
        for t in range(self.T):
            while self.fe_used[t] + self.es[t].lam <= share:
                self.generation(t)
                e = self.es[t]
                if e.stopped or core.should_stop(e.sigma, e.pc, e.C, e.separable, self.cfg.stop_tol):
                    self.restarts += 1
                    self.es[t] = TaskCMA(e.n, e.lam * self.cfg.restart_factor, self.cfg.sigma0, e.separable,
                                         self.rngs[t])
                    self.prev[t] = None
        return self.result()


@register("indep-cma")
def indep_cma(tasks, fe_per_task, seed=0, **config):
    cfg = _mesret_cfg(config, tau=0.0, allocation="none")
    return IndependentCMA(tasks, cfg, seed=seed, max_fe=fe_per_task * len(tasks)).run()


@register("indep-sepcma")
def indep_sepcma(tasks, fe_per_task, seed=0, **config):
    cfg = _mesret_cfg(config, tau=0.0, allocation="none", separable=True)
    return IndependentCMA(tasks, cfg, seed=seed, max_fe=fe_per_task * len(tasks)).run()


class _Tracker:
    """Best-so-far and the evaluation counter for the non-CMA baselines."""

    def __init__(self, tasks):
        self.tasks = check_tasks(tasks)
        T = len(self.tasks)
        self.best_f, self.best_cv = np.full(T, np.inf), np.full(T, np.inf)
        self.best_x = [np.full(t.dim, np.nan) for t in self.tasks]
        self.fe_used = np.zeros(T, dtype=np.int64)

    def __call__(self, t: int, X: np.ndarray) -> np.ndarray:
        f, cv = evaluate(self.tasks[t], t, X)
        self.fe_used[t] += len(f)
        b = np.lexsort((f, cv))[0]
        if (cv[b], f[b]) < (self.best_cv[t], self.best_f[t]):
            self.best_cv[t], self.best_f[t] = cv[b], f[b]
            self.best_x[t] = to_real(self.tasks[t], X[b])
        return f + 1e12 * cv  # constraint violation dominates (static penalty) [R]

    def result(self, **info) -> Result:
        return Result(self.best_f.copy(), [x.copy() for x in self.best_x], self.fe_used.copy(), info=info)


@register("openai-es")
def openai_es(tasks, fe_per_task, seed=0, popsize=None, sigma=None, lr=None, momentum=None, sigma_unit=None):
    """``sOpenAI_ES.m`` [C]: antithetic pairs, centred ranks, momentum; the mean is evaluated too.
    ``sigma`` is in the task's units (divided by its mean range); ``sigma_unit`` sets the
    unified-box σ directly."""
    base = OpenAIESConfig()
    sigma, lr = base.sigma if sigma is None else sigma, base.lr if lr is None else lr
    momentum = base.momentum if momentum is None else momentum
    ev = _Tracker(tasks)
    N = int(popsize or default_popsize(max(t.dim for t in ev.tasks)))
    N += N % 2
    for t, task in enumerate(ev.tasks):
        rng = task_rng(seed, t)
        lo, hi = task.bounds()
        s = sigma_unit if sigma_unit is not None else sigma / float(np.mean(hi - lo))
        x = rng.uniform(size=(N, task.dim)).mean(axis=0)
        v = np.zeros(task.dim)
        while ev.fe_used[t] + N + 1 <= fe_per_task:
            Zh = rng.standard_normal((N // 2, task.dim))
            Z = np.vstack([Zh, -Zh])
            f = ev(t, np.vstack([x + s * Z, x[None]]))[:N]
            ranks = np.empty(N)
            ranks[np.argsort(f, kind="stable")] = np.arange(N - 1, -1, -1)
            grad = Z.T @ (ranks / (N - 1) - 0.5) / (N * s)
            v = momentum * v + (1 - momentum) * grad
            x = x + lr * v
    return ev.result(sigma=sigma, sigma_unit=sigma_unit, lr=lr)


def _sbx(p1, p2, mu, rng):
    u = rng.random(p1.shape)
    beta = np.where(u <= 0.5, (2 * u) ** (1 / (mu + 1)), (2 * (1 - u)) ** (-1 / (mu + 1)))
    c1 = 0.5 * ((1 + beta) * p1 + (1 - beta) * p2)
    c2 = 0.5 * ((1 - beta) * p1 + (1 + beta) * p2)
    return np.clip(c1, 0, 1), np.clip(c2, 0, 1)


def _poly_mutation(x, mu, rng):
    D = x.shape[-1]
    mask = rng.random(x.shape) < 1.0 / D
    u = rng.random(x.shape)
    delta = np.where(u <= 0.5, (2 * u) ** (1 / (1 + mu)) - 1, 1 - (2 * (1 - u)) ** (1 / (1 + mu)))
    y = np.where(u <= 0.5, x + delta * x, x + delta * (1 - x))
    return np.clip(np.where(mask, y, x), 0, 1)


@register("mfea")
def mfea(tasks, fe_per_task, seed=0, rmp=None, pop_per_task=None):
    """MFEA [C: MToP's MFEA operators]: one population in [0, 1]^Dmax with skill factors; parents of
    different tasks mate (SBX) with probability rmp, children imitate one parent's task; each
    child is evaluated on its own task only; elitist selection inside each task's sub-population.
    Skill factors are assigned evenly at initialisation (no all-task evaluation) [R]."""
    base = MFEAConfig()
    rmp = base.rmp if rmp is None else rmp
    P = int(pop_per_task or base.pop_per_task)
    ev = _Tracker(tasks)
    T, Dmax = len(ev.tasks), max(t.dim for t in ev.tasks)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2**20 + 3]))
    pop = rng.random((T * P, Dmax))
    skill = np.repeat(np.arange(T), P)
    fit = np.empty(T * P)
    for t in range(T):
        idx = np.flatnonzero(skill == t)
        fit[idx] = ev(t, pop[idx, : ev.tasks[t].dim])
    while ev.fe_used.sum() + T * P <= fe_per_task * T:
        perm = rng.permutation(T * P)
        kids, kskill = np.empty_like(pop), np.empty_like(skill)
        for a, b, k in zip(perm[0::2], perm[1::2], range(0, T * P, 2), strict=False):
            if skill[a] == skill[b] or rng.random() < rmp:
                c1, c2 = _sbx(pop[a], pop[b], base.mu_c, rng)
                kids[k], kids[k + 1] = _poly_mutation(c1, base.mu_m, rng), _poly_mutation(c2, base.mu_m, rng)
                kskill[k] = skill[a] if rng.random() < 0.5 else skill[b]
                kskill[k + 1] = skill[a] if rng.random() < 0.5 else skill[b]
            else:
                kids[k], kids[k + 1] = _poly_mutation(pop[a], base.mu_m, rng), _poly_mutation(pop[b], base.mu_m, rng)
                kskill[k], kskill[k + 1] = skill[a], skill[b]
        kfit = np.empty(T * P)
        for t in range(T):
            idx = np.flatnonzero(kskill == t)
            if idx.size:
                kfit[idx] = ev(t, kids[idx, : ev.tasks[t].dim])
        allp, alls, allf = np.vstack([pop, kids]), np.concatenate([skill, kskill]), np.concatenate([fit, kfit])
        keep = np.concatenate([np.flatnonzero(alls == t)[np.argsort(allf[alls == t], kind="stable")[:P]]
                               for t in range(T)])
        pop, skill, fit = allp[keep], alls[keep], allf[keep]
    return ev.result(rmp=rmp)


def optimize(tasks, algo: str = "mesret", fe_per_task: int = 10_000, seed: int = 0,
             backend: str = "numpy", **config) -> Result:
    """Run one algorithm on a task list with ``fe_per_task × T`` evaluations in all."""
    tasks = check_tasks(tasks)
    if algo not in ALGOS:
        raise UserError(f"unknown algo {algo!r} (choose from {', '.join(ALGOS)})")
    if backend not in ("numpy", "jax"):
        raise UserError(f"unknown backend {backend!r} (numpy or jax)")
    if backend == "jax":
        from .jax_backend import check_jax_tasks, jit_tasks

        check_jax_tasks(tasks)
        tasks = jit_tasks(tasks)
    lam = int(config.get("popsize") or default_popsize(max(t.dim for t in tasks)))
    if isinstance(fe_per_task, bool) or not isinstance(fe_per_task, (int, np.integer)) or fe_per_task < lam + 1:
        raise UserError(f"fe_per_task must be an integer >= one generation per task ({lam + 1}), got {fe_per_task!r}")
    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(1, "blas"):  # tiny eigendecompositions: threads only contend
            return ALGOS[algo](tasks, int(fe_per_task), int(seed), **config)
    except TypeError as exc:
        if "unexpected keyword" in str(exc):
            raise UserError(f"{algo}: {exc}".replace("()", "")) from None
        raise
