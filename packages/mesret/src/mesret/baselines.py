"""The algorithms behind ``optimize(algo=...)``: MES-RET and its ablations, and the baselines on
the same tasks, the same evaluation counter and the same per-task random streams. A new variant is
one decorated function ``fn(tasks, fe_per_task, seed, **config) -> Result``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from icml26_shared import UserError

from . import core
from .algorithm import MESRET, CurveLog, Result, TaskCMA, task_rng
from .config import MESRETConfig, MFEAConfig, OpenAIESConfig, default_popsize
from .tasks import check_first_generation, check_tasks, evaluate, to_real

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


@register("mesret-uniform")
def mesret_uniform(tasks, fe_per_task, seed=0, **config):
    """Ablation: the extra generations drawn uniformly over the active tasks (no reward weighting;
    the same budget use, the same random streams as ``mesret``)."""
    return _run_mesret(tasks, fe_per_task, seed, _mesret_cfg(config, allocation="uniform"))


@register("mesret-tau0")
def mesret_tau0(tasks, fe_per_task, seed=0, **config):
    """Ablation: no transfer (τ = 0)."""
    return _run_mesret(tasks, fe_per_task, seed, _mesret_cfg(config, tau=0.0))


class IndependentCMA(MESRET):
    """One CMA-ES per task on an even split of the budget, each with its own IPOP restart
    (σ·max(|p_c|, std) < 1e-12 → λ doubled for that task alone)."""

    def eps_fe(self, t: int) -> int:
        return int(self.fe_used[t]) * self.T  # the task's own share of the schedule

    def clock(self, t: int) -> int:
        return int(self.fe_used[t]) * self.T  # tasks run one after another: side-by-side clock

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

    def __init__(self, tasks, max_fe: int = 1, per_task_clock: bool = False):
        self.tasks = check_tasks(tasks)
        T = len(self.tasks)
        self.curve, self.per_task_clock = CurveLog(T, max_fe), per_task_clock
        self.best_f, self.best_cv = np.full(T, np.inf), np.full(T, np.inf)
        self.best_x = [np.full(t.dim, np.nan) for t in self.tasks]
        self.fe_used = np.zeros(T, dtype=np.int64)

    def __call__(self, t: int, X: np.ndarray) -> np.ndarray:
        f, cv = evaluate(self.tasks[t], t, X)
        if self.fe_used[t] == 0:
            check_first_generation(self.tasks[t], t, f)
        self.fe_used[t] += len(f)
        b = np.lexsort((f, cv))[0]
        if (cv[b], f[b]) < (self.best_cv[t], self.best_f[t]):
            self.best_cv[t], self.best_f[t] = cv[b], f[b]
            self.best_x[t] = to_real(self.tasks[t], X[b])
        T = len(self.tasks)
        self.curve.log(t, self.fe_used[t] * T if self.per_task_clock else self.fe_used.sum(), self.best_f[t])
        return f + 1e12 * cv  # constraint violation dominates (static penalty) [R]

    def result(self, **info) -> Result:
        info.update(curve=self.curve.finish(self.best_f), curve_fe=self.curve.fe_per_task(len(self.tasks)))
        return Result(self.best_f.copy(), [x.copy() for x in self.best_x], self.fe_used.copy(), info=info)


@register("openai-es")
def openai_es(tasks, fe_per_task, seed=0, popsize=None, sigma=None, lr=None, momentum=None, sigma_unit=None):
    """``sOpenAI_ES.m`` [C]: antithetic pairs, centred ranks, momentum; the mean is evaluated too.
    ``sigma`` is in the task's units (divided by its mean range); ``sigma_unit`` sets the
    unified-box σ directly."""
    base = OpenAIESConfig()
    sigma, lr = base.sigma if sigma is None else sigma, base.lr if lr is None else lr
    momentum = base.momentum if momentum is None else momentum
    ev = _Tracker(tasks, fe_per_task * len(check_tasks(tasks)), per_task_clock=True)
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


def sbx_children(p1, p2, mu: float, u, flip, keep):
    """``GA_Crossover`` [C: SBX as the issue states it]: spread factor cf from the uniforms ``u``,
    a random sign (``flip`` True = negative) and per variable a 0.5 chance that the variable is not
    recombined (``keep`` True: cf = 1, each child keeps its own parent's value). Children unclipped."""
    cf = np.where(u <= 0.5, (2 * u) ** (1 / (mu + 1)), (2 * (1 - u)) ** (-1 / (mu + 1)))
    cf = np.where(flip, -cf, cf)
    cf = np.where(keep, 1.0, cf)
    return 0.5 * ((1 + cf) * p1 + (1 - cf) * p2), 0.5 * ((1 + cf) * p2 + (1 - cf) * p1)


def poly_mutation(x, mu: float, hit, u):
    """``GA_Mutation`` [C: polynomial mutation, η_m = 5, p_m = 1/D]: variables with ``hit`` True
    move by δ·x (u ≤ 0.5, δ = (2u)^(1/(1+η)) − 1) or δ·(1 − x) (δ = 1 − (2(1 − u))^(1/(1+η)))."""
    with np.errstate(invalid="ignore"):
        lo = x + ((2 * u) ** (1 / (1 + mu)) - 1) * x
        hi = x + (1 - (2 * (1 - u)) ** (1 / (1 + mu))) * (1 - x)
    return np.where(hit, np.where(u <= 0.5, lo, hi), x)


def factorial_ranks(F):
    """``[n, T]`` objective table → 1-based rank of each individual on each task (ties by index)."""
    R = np.empty(F.shape, dtype=np.int64)
    for t in range(F.shape[1]):
        R[np.argsort(F[:, t], kind="stable"), t] = np.arange(1, F.shape[0] + 1)
    return R


def mfea_offspring(pop, skill, rmp: float, mu_c: float, mu_m: float, rng):
    """One ``MFEA.m`` generation of offspring: random pairs; a pair with equal skill factors or
    rand < rmp is recombined (``GA_Crossover``, no mutation) and each child imitates a random
    parent's skill factor; otherwise each parent is mutated (``GA_Mutation``) and keeps its skill
    factor [C as the issue states MFEA.m]. Children are clipped to [0, 1]; the order of the random
    draws is ours (vectorised), and an odd population pairs its last individual with a random
    one [R]. Returns ``(kids, kskill, (a, b, crossed))`` with one entry per pair."""
    n, D = pop.shape
    perm = rng.permutation(n)
    if n % 2:
        perm = np.append(perm, rng.integers(n))
    a, b = perm[0::2], perm[1::2]
    k = len(a)
    crossed = (skill[a] == skill[b]) | (rng.random(k) < rmp)
    c1, c2 = sbx_children(pop[a], pop[b], mu_c, rng.random((k, D)), rng.random((k, D)) < 0.5,
                          rng.random((k, D)) < 0.5)
    m1 = poly_mutation(pop[a], mu_m, rng.random((k, D)) < 1.0 / D, rng.random((k, D)))
    m2 = poly_mutation(pop[b], mu_m, rng.random((k, D)) < 1.0 / D, rng.random((k, D)))
    imit = rng.random((k, 2)) < 0.5
    kids = np.empty((2 * k, D))
    kids[0::2] = np.where(crossed[:, None], c1, m1)
    kids[1::2] = np.where(crossed[:, None], c2, m2)
    kskill = np.empty(2 * k, dtype=skill.dtype)
    kskill[0::2] = np.where(crossed, np.where(imit[:, 0], skill[a], skill[b]), skill[a])
    kskill[1::2] = np.where(crossed, np.where(imit[:, 1], skill[a], skill[b]), skill[b])
    return np.clip(kids[:n], 0.0, 1.0), kskill[:n], (a, b, crossed)


@register("mfea")
def mfea(tasks, fe_per_task, seed=0, rmp=None, pop_per_task=None):
    """MFEA as MToP's ``MFEA.m`` [C, as the issue states it]: N = 100 individuals per task (N·T in
    one population in [0, 1]^Dmax), RMP 0.3, SBX η_c = 2 / PM η_m = 5, crossover *or* mutation per
    pair. ``Initialization_MF``: every individual is evaluated on every task (N·T² evaluations,
    charged to the budget) and takes the task where its factorial rank is best (ties: the lower task
    index [R]). Selection keeps the N·T best of parents + offspring by scalar fitness 1/rank within
    their task (ties by order [R]); each child is evaluated on its own task only."""
    base = MFEAConfig()
    rmp = base.rmp if rmp is None else float(rmp)
    if not 0.0 <= rmp <= 1.0:
        raise UserError(f"mfea: rmp must be in [0, 1], got {rmp!r}")
    P = int(pop_per_task or base.pop_per_task)
    ev = _Tracker(tasks, fe_per_task * len(check_tasks(tasks)))
    T, Dmax = len(ev.tasks), max(t.dim for t in ev.tasks)
    n = T * P
    if n * T + n > fe_per_task * T:
        raise UserError(f"mfea: {fe_per_task} evaluations per task cannot pay Initialization_MF and one "
                        f"generation (N={P} per task, T={T}: {P * (T + 1)} per task); raise fe_per_task "
                        "or lower pop_per_task (CLI: --popsize)")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2**20 + 3]))
    pop = rng.random((n, Dmax))
    F = np.column_stack([ev(t, pop[:, : ev.tasks[t].dim]) for t in range(T)])
    skill = np.argmin(factorial_ranks(F), axis=1)
    fit = F[np.arange(n), skill]
    while ev.fe_used.sum() + n <= fe_per_task * T:
        kids, kskill, _ = mfea_offspring(pop, skill, rmp, base.mu_c, base.mu_m, rng)
        kfit = np.empty(n)
        for t in range(T):
            idx = np.flatnonzero(kskill == t)
            if idx.size:
                kfit[idx] = ev(t, kids[idx, : ev.tasks[t].dim])
        allp, alls, allf = np.vstack([pop, kids]), np.concatenate([skill, kskill]), np.concatenate([fit, kfit])
        rank = np.empty(2 * n, dtype=np.int64)
        for t in range(T):
            idx = np.flatnonzero(alls == t)
            rank[idx[np.argsort(allf[idx], kind="stable")]] = np.arange(1, idx.size + 1)
        keep = np.argsort(rank, kind="stable")[:n]  # scalar fitness 1/rank, best N·T
        pop, skill, fit = allp[keep], alls[keep], allf[keep]
    return ev.result(rmp=rmp, pop_per_task=P)


