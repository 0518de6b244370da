"""The laptop-scale reproduction: the wcci20 many-task suite (mixed and low similarity, the curse
sweep), the classic-control policy suite (semantic vs naive layout), and JAX vs NumPy speed.

Splits: every reported suite is the *test* instance (suite seed ``seed + 1000``); the baselines'
own settings (OpenAI-ES σ and learning rate, MFEA's rmp) are chosen on a *dev* instance (suite
seed ``seed + 2000``, T = 10, one run each); MES-RET's constants are the authors' and nothing of
it is tuned. The policy suite uses fixed start states drawn from ``seed + 1000``.
"""

from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path

import numpy as np

from icml26_shared import ClaimCheck, Results, UserError
from icml26_shared.eval import paired_interval
from icml26_shared.io import atomic_write_text
from icml26_shared.runner import check_scale

from .bench import add_rows, errors, geo_ratio, log_err, run_arms, win_loss
from .registry import CLAIMS, DESCRIPTOR
from .suites import wcci20

C = {c.id: c for c in CLAIMS}
ALL_ARMS = ("mesret", "mesret-norwe", "mesret-uniform", "mesret-tau0", "smesret", "indep-cma", "indep-sepcma",
            "openai-es", "mfea")
BASELINES = ("indep-cma", "indep-sepcma", "openai-es", "mfea")
CFG = {
    "smoke": dict(T=4, dims=(5,), fe=100, seeds=2, N=None, mfea_N=10, curse_T=(2,), curse_seeds=2, dev_T=None,
                  policy=dict(envs=("CartPole-v1", "Pendulum-v1"), hidden=2, horizon=10, fe=60, seeds=2),
                  jax=None),
    # docs/experiments.md "Protocol": N = λ = 100 and 50,000 evaluations per task (MToP) [C]
    "quick": dict(T=50, dims=(10, 20, 30), fe=50_000, seeds=4, N=100, mfea_N=100, curse_T=(2, 10, 30), curse_seeds=2, dev_T=10,
                  policy=dict(envs=("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0"),
                              hidden=8, horizon=100, fe=600, seeds=3),
                  jax=dict(T=50, D=30, gens=5)),
    "full": dict(T=50, dims=(10, 20, 30), fe=50_000, seeds=30, N=100, mfea_N=100, curse_T=(2, 10, 30), curse_seeds=10, dev_T=10,
                 policy=dict(envs=("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0"),
                             hidden=16, horizon=200, fe=3000, seeds=10),
                 jax=dict(T=50, D=30, gens=50)),
}


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    if scale == "full" and os.environ.get("MESRET_FULL") != "1":
        raise UserError("the full scale is a long CPU run (hours: wcci20 at 50,000 evaluations per task, "
                        "30 seeds) and the JAX timing across devices: set MESRET_FULL=1 to start it; "
                        "cec17-mix needs opfunu and MuJoCo/MJX tasks need brax, neither is installed")
    cfg = CFG[scale]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    t0 = time.perf_counter()
    configs = _dev_selection(res, cfg, seed)
    seeds = [seed + i for i in range(cfg["seeds"])]
    mixed = _mixed(res, cfg, seeds, configs, out_dir)
    low = _curse(res, cfg, seed, seeds, configs)
    _policy(res, cfg["policy"], seed)
    _jax_speed(res, cfg["jax"], seed)
    if scale == "smoke":  # the claims' statements name the protocol (T=50, ...): say what smoke ran
        ran = (f"smoke ran wcci20 T={cfg['T']}, D={list(cfg['dims'])}, {cfg['fe']} evaluations per task, "
               f"{cfg['seeds']} seeds, curse T={[*cfg['curse_T'], cfg['T']]}; not the claim's protocol")
        for chk in res.claims:
            chk.note = f"{ran}. {chk.note}" if chk.note else ran
    if scale != "smoke":  # smoke: no figures (matplotlib's import alone takes seconds)
        res.figures += _plots(out_dir, mixed, low)
    res.notes += [
        "Faithful [C]: MES-RET and sMES-RET as in the authors' MATLAB (MES_RET.m / sMES_RET.m): CMA-ES "
        "constants, fitness/diversity reward switched with probability 1 - FE/maxFE, reward-weighted "
        "knowledge extraction with per-dimension ownership masks, phenotypic and genotypic transfer "
        "(tau = 1 / 2) after 2*N*T evaluations, T roulette-drawn extra generations, stop rule, "
        "IPOP-like restart, epsilon-constraint ranking and the [-0.05, 1.05] boundary penalty.",
        "Reconstructed [R]: the wcci20 construction (our shifts/rotations/similarity levels), the NumPy "
        "classic-control policy suite (gymnax is not installed), "
        "per-task generation counters in h_sigma, uniform rewards over active tasks only.",
        f"Protocol (docs/experiments.md, fixed before these figures): N = lambda = {cfg['N']} for every "
        f"CMA-ES arm and OpenAI-ES, MFEA N = {cfg['mfea_N']} per task, {cfg['fe']} evaluations per task "
        "(MToP's Problem.m defaultN and 1000*50*T); the API default lambda stays Hansen's [R].",
        "Splits: reported suites are test instances (suite seed + 1000); OpenAI-ES sigma/lr and "
        "MFEA rmp chosen on a dev instance (suite seed + 2000); MES-RET is not tuned.",
        f"Wall time {time.perf_counter() - t0:.0f} s on a shared 2-core machine.",
    ]
    return res


