"""Run several algorithms over seeds on one task list and summarise: per-task errors, win/loss
counts with rank-sum tests, geometric-mean error ratios with paired intervals, mean ranks."""

from __future__ import annotations

import os

import numpy as np

from icml26_shared import Results
from icml26_shared.eval import paired_interval

from .baselines import optimize

ERR_FLOOR = 1e-8  # errors below 1e-8 count as solved (the CEC convention) [R]


def run_arms(tasks, algos, fe_per_task, seeds, configs=None, progress=None, workers=None) -> dict:
    """``{algo: {"best_f": [S, T], "fe_used": [S, T], "results": [Result]}}``. ``workers`` (default:
    the ``MESRET_WORKERS`` environment variable, else 1) runs the (algo, seed) jobs in forked
    processes; every job is seeded on its own, so the results do not depend on it."""
    configs = configs or {}
    workers = int(os.environ.get("MESRET_WORKERS", "1")) if workers is None else int(workers)
    jobs = [(a, s) for a in algos for s in seeds]
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        global _JOB_STATE
        _JOB_STATE = (tasks, fe_per_task, configs)
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=mp.get_context("fork")) as ex:
            done = dict(zip(jobs, ex.map(_job, jobs), strict=True))
        _JOB_STATE = None
    else:
        done = {j: _job(j, (tasks, fe_per_task, configs)) for j in jobs}
    out = {}
    for a in algos:
        runs = [done[(a, s)] for s in seeds]
        if progress:
            for s in seeds:
                progress(a, s)
        out[a] = dict(best_f=np.array([r.best_f for r in runs]), fe_used=np.array([r.fe_used for r in runs]),
                      results=runs)
    return out


_JOB_STATE: tuple | None = None


def _job(job, state=None):
    tasks, fe_per_task, configs = state or _JOB_STATE
    return optimize(tasks, job[0], fe_per_task=fe_per_task, seed=job[1], **configs.get(job[0], {}))


def errors(tasks, best_f) -> np.ndarray:
    f_opt = np.array([t.f_opt if t.f_opt is not None else np.nan for t in tasks])
    return np.maximum(best_f - f_opt, ERR_FLOOR)


def log_err(tasks, best_f) -> np.ndarray:
    """Per-task mean over seeds of log10 error, [T]."""
    return np.log10(errors(tasks, best_f)).mean(axis=0)


def geo_ratio(tasks, runs, a: str, b: str) -> tuple[float, object]:
    """Geometric-mean error ratio a / b over tasks and its 95% interval (paired by task)."""
    la, lb = log_err(tasks, runs[a]["best_f"]), log_err(tasks, runs[b]["best_f"])
    iv = paired_interval(la, lb)
    return float(10 ** iv.mean), iv


def win_loss(tasks, runs, a: str, b: str, alpha: float = 0.05) -> dict:
    """Per task: a beats b when its median error is lower; significantly worse when the two-sided
    rank-sum test (``scipy.stats.mannwhitneyu``) gives p < alpha and a's median is higher."""
    from scipy.stats import mannwhitneyu

    ea, eb = errors(tasks, runs[a]["best_f"]), errors(tasks, runs[b]["best_f"])
    ma, mb = np.median(ea, axis=0), np.median(eb, axis=0)
    wins = (ma < mb).astype(float)
    ties = ma == mb
    worse = np.zeros(len(tasks))
    better_sig = np.zeros(len(tasks))
    for t in range(len(tasks)):
        if np.all(ea[:, t] == eb[:, t]):
            continue
        p = mannwhitneyu(ea[:, t], eb[:, t], alternative="two-sided").pvalue
        worse[t] = float(p < alpha and ma[t] > mb[t])
        better_sig[t] = float(p < alpha and ma[t] < mb[t])
    return dict(wins=wins, ties=ties, worse=worse, better=better_sig,
                win_fraction=float(wins.mean()), worse_fraction=float(worse.mean()),
                better_fraction=float(better_sig.mean()))


def mean_ranks(tasks, runs) -> dict[str, float]:
    """Mean rank of each algorithm over tasks (1 = best; on the per-task mean log error)."""
    from scipy.stats import rankdata

    algos = list(runs)
    L = np.stack([log_err(tasks, runs[a]["best_f"]) for a in algos])
    R = np.apply_along_axis(rankdata, 0, L)
    return {a: float(R[i].mean()) for i, a in enumerate(algos)}


def add_rows(res: Results, experiment: str, tasks, runs, seeds, per_task: bool = False) -> None:
    """Summary rows per algorithm (mean over seeds of the geometric-mean error), and with
    ``per_task`` one row per algo, task and metric (best_f, error, fe_used)."""
    seeds = list(seeds)
    known = all(t.f_opt is not None for t in tasks)
    ranks = mean_ranks(tasks, runs) if len(runs) > 1 and known else {}
    for a, r in runs.items():
        e = errors(tasks, r["best_f"])
        if known:
            res.add(experiment, a, "geomean_error", list(10 ** np.log10(e).mean(axis=1)), seeds=seeds)
        res.add(experiment, a, "total_fe", list(r["fe_used"].sum(axis=1).astype(float)), seeds=seeds)
        if a in ranks:
            res.add(experiment, a, "mean_rank", ranks[a], seeds=seeds)
        if per_task:
            for t, task in enumerate(tasks):
                name = task.label(t)
                res.add(experiment, a, "best_f", list(r["best_f"][:, t]), seeds=seeds, task=name,
                        per_seed=list(r["best_f"][:, t]))
                if task.f_opt is not None:
                    res.add(experiment, a, "error", list(e[:, t]), seeds=seeds, task=name, per_seed=list(e[:, t]))
                res.add(experiment, a, "fe_used", list(r["fe_used"][:, t].astype(float)), seeds=seeds, task=name,
                        per_seed=list(r["fe_used"][:, t].astype(float)))