@register("mfea-rmp0")
def mfea_rmp0(tasks, fe_per_task, seed=0, pop_per_task=None):
    """MFEA with rmp 0: only same-task pairs mate, so no child crosses tasks — the per-task GA, MFEA's
    own independent run (the same population, operators, initialisation and budget)."""
    return mfea(tasks, fe_per_task, seed, rmp=0.0, pop_per_task=pop_per_task)


@register("indep-pycma")
def indep_pycma(tasks, fe_per_task, seed=0, popsize=None, sigma0=0.3):
    """The reference arm: pycma's ``CMAEvolutionStrategy`` with its defaults per task, λ as the
    other arms, σ0 0.3, ``bounds=[0, 1]`` (pycma's boundary handling), an even split of the budget
    and no restart; a task whose pycma run stops early leaves the rest of its share unspent.
    Needs pycma (the ``mesret[cma]`` extra)."""
    try:
        import cma
    except ImportError:
        raise UserError("indep-pycma needs pycma: pip install 'mesret[cma]'") from None
    ev = _Tracker(tasks, fe_per_task * len(check_tasks(tasks)), per_task_clock=True)
    lam = int(popsize or default_popsize(max(t.dim for t in ev.tasks)))
    for t, task in enumerate(ev.tasks):
        rng = task_rng(seed, t)
        x0 = rng.uniform(size=(lam, task.dim)).mean(axis=0)  # m0 as MES-RET's InitCMA
        opts = {"popsize": lam, "bounds": [0, 1], "seed": int(rng.integers(1, 2**31 - 1)), "verbose": -9,
                "maxfevals": fe_per_task}
        es = cma.CMAEvolutionStrategy(x0, sigma0, opts)
        while not es.stop() and ev.fe_used[t] + lam <= fe_per_task:
            X = np.asarray(es.ask())
            f = ev(t, X)
            bad = ~np.isfinite(f)
            if bad.any():  # pycma ranks finite values only: non-finite ones go last
                f = np.where(bad, np.nanmax(np.where(bad, -np.inf, f)) + 1.0, f)
            es.tell(list(X), f.tolist())
    return ev.result(popsize=lam, sigma0=sigma0, pycma=cma.__version__)


def optimize(tasks, algo: str = "mesret", fe_per_task: int = 10_000, seed: int = 0, **config) -> Result:
    """Run one algorithm on a task list with ``fe_per_task × T`` evaluations in all (NumPy; for a
    JAX-native many-task ES use evosax's strategies vmapped over tasks)."""
    tasks = check_tasks(tasks)
    if algo not in ALGOS:
        raise UserError(f"unknown algo {algo!r} (choose from {', '.join(ALGOS)})")
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