def _dev_selection(res: Results, cfg: dict, seed: int) -> dict:
    """Each baseline's own selection rule, on the dev instance: the setting with the lowest
    geometric-mean error (one run each). Smoke skips it (defaults)."""
    base = {a: dict(popsize=cfg["N"]) for a in (*ALL_ARMS[:-1], "openai-es")} if cfg["N"] else {}
    base["mfea"] = dict(pop_per_task=cfg["mfea_N"])  # N = λ for every arm (the protocol)
    if cfg["dev_T"] is None:
        return base
    dev = wcci20(cfg["dev_T"], cfg["dims"], "mixed", seed=seed + 2000)
    grids = {"openai-es": [{**base.get("openai-es", {}), **dict(sigma_unit=s, lr=lr)}
                           for s in (0.01, 0.05) for lr in (0.01, 0.05)] + [dict(base.get("openai-es", {}))],
             "mfea": [dict(rmp=r, pop_per_task=cfg["mfea_N"]) for r in (0.1, 0.3, 0.6)]}
    chosen = dict(base)
    for algo, grid in grids.items():
        scores = []
        for g in grid:
            r = run_arms(dev, [algo], cfg["fe"], [seed + 2000], {algo: g})
            scores.append(float(log_err(dev, r[algo]["best_f"]).mean()))
        chosen[algo] = grid[int(np.argmin(scores))]
        res.add("dev_selection", algo, "dev_log10_geomean_error", min(scores), seeds=[seed + 2000],
                chosen=str(chosen[algo]), grid=[str(g) for g in grid], scores=scores)
    return chosen


def _mixed(res: Results, cfg: dict, seeds, configs, out_dir: Path) -> dict:
    tasks = wcci20(cfg["T"], cfg["dims"], "mixed", seed=seeds[0] + 1000)
    runs = run_arms(tasks, ALL_ARMS, cfg["fe"], seeds, configs)
    exp = f"wcci20_mixed_T{cfg['T']}"
    add_rows(res, exp, tasks, runs, seeds)
    _write_csv(out_dir / f"{exp}_errors.csv", tasks, runs)
    wl = win_loss(tasks, runs, "mesret", "indep-cma")
    wins = wl["wins"]
    iv = paired_interval(wins, np.full_like(wins, 0.7))
    res.add(exp, "mesret_vs_indep-cma", "fraction_of_tasks_better", wl["win_fraction"], seeds=seeds,
            interval_minus_0_7=[iv.low, iv.high], sig_better=wl["better_fraction"], sig_worse=wl["worse_fraction"])
    res.claims.append(ClaimCheck.compare(C["wcci20_win_fraction"], wl["win_fraction"], threshold=0.7,
                                         note=f"win fraction − 0.7 = {iv} (bootstrap over tasks); held "
                                              f"requires the interval above 0"))
    res.claims[-1].held = bool(iv.clears(0.0, "higher")) if res.claims[-1].held is not None else None
    res.claims.append(ClaimCheck.compare(C["wcci20_sig_worse"], wl["worse_fraction"], threshold=0.05,
                                         note=f"significantly better on {wl['better_fraction']:.0%} of tasks"))
    if len(seeds) < 4:  # with 3 seeds a two-sided rank-sum p is never below 0.05: not testable
        res.claims[-1].held = None
        res.claims[-1].note += f"; not checkable with {len(seeds)} seeds (rank-sum p >= 0.1)"

    for other in ALL_ARMS[1:]:
        ratio, iv = geo_ratio(tasks, runs, "mesret", other)
        res.add(exp, f"mesret/{other}", "geomean_error_ratio", ratio, seeds=seeds,
                interval=[10 ** iv.low, 10 ** iv.high])
    for cid, b in (("wcci20_ratio_indep", "indep-cma"), ("wcci20_ratio_mfea", "mfea")):
        target = 0.7 if b == "indep-cma" else 0.5
        ratio, iv = geo_ratio(tasks, runs, "mesret", b)
        res.claims.append(_ratio_claim(C[cid], ratio, iv, target, b, "lower"))
    best = min(BASELINES, key=lambda b: log_err(tasks, runs[b]["best_f"]).mean())
    ratio, iv = geo_ratio(tasks, runs, "mesret", best)
    res.claims.append(_ratio_claim(C["wcci20_ratio_best"], ratio, iv, 1.0, best, "lower"))
    for abl in ("mesret-norwe", "mesret-tau0"):
        surv = np.nanmean([np.nanmean(r.info["transfer_survival"]) for r in runs[abl]["results"]]) \
            if abl == "mesret-norwe" else float("nan")
        res.add(exp, abl, "transfer_survival", float(surv), seeds=seeds)
    surv = [float(np.nanmean(r.info["transfer_survival"])) for r in runs["mesret"]["results"]]
    res.add(exp, "mesret", "transfer_survival", surv, seeds=seeds,
            note="fraction of transferred samples among the mu selected (mu/lambda = 0.5 is neutral)")
    extra = np.mean([r.info["extra_generations"] for r in runs["mesret"]["results"]], axis=0)
    res.add(exp, "mesret", "extra_generations_max_over_min_task", float(extra.max() / max(extra.min(), 1)),
            seeds=seeds)
    return dict(tasks=tasks, runs=runs)


