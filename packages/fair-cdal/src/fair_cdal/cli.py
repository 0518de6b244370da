"""``fair-cdal``: fit / predict / eval / front / scale / reproduce. Heavy imports live inside the
commands. Every user mistake is one ``fair-cdal: error: ...`` line and exit code 2; outputs are
staged in a temporary folder and renamed, so a refused or failed run leaves nothing behind."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import (
    add_reproduce_arguments,
    float_in,
    nonneg_float,
    positive_int,
    reproduce_from_args,
)

METHODS = ("cdal", "cdal_kmeans", "fair_kmeans", "concat_kmeans", "anchor_mvc", "fair_spectral",
           "vfc", "cdal_prox_only", "cdal_alpha0", "cdal_beta0", "cdal_gamma0", "cdal_all0")


def _anchors(text: str):
    return text if text.strip().lower().endswith("k") else positive_int(text)


def _load(args, need_labels: bool = False):
    from .io import read_column, read_views

    views, y, g = read_views(args.views)
    n = views[0].shape[0]
    if args.sensitive is not None:
        g = read_column(args.sensitive, args.sensitive_column, n=n, what="sensitive")
    if g is None:
        raise UserError("--sensitive FILE is required (or a .mat file with a variable g)")
    if need_labels:
        if getattr(args, "labels", None) is not None:
            y = read_column(args.labels, args.label_column, n=n)
        if y is None:
            raise UserError("--labels FILE is required (or a .mat file with a variable y)")
    if not 1 <= args.n_clusters < n:
        raise UserError(f"--n-clusters {args.n_clusters} must be below the {n} samples")
    return views, y, g


def _write_assignments(path: Path, labels) -> None:
    with path.open("w") as f:
        f.write("index,cluster\n")
        f.writelines(f"{i},{int(c)}\n" for i, c in enumerate(labels))


def _threads(args):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(args.threads)


def _cmd_fit(args) -> int:
    import warnings

    import joblib

    from .estimator import CDAL
    from .io import staged_dir, write_json

    views, _, g = _load(args)
    if len(set(map(str, g.reshape(len(g), -1).tolist()))) < 2:
        raise UserError("the sensitive column holds one group only: nothing for the fairness terms "
                        "to act on (check --sensitive-column)")
    est = CDAL(n_clusters=args.n_clusters, n_anchors=args.n_anchors, alpha=args.alpha, beta=args.beta,
               gamma=args.gamma, assign=args.assign, rho=args.rho, chunk_size=args.chunk_size,
               max_iter=args.max_iter, n_init=args.n_init, random_state=args.seed)
    with staged_dir(args.out) as tmp, _threads(args):
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # reported below as one line
                est.fit(views, sensitive_features=g)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        seconds = time.perf_counter() - t0
        _write_assignments(tmp / "assignments.csv", est.labels_)
        joblib.dump(est, tmp / "model.joblib")
        write_json(tmp / "fit.json", {
            "objective": est.objective_.tolist(), "n_iter": est.n_iter_, "seconds": seconds,
            "fairness_terms_active": est.fairness_terms_active_, "n_groups": est.n_groups_,
            "n_anchors": est.n_anchors_, "objective_terms": est.objective_terms_,
            "converged": est.converged_, "block_gaps": est.block_gaps_,
            "weights_raw": {"alpha": est.alpha_raw_, "beta": est.beta_raw_, "gamma": est.gamma_raw_},
            "hsic_zu": est.hsic_, "anchor_balance": est.anchor_balance_, "balance": est.balance_,
            "params": {k: v for k, v in est.get_params().items()}})
    print(f"{len(est.labels_)} samples, {args.n_clusters} clusters, {est.n_iter_} iterations in "
          f"{seconds:.1f} s -> {args.out}")
    if not est.converged_:
        print(f"not converged: stopped at --max-iter {args.max_iter} with the objective still moving "
              f"(raise --max-iter)")
    return 0


def _cmd_predict(args) -> int:
    import joblib

    from .io import read_views, write_text_atomic

    model = Path(args.model) / "model.joblib"
    if not model.is_file():
        raise UserError(f"{model} does not exist (give the folder written by `fair-cdal fit`)")
    if Path(args.out).exists():
        raise UserError(f"{args.out} already exists (choose a new --out)")
    try:
        est = joblib.load(model)
    except Exception as exc:  # corrupt pickle
        raise UserError(f"{model}: cannot load ({exc})") from None
    views, _, _ = read_views(args.views)
    try:
        labels = est.predict(views)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    write_text_atomic(args.out, "index,cluster\n" + "".join(f"{i},{int(c)}\n" for i, c in enumerate(labels)))
    print(f"{len(labels)} assignments -> {args.out}")
    return 0


def _cmd_eval(args) -> int:
    from icml26_shared.io import print_json

    from .io import read_column
    from .metrics import evaluate

    pred = read_column(args.assignments, ["cluster"] if str(args.assignments).endswith(".csv") else None,
                       what="assignments")
    n = pred.shape[0]
    y = read_column(args.labels, args.label_column, n=n)
    g = read_column(args.sensitive, args.sensitive_column, n=n, what="sensitive")
    from .core import group_codes

    scores = evaluate(y, pred, group_codes(g)[0])
    if args.json:
        print_json(scores, indent=2)
    else:
        for k, v in scores.items():
            print(f"{k:<20}{v:.4f}")
    return 0


def _cmd_front(args) -> int:
    import csv

    import numpy as np

    from .baselines import BASELINES, KNOBS
    from .core import group_codes
    from .io import staged_dir
    from .metrics import evaluate
    from .plots import pareto_plot

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in BASELINES]
    if unknown:
        raise UserError(f"unknown method {unknown[0]!r} (choose from {', '.join(BASELINES)})")
    views, y, g = _load(args, need_labels=True)
    g = group_codes(g)[0]
    rows, mean = [], {}
    with staged_dir(args.out) as tmp, _threads(args):
        for meth in methods:
            knob, settings, default = KNOBS[meth]
            for s in settings or (None,):
                kw = {} if knob is None else {knob: s}
                m = evaluate(y, BASELINES[meth](views, g, args.n_clusters, args.seed, **kw), g)
                label = "default" if s is None else f"{knob}={s:g}"
                mean[(meth, label)] = m
                rows.append([meth, label + (" *" if s == default else ""),
                             *(f"{m[k]:.4f}" for k in ("acc", "nmi", "balance_ratio", "mnce"))])
                print(" ".join(map(str, rows[-1])))
        with (tmp / "front.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["method", "setting", "acc", "nmi", "balance_ratio", "mnce"])
            w.writerows(rows)
        pareto_plot(mean, tmp / "front.png", f"{len(np.asarray(y))} samples")
    print(f"front (* = default setting) -> {args.out}")
    return 0


def _cmd_scale(args) -> int:
    from .scale import run_scale

    ns = []
    for part in args.n.split(","):
        try:
            v = float(part)
        except ValueError:
            raise UserError(f"--n: {part!r} is not a number") from None
        if not math.isfinite(v) or v < 100:
            raise UserError(f"--n: every size must be a finite number >= 100, got {part!r}")
        ns.append(int(v))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(args.threads):
        run_scale(ns, args.iters, args.chunk_size, args.out, args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fair-cdal", description="CDAL: fair multi-view clustering in linear time "
                "(Causal Disentangled Anchor Learning, ICML 2026).")
    sub = p.add_subparsers(dest="command", required=True)

    def views_and_groups(q):
        q.add_argument("views", nargs="+", metavar="VIEW", help="views: .csv (header) / .npy, or one .mat v5")
        q.add_argument("--sensitive", type=Path, help="sensitive features: .csv (header) or .npy")
        q.add_argument("--sensitive-column", action="append", default=None,
                       help="column(s) of --sensitive; several = intersectional groups")
        q.add_argument("--n-clusters", type=positive_int, required=True)
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
        q.add_argument("--threads", type=positive_int, default=1,
                       help="BLAS threads (default 1: the machine may be shared)")

    f = sub.add_parser("fit", help="fit CDAL; write assignments.csv, model.joblib, fit.json")
    views_and_groups(f)
    f.add_argument("--n-anchors", type=_anchors, default="2k", help="integer or like 2k (default)")
    for name in ("alpha", "beta", "gamma"):
        f.add_argument(f"--{name}", type=nonneg_float, default=1.0,
                       help="scale-free weight (raw = this × the stated scale, README)")
    f.add_argument("--assign", choices=("fair", "kmeans"), default="fair",
                   help="final step: fair assignment under the share bound (default) or k-means")
    f.add_argument("--rho", type=float_in(0.0, 1.0), default=0.8,
                   help="share bound: every cluster's group shares within [rho, 1/rho] x the data's")
    f.add_argument("--n-init", type=positive_int, default=1, help="fits from several seeds, keep the best")
    f.add_argument("--max-iter", type=positive_int, default=50)
    f.add_argument("--chunk-size", type=positive_int, default=None, help="stream views in row blocks")
    f.set_defaults(fn=_cmd_fit)

    q = sub.add_parser("predict", help="assign new rows with a fitted model folder")
    q.add_argument("model", type=Path, metavar="DIR")
    q.add_argument("views", nargs="+", metavar="VIEW")
    q.add_argument("--out", type=Path, required=True, help="assignments CSV (must not exist)")
    q.set_defaults(fn=_cmd_predict)

    e = sub.add_parser("eval", help="acc, nmi, purity, f, balance_ratio, balance_proportion, mnce")
    e.add_argument("assignments", type=Path)
    e.add_argument("--labels", type=Path, required=True)
    e.add_argument("--label-column", action="append", default=None)
    e.add_argument("--sensitive", type=Path, required=True)
    e.add_argument("--sensitive-column", action="append", default=None)
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_eval)

    r = sub.add_parser("front", help="each method over its fairness knob: front.csv + Pareto plot")
    views_and_groups(r)
    r.add_argument("--labels", type=Path)
    r.add_argument("--label-column", action="append", default=None)
    r.add_argument("--methods", default="cdal,anchor_mvc,fair_spectral,vfc,concat_kmeans")
    r.set_defaults(fn=_cmd_front)

    s = sub.add_parser("scale", help="time per CDAL iteration and peak memory vs n (synthetic)")
    s.add_argument("--n", default="1e4,1e5,1e6", help="comma-separated sizes")
    s.add_argument("--iters", type=positive_int, default=2)
    s.add_argument("--chunk-size", type=positive_int, default=None)
    s.add_argument("--threads", type=positive_int, default=1, help="BLAS threads (default 1)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    s.set_defaults(fn=_cmd_scale)

    rp = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(rp)
    rp.set_defaults(fn=lambda a: reproduce_from_args(["fair-cdal"], a))
    return p


@cli_entry("fair-cdal")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
