"""The reproduction: (a) the known-truth grid, (b) robustness over λ × L beside skdim over k,
(c) skdim benchmark manifolds (uni-modal), (d) digits left/right halves with linear probes,
(e) post hoc: frozen MiniLM embeddings of templated digit captions paired with the pixels.

Splits: the defaults (λ, L, T, tie-break, pre-training length, learning rate) come from the
notes or from dev simulations (seeds 100+, the dev configuration (3, 2, 4), sin nonlinearity),
never from the reported grid; the grid uses seeds 0, 1, 2 (offset by the base seed). Probes
cross-validate inside training folds (``cross_val_score``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from icml26_shared import ClaimCheck, Results, UserError
from icml26_shared.eval import paired_interval
from icml26_shared.io import write_json
from icml26_shared.runner import check_scale

from . import baselines
from .config import FiGuROConfig
from .core import simulate
from .estimator import FiGuRO, fit_with, rank_error
from .registry import CLAIMS, DESCRIPTOR

GRID = ((2, 2, 2), (5, 3, 1), (8, 2, 6), (0, 4, 4))
#: the reported skdim manifolds (the review's nine plus M4_Nonlinear); nothing is chosen on them
MANIFOLDS = ("M1_Sphere", "M2_Affine_3to5", "M3_Nonlinear_4to6", "M4_Nonlinear", "M5a_Helix1d",
             "M6_Nonlinear", "M7_Roll", "M10a_Cubic", "M11_Moebius", "Mp2_Paraboloid")
CFG = {
    "smoke": dict(grid=((2, 1, 1),), n=300, dim=20, seeds=1, classical=(),
                  fig=dict(latent_dim=6, pretrain_max_steps=200, update_every=20, max_rounds=12),
                  sweep=None, manifolds=(), digits=False, posthoc=False, arr=False),
    "full": dict(grid=GRID, n=5000, dim=50, seeds=5, classical=("twonn", "mle", "danco", "lpca"),
                 fig={}, sweep=dict(lams=(0.01, 0.05, 0.1), Ls=(16, 32, 64), ks=(5, 10, 20, 50)),
                 manifolds=MANIFOLDS, digits=True, posthoc=True, arr=5, dev_lams=(0.02, 0.05, 0.1),
                 robust_grid=True),
    "quick": dict(grid=GRID, n=2000, dim=50, seeds=3, classical=("twonn", "mle", "lpca", "danco"),
                  fig={}, sweep=dict(lams=(0.05, 0.1), Ls=(16, 32, 64), ks=(5, 10, 20, 50),
                                     axes=True),
                  manifolds=MANIFOLDS, digits=True, posthoc=True, arr=1, dev_lams=(0.05, 0.1)),
}
#: dev simulations for the λ choice: configurations, seeds and a nonlinearity outside the grid
DEV_SIMS = (((3, 2, 4), 100, "sin"), ((1, 3, 2), 101, "sin"))
CLAIM = {c.id: c for c in CLAIMS}


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    if scale == "full":
        _check_full()
    cfg = CFG[scale]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    DEVICE["name"] = "cuda" if scale == "full" else "cpu"
    t0 = time.perf_counter()
    try:
        base = FiGuROConfig(**cfg["fig"])
        if cfg.get("dev_lams"):
            base = _dev_choice(res, cfg, base, seed)
        ch = dev_baseline_choice(cfg, seed)
        ie_best, ie_err = ch["ie_best"], ch["ie_err"]
        dev_seeds = [seed + s for _, s, _ in DEV_SIMS]
        for c, rows in ch["candidates"].items():
            for p, m in rows:
                res.add("dev", f"{c}-ie", "mean_abs_rank_error_candidate", m, seeds=dev_seeds,
                        params=p, chosen=p == ch["params"][c], split="dev")
        if ie_err:
            for m, e in ie_err.items():
                res.add("dev", m, "mean_abs_rank_error", e, seeds=dev_seeds, split="dev",
                        params=ch["params"][m.removesuffix("-ie")])
            res.notes.append("dev choice: baseline hyperparameters "
                             + ", ".join(f"{c} {p}" for c, p in ch["params"].items())
                             + f"; IE baseline = {ie_best} (dev mean absolute rank error "
                             + ", ".join(f"{m}: {np.mean(v):.2f}" for m, v in ie_err.items())
                             + "; same dev simulations and rule as λ, never the reported grid).")
        cfg = {**cfg, "ie_best": ie_best, "params": ch["params"], "cache": {}}
        if scale == "full":
            _full_pairs(res, base, seed)
        traj = _grid(res, cfg, base, seed)
        if cfg["sweep"]:
            _sweep(res, cfg, base, seed)
        if cfg.get("robust_grid"):
            robustness_study(res, base, seed, n=cfg["n"], dim=cfg["dim"])
        if cfg["manifolds"]:
            _manifolds(res, cfg, base, seed)
        if cfg["digits"]:
            _digits(res, base, seed)
        if cfg["posthoc"]:
            _posthoc(res, base, seed)
    finally:
        torch.set_num_threads(threads)
    write_json(out_dir / "rank_history.json", traj, indent=1)
    res.figures.append("rank_history.json")
    res.notes += [
        f"wall time {time.perf_counter() - t0:.0f} s on this machine (1 torch thread).",
        "FiGuRO here is RECONSTRUCTED from the abstract and public reviews (no code): the "
        "shared/private architecture with cross-reconstruction, the move order (private before "
        "shared, least loss, jumps to the lowest truncation that keeps fidelity), revert-and-reject, "
        "the parsimony tie-break and every default are ours [R].",
        "Pre-training runs to a validation plateau (curves saved); the fidelity reference is the "
        "absolute held-out distortion there, and λ is a fraction of the data's variance. λ is "
        "chosen on dev simulations in this run (see 'dev'); L = 32, batch 256, lr 5e-3 are ours "
        "and were only looked at on small test/dev simulations, not tuned. T = 50 steps was kept "
        "against T = 25 on four dev simulations (dev configurations, sin, seeds 100-103): T = 25 "
        "halved the CPU-s per fit but raised the dev mean absolute rank error from 5.08 to 6.75 "
        "(docs/experiments.md). λ = 0.02 left the quick candidates on the same dev evidence: at "
        "λ = 0.05 every dev answer had private ranks 3-11 above the truth, and a smaller λ only "
        "tightens the bound. The "
        "reported grid (seeds base+0..2, tanh) was not used to choose anything; the "
        "inclusion–exclusion baseline is chosen on the same dev simulations by the same rule "
        "(least mean absolute rank error; see 'dev').",
        "Classical estimators see at most " + ", ".join(f"{k} {v}" for k, v in baselines.MAX_ROWS.items())
        + " rows (subsampled with the seed). DANCo sees 400 rows: 1.1 CPU-s per call on one view "
        "(D = 50) and 2.2 CPU-s on the concatenated views (D = 100) after numba's first compile; "
        "it enters the dev choice of the IE baseline like the others.",
    ]
    return res


def _dev_choice(res: Results, cfg: dict, base: FiGuROConfig, seed: int) -> FiGuROConfig:
    """λ chosen on dev simulations (configurations, seeds 100+ and the sin nonlinearity, none in
    the reported grid): the least mean absolute rank error, ties to the larger λ (parsimony)."""
    from dataclasses import replace

    err = {}
    for lam in cfg["dev_lams"]:
        e = []
        for conf, s, nonlin in DEV_SIMS:
            x1, x2, truth = simulate(*conf, n=cfg["n"], dim=cfg["dim"], seed=seed + s,
                                     nonlinearity=nonlin)
            f = _fig(replace(base, distortion_threshold=lam), [x1, x2], seed + s)
            e.append(rank_error({"shared": f.shared_dim_, "private": f.private_dims_}, truth)["mean"])
        err[lam] = float(np.mean(e))
        res.add("dev", "figuro", "mean_abs_rank_error", e, seeds=[seed + s for _, s, _ in DEV_SIMS],
                lam=lam, split="dev")
    best = min(err, key=lambda lam: (err[lam], -lam))
    res.notes.append(f"dev choice: λ = {best} (dev mean absolute rank error "
                     + ", ".join(f"λ={k}: {v:.2f}" for k, v in err.items())
                     + f" on {[c for c, _, _ in DEV_SIMS]}, sin, seeds base+100/101).")
    return replace(base, distortion_threshold=best)


def dev_baseline_choice(cfg: dict, seed: int) -> dict:
    """Every classical baseline at its best, chosen on the dev simulations (``DEV_SIMS``: the
    configurations, seeds 100+ and sin nonlinearity that choose λ) by FiGuRO's rule — the least
    mean absolute rank error of its inclusion–exclusion estimate, ties to the earlier candidate
    (skdim's default first): first each estimator's hyperparameter among
    ``baselines.CANDIDATES`` (TwoNN's discarded fraction, MLE's K, lPCA's threshold rule), then the
    IE estimator among the tuned ones. Reads only ``n``, ``dim`` and ``classical`` from ``cfg`` —
    never the reported grid or manifolds. Returns ``{"params": {name: kwargs}, "ie_best": name,
    "ie_err": {name-ie: [per dev sim]}, "candidates": {name: [(kwargs, mean error)]}}``."""
    classical = tuple(cfg["classical"])
    if not classical:
        return {"params": {}, "ie_best": "ajive", "ie_err": {}, "candidates": {}}
    cands = {c: baselines.CANDIDATES.get(c, ({},)) for c in classical}
    err: dict[str, list[list[float]]] = {c: [[] for _ in cands[c]] for c in classical}
    for conf, s, nonlin in DEV_SIMS:
        x1, x2, truth = simulate(*conf, n=cfg["n"], dim=cfg["dim"], seed=seed + s,
                                 nonlinearity=nonlin)
        for c in classical:
            for i, p in enumerate(cands[c]):
                est = baselines.estimate(c, [x1, x2], seed + s, params=p)
                err[c][i].append(rank_error(est, truth)["mean"])
    params, ie_err, table = {}, {}, {}
    for c in classical:
        means = [float(np.mean(e)) for e in err[c]]
        i = min(range(len(means)), key=lambda j: (means[j], j))
        params[c], ie_err[f"{c}-ie"] = dict(cands[c][i]), err[c][i]
        table[c] = [(dict(p), m) for p, m in zip(cands[c], means)]
    names = list(ie_err)
    best = min(names, key=lambda m: (float(np.mean(ie_err[m])), names.index(m)))
    return {"params": params, "ie_best": best, "ie_err": ie_err, "candidates": table}


def dev_ie_choice(cfg: dict, seed: int) -> tuple[str, dict]:
    """The inclusion–exclusion baseline chosen on the dev simulations (see
    ``dev_baseline_choice``): its name and its per-dev-simulation errors per estimator."""
    ch = dev_baseline_choice(cfg, seed)
    return ch["ie_best"], ch["ie_err"]


def _check_full() -> None:
    """full needs a CUDA device and FIGURO_PAIRS (a folder with paired x1.npy, x2.npy)."""
    import os

    if not torch.cuda.is_available():
        raise UserError("--scale full needs a CUDA device (none found); it runs 5 seeds, "
                        "n = 5,000 and λ × L on every configuration, plus FIGURO_PAIRS")
    pairs = os.environ.get("FIGURO_PAIRS")
    if not pairs or not all((Path(pairs) / f).is_file() for f in ("x1.npy", "x2.npy")):
        raise UserError("--scale full needs FIGURO_PAIRS=<folder with paired x1.npy and x2.npy> "
                        "(e.g. frozen image and text embeddings of the same items)")


def _full_pairs(res: Results, base: FiGuROConfig, seed: int) -> None:
    import os

    from .io import load_views

    folder = Path(os.environ["FIGURO_PAIRS"])
    views = load_views([folder / "x1.npy", folder / "x2.npy"], min_rows=4 * base.latent_dim)
    for s in range(seed, seed + 5):
        f = _fig(base, [v.astype(np.float32) for v in views], s)
        res.add("user_pairs", "figuro", "shared_dim", float(f.shared_dim_), seeds=[s],
                private=f.private_dims_, max_rounds_hit=f.stopped_by_max_rounds_)


DEVICE = {"name": "cpu"}


def _fig(base: FiGuROConfig, views, seed: int, **over) -> FiGuRO:
    return fit_with(base, views, seed, device=DEVICE["name"], **over)


def _ci(a, b=None):
    iv = paired_interval(a, b)
    return iv, [iv.low, iv.high]


def _grid(res: Results, cfg: dict, base: FiGuROConfig, seed: int) -> list:
    seeds = [seed + i for i in range(cfg["seeds"])]
    methods = ["figuro", "figuro-one-shot"] + (["figuro-spectral"] if cfg.get("spectral") else []) \
        + (["arr-ie"] if cfg["arr"] else []) \
        + [f"{c}-ie" for c in cfg["classical"]] + ["ajive"]
    err = {m: [] for m in methods}
    traj = []
    for conf in cfg["grid"]:
        for s in seeds:
            x1, x2, truth = simulate(*conf, n=cfg["n"], dim=cfg["dim"], seed=s)
            f = _fig(base, [x1, x2], s)
            cfg.get("cache", {})[(tuple(conf), s)] = f
            traj.append({"config": conf, "seed": s, "history": f.rank_history_, "events": f.events_,
                         "stop": f.stop_reason_, "max_rounds_hit": f.stopped_by_max_rounds_,
                         "pretrain_plateau": f.pretrain_plateau_,
                         "answer_distortion": f.answer_distortion_,
                         "reference_distortion": f.reference_distortion_})
            steps, vals = zip(*f.pretrain_curve_)
            res.add_curve("pretrain", f"figuro {conf}", "val_distortion", steps, vals, seed=s,
                          direction="lower", budget=base.pretrain_max_steps,
                          stopped_at=steps[-1] if f.pretrain_plateau_ else None)
            if f.rank_history_[0]["shared"] != base.latent_dim or f.n_rounds_ < 1:
                raise RuntimeError("the rank search did not start at full rank or did not move")
            est = {"figuro": {"shared": f.shared_dim_, "private": f.private_dims_}}
            # ablation of the same fit: each space truncated once after pre-training where its
            # own held-out distortion crosses the same bound (no search, no re-training)
            one = f.one_shot_ranks_
            est["figuro-one-shot"] = {"shared": one["shared"],
                                      "private": [one[f"private{m}"] for m in range(2)]}
            if cfg.get("spectral"):
                sp = _fig(base, [x1, x2], s, schedule="spectral")
                est["figuro-spectral"] = {"shared": sp.shared_dim_, "private": sp.private_dims_}
            if cfg["arr"] and s < seed + cfg["arr"]:
                est["arr-ie"] = baselines.arr([x1, x2], seed=s, **_kw(base))
            for c in cfg["classical"]:
                est[f"{c}-ie"] = baselines.estimate(c, [x1, x2], s, params=cfg["params"].get(c))
            est["ajive"] = baselines.ajive([x1, x2], seed=s)
            for m in (m for m in methods if m in est):
                e = rank_error(est[m], truth)
                err[m].append(e)
                res.add("grid", m, "shared_estimate", float(est[m]["shared"]), seeds=[s],
                        config=list(conf))
    runs = [f"{c}/{s}" for c in cfg["grid"] for s in seeds]
    for m in methods:
        e = err[m]
        sd = seeds if len(e) == len(runs) else [seed]
        res.add("grid", m, "mean_abs_rank_error", [x["mean"] for x in e], seeds=sd,
                runs=runs if len(e) == len(runs) else runs[:: len(seeds)])
        res.add("grid", m, "shared_abs_error", [x["shared"] for x in e], seeds=sd)
        res.add("grid", m, "exact_rate", [float(x["exact"]) for x in e], seeds=sd)
    fm = np.array([x["mean"] for x in err["figuro"]])
    fs = np.array([x["shared"] for x in err["figuro"]], float)
    fx = np.array([float(x["exact"]) for x in err["figuro"]])
    hit = sum(t["max_rounds_hit"] for t in traj)
    note = f"{len(fm)} runs (4 configurations × seeds); {hit} stopped by max_rounds"
    _, iv = _ci(fm)
    res.claims.append(ClaimCheck.compare(CLAIM["grid_error"], float(fm.mean()), threshold=0.5,
                                         interval=iv, note=note + "; interval of the mean over runs"))
    _, iv = _ci(fx)
    res.claims.append(ClaimCheck.compare(CLAIM["grid_exact"], float(fx.mean()), threshold=0.7,
                                         interval=iv, note=note))
    best = cfg.get("ie_best") or dev_ie_choice(cfg, seed)[0]  # chosen on dev, never on the grid
    bs = np.array([x["shared"] for x in err[best]], float)
    _, iv = _ci(2 * fs, bs)
    res.claims.append(ClaimCheck.compare(
        CLAIM["shared_vs_ie"], float(2 * fs.mean()), float(bs.mean()), best, interval=iv,
        note="ours = 2 × FiGuRO's mean shared-rank error; held when the paired interval of "
             "(2 × FiGuRO − best IE) lies at or below 0"))
    for m in dict.fromkeys(("figuro-one-shot", "figuro-spectral", "arr-ie", "ajive", best)):
        if err.get(m):
            other = np.array([x["mean"] for x in err[m]])
            iv_m = paired_interval(fm[: len(other)] if m != "arr-ie" else fm[:: len(seeds)], other)
            res.add("grid", m, "figuro_minus_this_mean_error", float(iv_m.mean),
                    interval=[iv_m.low, iv_m.high])
    return traj


def _kw(base: FiGuROConfig) -> dict:
    return {f: getattr(base, f) for f in base.__dataclass_fields__}


def _sweep(res: Results, cfg: dict, base: FiGuROConfig, seed: int) -> None:
    sw = cfg["sweep"]
    x1, x2, truth = simulate(5, 3, 1, n=cfg["n"], dim=cfg["dim"], seed=seed)
    lam0, L0 = base.distortion_threshold, base.latent_dim
    if sw.get("axes"):
        # quick: the two axes through the chosen setting (λ varied at L0, L varied at λ0)
        settings = list(dict.fromkeys([(lam, L0) for lam in sw["lams"]]
                                      + [(lam0, L) for L in sw["Ls"]]))
    else:
        settings = [(lam, L) for lam in sw["lams"] for L in sw["Ls"]]
    ours = []
    cache = cfg.get("cache", {})
    for lam, L in settings:
        if (lam, L) == (lam0, L0) and ((5, 3, 1), seed) in cache:
            f = cache[((5, 3, 1), seed)]  # the grid's own fit: same data, seed and settings
        else:
            f = _fig(base, [x1, x2], seed, distortion_threshold=lam, latent_dim=L)
        ours.append(f.shared_dim_)
        res.add("robustness", "figuro", "shared_estimate", float(f.shared_dim_), seeds=[seed],
                lam=lam, L=L, private=f.private_dims_, max_rounds_hit=f.stopped_by_max_rounds_)
    spread = float(max(ours) - min(ours))
    res.add("robustness", "figuro", "shared_spread", spread, seeds=[seed])
    spreads = {}
    for name in ("mle", "danco"):
        vals = []
        for k in sw["ks"]:
            kw = {"K": k} if name == "mle" else {"k": k}
            cls = "MLE" if name == "mle" else "DANCo"
            rows = baselines.MAX_ROWS["danco"] if name == "danco" else len(x1)
            xs = [baselines._standardise(v)[:rows] for v in (x1, x2)]
            ids = [baselines._skdim(cls, v, **kw) for v in (xs[0], xs[1], np.hstack(xs))]
            vals.append(ids[0] + ids[1] - ids[2])
            res.add("robustness", f"{name}-ie", "shared_estimate", float(vals[-1]), seeds=[seed], k=k)
            if name == "danco":
                break  # one k: DANCo's spread cannot be measured in the quick budget
        if len(vals) > 1:
            spreads[name] = float(max(vals) - min(vals))
            res.add("robustness", f"{name}-ie", "shared_spread", spreads[name], seeds=[seed])
    best = min(spreads, key=spreads.get)
    if cfg.get("robust_grid"):
        return  # the claims come from robustness_study over configurations × seeds
    res.claims.append(ClaimCheck.compare(CLAIM["robust_spread"], spread, threshold=1.0,
                                         note=f"one simulation (5,3,1), seed base; {len(settings)} settings "
                                              f"{settings}, no interval"))
    res.claims.append(ClaimCheck.compare(
        CLAIM["robust_vs_skdim"], spread, 0.5 * spreads[best], f"0.5 × {best}-ie spread over k",
        note=f"{best}-ie spread {spreads[best]:.2f} over k ∈ {sw['ks']}; one simulation, no interval"))


def _manifolds(res: Results, cfg: dict, base: FiGuROConfig, seed: int) -> None:
    import skdim

    bm = skdim.datasets.BenchmarkManifolds(random_state=seed)
    methods = ("figuro", "figuro-one-shot", "lpca-of-latent", "figuro-capacity", "twonn", "mle",
               "lpca", "danco")
    rel = {m: [] for m in methods}
    at_d = 0
    for name in cfg["manifolds"]:
        d, D, _ = bm._dict_truth[name]
        x = bm.generate(name, n=cfg["n"], dim=D, d=d).astype(np.float32)  # skdim 0.5 needs both
        f = _fig(base, x, seed)
        at_d += int(f.dimension_ >= D)
        est = {"figuro": float(f.dimension_),
               # ablations of the same fit: one-shot truncation at the same bound, no search;
               # lPCA of the pre-trained full-rank latent
               "figuro-one-shot": float(f.one_shot_ranks_["private0"]),
               "lpca-of-latent": baselines.unimodal("lpca", f.latent_codes_[0], seed,
                                                     cfg["params"].get("lpca")),
               # capacity ablation: encoder/decoder width × 2, depth + 1, all else equal
               "figuro-capacity": float(_fig(base, x, seed, hidden=2 * base.hidden,
                                             depth=base.depth + 1).dimension_)}
        for c in ("twonn", "mle", "lpca", "danco"):
            est[c] = baselines.unimodal(c, x, seed, cfg["params"].get(c))
        for m, v in est.items():
            rel[m].append(abs(v - d) / d)
            res.add("manifolds", m, "estimate", v, seeds=[seed], manifold=name, true_id=d, ambient=D)
    for m, v in rel.items():
        res.add("manifolds", m, "median_relative_error", float(np.median(v)), seeds=[seed])
        res.add("manifolds", m, "mean_relative_error", float(np.mean(v)), seeds=[seed])
    res.add("manifolds", "figuro", "answers_equal_to_D", float(at_d), seeds=[seed])
    iv = paired_interval(rel["figuro"], rel["lpca"])
    res.add("manifolds", "figuro", "minus_lpca_relative_error", float(iv.mean),
            interval=[iv.low, iv.high],
            note="the informative figure: below 0 the search adds something beyond a linear rank")
    best = min((m for m in ("twonn", "mle", "lpca", "danco")), key=lambda m: np.median(rel[m]))
    iv = paired_interval(rel["figuro"], rel[best])
    res.claims.append(ClaimCheck.compare(
        CLAIM["manifolds"], float(np.median(rel["figuro"])), float(np.median(rel[best])), best,
        interval=[iv.low, iv.high],
        note=f"interval: paired t interval of per-manifold relative errors ({len(rel['figuro'])} "
             "manifolds)"))


def _probe(z, y, seed) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if z is None or z.shape[1] == 0:
        return np.full(5, np.nan)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    return cross_val_score(clf, z, y, cv=StratifiedKFold(5, shuffle=True, random_state=seed))


def _digits(res: Results, base: FiGuROConfig, seed: int) -> None:
    from icml26_shared.data import load_sklearn

    X, y = load_sklearn("digits")
    img = X.reshape(-1, 8, 8)
    left, right = img[:, :, :4].reshape(len(X), -1), img[:, :, 4:].reshape(len(X), -1)
    f = _fig(base, [left, right], seed)
    codes = f.transform([left, right])
    res.add("digits", "figuro", "shared_dim", float(f.shared_dim_), seeds=[seed])
    res.add("digits", "figuro", "private_dims", float(sum(f.private_dims_)), seeds=[seed],
            private=f.private_dims_)
    for name, z in (("shared", codes["shared"]), ("private_left", codes["private"][0]),
                    ("full_pixels", X)):
        acc = _probe(z, y, seed)
        res.add("digits", f"probe_{name}", "class_accuracy", [float(a) for a in acc])


TEMPLATES = ("a photo of the digit {}", "this is a handwritten {}", "the number {} written by hand",
             "an image showing {}", "{} scanned from a form")
NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _posthoc(res: Results, base: FiGuROConfig, seed: int) -> None:
    from icml26_shared.data import load_sklearn, minilm_dir

    from .io import embed_texts

    X, y = load_sklearn("digits")
    rng = np.random.default_rng(seed)
    tmpl = rng.integers(0, len(TEMPLATES), len(y))
    texts = [TEMPLATES[t].format(NAMES[c]) for t, c in zip(tmpl, y)]
    emb, _ = embed_texts(texts, minilm_dir())
    f = _fig(base, [X.astype(np.float32), emb], seed)
    codes = f.transform([X.astype(np.float32), emb])
    full = _probe(emb, y, seed)
    sh_cls = _probe(codes["shared"], y, seed)
    tp_priv = _probe(codes["private"][1], tmpl, seed)
    tp_sh = _probe(codes["shared"], tmpl, seed)
    res.add("posthoc", "figuro", "shared_dim", float(f.shared_dim_), seeds=[seed],
            private=f.private_dims_)
    for name, acc in (("class_full_text", full), ("class_shared", sh_cls),
                      ("template_text_private", tp_priv), ("template_shared", tp_sh)):
        res.add("posthoc", f"probe_{name}", "accuracy", [float(a) for a in acc])
    note = f"k_s = {f.shared_dim_}, private {f.private_dims_}; intervals over the 5 CV folds"
    if np.isnan(sh_cls).any():
        res.claims.append(ClaimCheck.compare(CLAIM["posthoc_class"], 0.0, threshold=0.95,
                                             note=note + "; shared rank 0: no shared code"))
    else:
        ratio = sh_cls / full
        res.claims.append(ClaimCheck.compare(CLAIM["posthoc_class"], float(ratio.mean()),
                                             threshold=0.95, interval=_ci(ratio)[1], note=note))
    res.claims.append(ClaimCheck.compare(CLAIM["posthoc_template"], float(np.nanmean(tp_priv)),
                                         threshold=0.9, interval=_ci(np.nan_to_num(tp_priv))[1],
                                         note=note))
    chance = 1 / len(TEMPLATES)
    leak = np.nan_to_num(tp_sh, nan=chance)
    res.claims.append(ClaimCheck.compare(CLAIM["posthoc_leak"], float(leak.mean()),
                                         threshold=chance + 0.05, interval=_ci(leak)[1], note=note))


#: issue 63 item 6: robustness over ≥ 3 configurations × 3 seeds (not in quick: 36 fits)
ROBUST = dict(configs=((2, 2, 2), (5, 3, 1), (0, 4, 4)), seeds=(0, 1, 2), lams=(0.05, 0.1),
              Ls=(16, 32, 64), ks=(5, 10, 20, 50))


def robustness_study(res: Results | None = None, base: FiGuROConfig | None = None, seed: int = 0,
                     n: int = 2000, dim: int = 50, **design) -> Results:
    """Robustness to hyperparameters over configurations × seeds, with intervals (issue 63
    item 6). For each (configuration, seed) unit, FiGuRO's shared estimate over the two axes
    through ``base`` (λ ∈ ``lams`` at its L, L ∈ ``Ls`` at its λ) gives one spread (max − min);
    MLE inclusion–exclusion over K ∈ ``ks`` gives another. Claims: the mean spread ≤ 1 (t interval
    over the units) and FiGuRO's spread − 0.5 × MLE-IE's ≤ 0 (paired t interval). Too costly for
    quick (3 × 3 × 4 = 36 fits at n = 2,000, ≈ 20 CPU-min); run it on its own:
    ``uv run python -c "from figuro.experiments import robustness_study as r; r().to_json('robust.json')"``.
    """
    d = {**ROBUST, **design}
    base = base or FiGuROConfig()
    if res is None:
        res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
        res.notes.append("robustness_study run on its own (issue 63 item 6), not a full run.")
    lam0, L0 = base.distortion_threshold, base.latent_dim
    settings = list(dict.fromkeys([(lam, L0) for lam in d["lams"]] + [(lam0, L) for L in d["Ls"]]))
    ours, mle, units = [], [], []
    for conf in d["configs"]:
        for s in (seed + i for i in d["seeds"]):
            x1, x2, _ = simulate(*conf, n=n, dim=dim, seed=s)
            est = [float(_fig(base, [x1, x2], s, distortion_threshold=lam, latent_dim=L).shared_dim_)
                   for lam, L in settings]
            km = [float(baselines.estimate("mle", [x1, x2], s, params={"K": k})["shared"])
                  for k in d["ks"]]
            ours.append(max(est) - min(est))
            mle.append(max(km) - min(km))
            units.append(f"{tuple(conf)}/{s}")
            res.add("robustness_grid", "figuro", "shared_estimates", est[0], seeds=[s],
                    config=list(conf), settings=[list(x) for x in settings], estimates=est)
            res.add("robustness_grid", "mle-ie", "shared_estimates", km[0], seeds=[s],
                    config=list(conf), ks=list(d["ks"]), estimates=km)
    seeds = [seed + i for i in d["seeds"]]
    for m, v in (("figuro", ours), ("mle-ie", mle)):
        res.add("robustness_grid", m, "shared_spread", v, seeds=seeds, runs=units)
    _, iv = _ci(np.array(ours))
    note = f"{len(units)} units (configurations × seeds), settings {settings}"
    res.claims.append(ClaimCheck.compare(CLAIM["robust_spread"], float(np.mean(ours)),
                                         threshold=1.0, interval=iv, note=note))
    _, iv = _ci(np.array(ours), 0.5 * np.array(mle))
    res.claims.append(ClaimCheck.compare(
        CLAIM["robust_vs_skdim"], float(np.mean(ours)), 0.5 * float(np.mean(mle)),
        "0.5 × mle-ie spread over K", interval=iv, note=note + f"; MLE K ∈ {d['ks']}"))
    return res