def _ratio_claim(claim, ratio, iv, target, baseline, direction):
    lo, hi = 10 ** iv.low, 10 ** iv.high
    held = hi < target if direction == "lower" else lo > target
    chk = ClaimCheck.compare(claim, ratio, threshold=target,
                             note=f"ratio to {baseline} {ratio:.3g}, 95% interval [{lo:.3g}, {hi:.3g}] "
                                  f"(paired by task, bootstrap of mean log10 error); target {target:g}")
    chk.held = bool(held)
    chk.baseline_name = baseline
    return chk


def _curse(res: Results, cfg: dict, seed: int, seeds, configs) -> dict:
    arms = ("mesret", "indep-cma", "mfea")
    table = {}
    Ts = [*cfg["curse_T"], cfg["T"]]
    for T in Ts:
        sds = seeds if T == cfg["T"] else seeds[: cfg["curse_seeds"]]
        tasks = wcci20(T, cfg["dims"], "low", seed=seed + 1000)
        runs = run_arms(tasks, arms, cfg["fe"], sds, configs)
        exp = f"wcci20_low_T{T}"
        add_rows(res, exp, tasks, runs, sds)
        for a in ("mesret", "mfea"):
            ratio, iv = geo_ratio(tasks, runs, a, "indep-cma")
            table[(a, T)] = (ratio, 10 ** iv.low, 10 ** iv.high)
            res.add(exp, f"{a}/indep-cma", "geomean_error_ratio", ratio, seeds=sds,
                    interval=[10 ** iv.low, 10 ** iv.high])
    r, lo, hi = table[("mfea", cfg["T"])]
    chk = ClaimCheck.compare(C["curse_mfea"], r, threshold=1.0,
                             note=f"T={cfg['T']}: {r:.3g} [{lo:.3g}, {hi:.3g}]")
    chk.held = bool(lo > 1.0)
    res.claims.append(chk)
    worst = max(Ts, key=lambda T: table[("mesret", T)][2])
    parts = "; ".join(f"T={T}: {table[('mesret', T)][0]:.3g} [{table[('mesret', T)][1]:.3g}, "
                      f"{table[('mesret', T)][2]:.3g}]" for T in Ts)
    chk = ClaimCheck.compare(C["curse_mesret"], max(table[("mesret", T)][0] for T in Ts), threshold=1.0,
                             note=f"MES-RET / indep-cma per T: {parts}; held needs every upper bound <= 1 "
                                  f"(worst at T={worst})")
    chk.held = bool(all(table[("mesret", T)][2] <= 1.0 for T in Ts))
    res.claims.append(chk)
    return table


def _policy(res: Results, pc: dict, seed: int) -> None:
    from .baselines import optimize
    from .policy import normalised_return, policy_suite

    arms = {"smesret/semantic": ("smesret", "semantic", {}), "smesret/naive": ("smesret", "naive", {}),
            "smesret-tau0/semantic": ("smesret", "semantic", {"tau": 0.0}),
            "indep-sepcma": ("indep-sepcma", "semantic", {})}
    seeds = [seed + i for i in range(pc["seeds"])]
    score, steps = {a: [] for a in arms}, {a: [] for a in arms}
    for a, (algo, layout, extra) in arms.items():
        for s in seeds:
            tasks = policy_suite(pc["envs"], layout, pc["hidden"], pc["horizon"], seed=seed + 1000)
            r = optimize(tasks, algo, fe_per_task=pc["fe"], seed=s, **extra)
            score[a].append(float(np.mean([normalised_return(t.name, -f) for t, f in zip(tasks, r.best_f, strict=True)])))
            steps[a].append(float(sum(t.fn.steps for t in tasks)))
    exp = f"policy_{len(pc['envs'])}env_h{pc['hidden']}"
    for a in arms:
        res.add(exp, a, "normalised_return", score[a], seeds=seeds)
        res.add(exp, a, "env_steps", steps[a], seeds=seeds)
    sem, sep, naive = (np.array(score[k]) for k in ("smesret/semantic", "indep-sepcma", "smesret/naive"))
    iv = paired_interval(sem, 1.1 * sep)
    ratio = float(sem.mean() / sep.mean()) if sep.mean() != 0 else float("nan")
    chk = ClaimCheck.compare(C["policy_vs_sepcma"], ratio, threshold=1.1,
                             note=f"semantic − 1.1 x sep-CMA-ES per seed: {iv}; equal evaluations per task "
                                  "(env steps within a few %: see env_steps rows)")
    chk.held = bool(iv.clears(0.0, "higher"))
    chk.baseline_name = "indep-sepcma"
    res.claims.append(chk)
    iv = paired_interval(sem, naive)
    chk = ClaimCheck.compare(C["policy_vs_naive"], iv.mean, threshold=0.0,
                             note=f"semantic − naive per seed: {iv}")
    chk.held = bool(iv.clears(0.0, "higher"))
    chk.baseline_name = "smesret/naive"
    res.claims.append(chk)


def _jax_speed(res: Results, jc: dict | None, seed: int) -> None:
    if jc is None:
        return
    try:
        from .jax_backend import generations_per_second
    except ImportError as exc:
        res.claims.append(ClaimCheck.compare(C["jax_speed"], None, note=f"not measured: {exc}"))
        return
    gps = generations_per_second(jc["T"], jc["D"], jc["gens"], seed)
    for k, v in gps.items():
        res.add(f"speed_T{jc['T']}_D{jc['D']}", k, "generations_per_second_throughput", v, seeds=[seed])
    ratio = gps["jax"] / gps["numpy"]
    res.add(f"speed_T{jc['T']}_D{jc['D']}", "jax/numpy", "speedup_generations_per_s", ratio, seeds=[seed])
    res.claims.append(ClaimCheck.compare(C["jax_speed"], ratio, threshold=5.0,
                                         note="medians of interleaved rounds (icml26_shared.eval.compare), "
                                              "CPU, shared machine"))


def _write_csv(path: Path, tasks, runs) -> None:
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["task", "algo", *[f"error_seed{i}" for i in range(len(next(iter(runs.values()))["best_f"]))]])
    for a, r in runs.items():
        e = errors(tasks, r["best_f"])
        for t, task in enumerate(tasks):
            w.writerow([task.label(t), a, *[f"{v:.6g}" for v in e[:, t]]])
    atomic_write_text(path, buf.getvalue())


def _plots(out_dir: Path, mixed: dict, low: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    Ts = sorted({T for _, T in low})
    for a, style in (("mesret", "o-"), ("mfea", "s--")):
        ys = [low[(a, T)][0] for T in Ts]
        lo = [low[(a, T)][0] - low[(a, T)][1] for T in Ts]
        hi = [low[(a, T)][2] - low[(a, T)][0] for T in Ts]
        ax1.errorbar(Ts, ys, yerr=[lo, hi], fmt=style, label=f"{a} / indep-cma", capsize=3)
    ax1.axhline(1.0, color="gray", lw=0.8)
    ax1.set(xlabel="number of tasks T", ylabel="geometric-mean error ratio", yscale="log",
            title="The curse (low similarity)")
    ax1.legend(fontsize=8)
    tasks, runs = mixed["tasks"], mixed["runs"]
    r0 = runs["mesret"]["results"][0]
    if r0.trace_fe:
        fe = np.array(r0.trace_fe) / len(tasks)
        best = np.array(r0.trace_best)
        f_opt = np.array([t.f_opt for t in tasks])
        ax2.plot(fe, np.log10(np.maximum(best - f_opt, 1e-8)).mean(axis=1), label="mesret (seed 0)")
    for i, a in enumerate(runs):
        ax2.axhline(float(log_err(tasks, runs[a]["best_f"]).mean()), lw=0.9, ls=":", color=f"C{i + 1}",
                    label=f"{a} final (mean of seeds)")
    ax2.set(xlabel="evaluations per task", ylabel="mean log10 error", title=f"wcci20 mixed, T={len(tasks)}")
    ax2.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out_dir / "mesret.png", dpi=110)
    plt.close(fig)
    return ["mesret.png", *sorted(p.name for p in out_dir.glob("wcci20_*_errors.csv"))]
