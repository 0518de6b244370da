"""The dd-multiindex command line: sweep / fit-slopes / distill / evaluate / plot / reproduce.
Heavy imports (torch, scipy, matplotlib) live inside the commands, so ``--help`` stays light."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import add_reproduce_arguments, nonneg_int, reproduce_from_args
from icml26_shared.io import print_json

PROG = "dd-multiindex"
TARGETS = {"m1_star": ("r", "d", "L"), "memory_stage2": ("L", "d", "r"), "compression": ("d", "r", "L")}


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line (via UserError), not a usage dump."""

    def error(self, message: str):  # type: ignore[override]
        raise UserError(f"{self.prog.removeprefix(PROG).strip() or 'arguments'}: {message}")


def _int_at_least(lo: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v

    return parse


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .runs import make_spec, sweep
    from .sweep import default_distill

    distill = default_distill(args.grid)
    if args.steps is not None:
        distill = replace(distill, steps=args.steps)
    spec = make_spec(args.grid, args.distiller, args.link, args.seeds, args.seed, distill, args.activation)

    def show(row: dict) -> None:
        flags = f" [{', '.join(row['flags'])}]" if row["flags"] else ""
        print(f"d={row['d']} r={row['r']} L={row['L']} seed={row['seed']}: m1*={row['m1_star']} "
              f"m2*={row['m2_star']} memory={row['memory']} n_real*={row['n_real_star']}{flags}",
              file=sys.stderr, flush=True)

    rows = sweep(spec, args.out, workers=args.workers, device=args.device, on_row=show)
    print(f"{len(rows)} rows in {args.out / 'rows.jsonl'}")
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    from .core import fit_slopes
    from .io import load_run

    if args.reference_met and not args.law:
        raise UserError("--reference-met selects rows for the --law fits: add --law")
    rows = load_run(args.run)
    if args.law:
        return _print_law_fits(args, rows)
    if args.target is not None:
        if args.target not in TARGETS:
            raise UserError(f"unknown --target {args.target!r} (choose from {', '.join(TARGETS)})")
        wanted = {args.target: tuple(a.strip() for a in (args.over or "").split(",") if a.strip())
                  or TARGETS[args.target][:2]}
        for axis in wanted[args.target]:
            if axis not in ("d", "r", "L"):
                raise UserError(f"unknown axis {axis!r} in --over (choose from d, r, L)")
    else:
        wanted = {}
        for t, axes in TARGETS.items():
            have = [r for r in rows if r.get(t) is not None]
            varying = tuple(a for a in axes if len({r[a] for r in have}) >= 2)
            if varying:
                wanted[t] = varying
        if not wanted:
            raise UserError(f"{args.run}: no target varies over at least 2 values of any axis")
    out: dict[str, dict] = {}
    for t, axes in wanted.items():
        try:
            slopes = fit_slopes(rows, t, axes)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        out[t] = {a: {"exponent": s.exponent, "ci_low": s.ci_low, "ci_high": s.ci_high} for a, s in slopes.items()}
    if args.json:
        print_json(out, indent=2)
        return 0
    print(f"{'target':<15}{'axis':<6}{'exponent':>10}{'90% CI':>22}")
    for t, per in out.items():
        for a, s in per.items():
            print(f"{t:<15}{a:<6}{s['exponent']:>10.3f}   [{s['ci_low']:>7.3f}, {s['ci_high']:>7.3f}]")
    return 0


def _print_law_fits(args: argparse.Namespace, rows: list[dict]) -> int:
    """``fit-slopes --law``: the item-2 fits of m1* (floor-power in r, per-d r-slopes, power vs
    polylog in d), ceiling rows censored at the run's m1 ceiling."""
    from .io import read_spec
    from .laws import law_fits

    spec = read_spec(args.run) or {}
    ceiling = (spec.get("search") or {}).get("m1_max")
    stage1 = [r for r in rows if "1" in str(r.get("stages", "1"))]
    kept = [r for r in stage1 if r.get("ref_meets_target", True)] if args.reference_met else stage1
    try:
        lf = law_fits(kept, ceiling=ceiling, n_resamples=args.resamples)
    except ValueError as exc:
        raise UserError(f"{args.run}: {exc}") from None
    out = {k: lf[k] for k in ("n_observed", "n_censored", "n_missing")}
    out["n_reference_missed"] = len(stage1) - len(kept)
    for kind in ("floor_power", "r_slope", "d_law"):
        out[kind] = {str(key): dict(law=f.law, params=f.params, ci90=f.ci90, loglik=f.loglik, aic=f.aic,
                                    n_observed=f.n_observed, n_censored=f.n_censored)
                     for key, f in lf[kind].items()}
    if args.json:
        print_json(out, indent=2)
        return 0
    print(f"m1* rows: {out['n_observed']} observed, {out['n_censored']} censored at the ceiling, "
          f"{out['n_missing']} without a value"
          + (f", {out['n_reference_missed']} left out (their real reference misses the target)"
             if args.reference_met else ""))
    for kind, per in out.items():
        if not isinstance(per, dict):
            continue
        for key, f in per.items():
            ps = ", ".join(f"{n}={v:.3g}" + (f" [{f['ci90'][n][0]:.3g}, {f['ci90'][n][1]:.3g}]" if n in f["ci90"] else "")
                           for n, v in f["params"].items())
            print(f"{kind:<12}{key:<10}{ps}   AIC {f['aic']:.1f}")
    return 0


def _cmd_distill(args: argparse.Namespace) -> int:
    from .config import DistillConfig
    from .core import DistilledSet, MultiIndexTeacher, TwoStageLearner
    from .distill import DISTILLERS, distill_labels
    from .io import check_new_file, save_distilled

    check_new_file(args.out, args.force)
    try:
        teacher = MultiIndexTeacher(args.d, args.r, args.link, seed=args.teacher_seed)
        cfg = DistillConfig(steps=args.steps, lr=args.lr)
        eta1, ridge = args.eta1, args.ridge
        if eta1 is None or ridge is None:  # η₁, λ tuned on a dev teacher (its own U), never this one
            from .config import SweepSpec
            from .sweep import tune_learner

            t_eta1, t_ridge = tune_learner(SweepSpec(cells=((args.d, args.r, args.L, "12"),), link=args.link,
                                                     seed=args.teacher_seed, distiller=args.distiller,
                                                     activation=args.activation), args.d, args.r, args.L)
            eta1 = t_eta1 if eta1 is None else eta1
            ridge = t_ridge if ridge is None else ridge
        learner = TwoStageLearner(args.L, eta1, ridge, args.activation, seed=args.teacher_seed + 1)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    m2 = args.m2 if args.m2 is not None else args.L
    if args.m1 > 4 * args.d**2:
        raise UserError(f"--m1 {args.m1} is more than the {4 * args.d**2} real stage-1 points (4 d²) it is "
                        f"distilled from: choose --m1 <= {4 * args.d**2}")
    X1, y1 = teacher.sample(4 * args.d**2, seed=args.teacher_seed + 2)
    X2, y2 = teacher.sample(4 * args.L, seed=args.teacher_seed + 3)
    xs, ys = DISTILLERS[args.distiller](learner, X1, y1, args.m1, cfg, args.teacher_seed + 4)
    W1 = learner.first_step(xs, ys)
    seed2 = args.teacher_seed + 5
    labels = distill_labels(learner, W1, X2, y2, m2, seed2)
    meta = {"teacher": {"d": args.d, "r": args.r, "link": args.link, "noise": teacher.noise,
                        "seed": args.teacher_seed},
            "learner": {"L": args.L, "eta1": learner.eta1, "ridge": learner.ridge, "activation": learner.activation,
                        "init_scale": learner.config.init_scale, "seed": learner.seed},
            "distiller": args.distiller, "steps": args.steps, "lr": args.lr}
    ds = DistilledSet(xs, ys, labels, seed2, meta)
    save_distilled(args.out, ds, args.force)
    print(f"wrote {args.out}: m1={args.m1} m2={m2} memory={ds.memory} "
          f"(stage 1 {ds.memory_stage1}, stage 2 {ds.memory_stage2})")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .core import MultiIndexTeacher, TwoStageLearner, alignment, mse, stage2_inputs
    from .io import load_distilled

    ds = load_distilled(args.file)
    t, lm = ds.meta["teacher"], ds.meta["learner"]
    try:
        teacher = MultiIndexTeacher(t["d"], t["r"], t["link"], t["noise"], t["seed"])
        learner = TwoStageLearner(lm["L"], lm["eta1"], lm["ridge"], lm["activation"], lm["init_scale"], lm["seed"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{args.file}: bad teacher/learner metadata ({exc})") from None
    if ds.x1.shape[1] != teacher.d:
        raise UserError(f"{args.file}: x1 has {ds.x1.shape[1]} columns but the teacher has d={teacher.d}")
    W1 = learner.first_step(ds.x1.float(), ds.y1.float())
    if ds.y2 is not None:
        X2, y2 = stage2_inputs(ds.seed2, len(ds.y2), teacher.d), ds.y2.float()
    else:
        X2, y2 = teacher.sample(4 * learner.L, seed=t["seed"] + 3)
    model = learner.fit_stage2(W1, X2, y2)
    Xt, yt = teacher.sample(8192, seed=t["seed"] + 99_991)
    # the reference: the same learner on the real data that `distill` drew (4d² stage-1, 4L stage-2 points)
    X1r, y1r = teacher.sample(4 * teacher.d**2, seed=t["seed"] + 2)
    X2r, y2r = teacher.sample(4 * learner.L, seed=t["seed"] + 3)
    ref = learner.fit_stage2(learner.first_step(X1r, y1r), X2r, y2r)
    out = {"test_mse": mse(model, Xt, yt), "alignment": alignment(W1, teacher.U),
           "reference_test_mse": mse(ref, Xt, yt), "predict_0_test_mse": float((yt**2).mean()),
           "memory_stage1": ds.memory_stage1, "memory_stage2": ds.memory_stage2, "memory": ds.memory,
           "reference_memory": (len(y1r) + len(y2r)) * (teacher.d + 1)}
    if not all(math.isfinite(v) for v in out.values()):
        raise UserError(f"{args.file}: the distilled set gives non-finite results (NaN or inf values stored)")
    if args.json:
        print_json(out, indent=2)
    else:
        print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from .experiments import plot_run
    from .io import load_run

    figs = plot_run(load_run(args.run), args.run)
    if not figs:
        raise UserError(f"{args.run}: nothing to plot yet")
    for f in figs:
        print(args.run / f)
    return 0


def _registered() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The distillers and activations a user may name: the built-in ones plus those that plugins
    (entry-point group ``dd_multiindex.plugins``) registered. Without plugins no torch import."""
    from .plugins import load_plugins

    if not load_plugins():
        return ("gm", "pm"), ("relu", "quadratic")
    from .core import ACTIVATIONS
    from .distill import DISTILLERS

    return tuple(DISTILLERS), tuple(ACTIVATIONS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Dataset distillation on multi-index models: a harness for "
                     "the Θ̃(r²d + L) memory law (Kinoshita et al., ICML 2026; reconstructed).")
    sub = parser.add_subparsers(dest="command", required=True)
    pos = _int_at_least(1)
    distillers, activations = _registered()

    s = sub.add_parser("sweep", help="measure m1*, m2*, n_real* per (d, r, L) cell and seed; resumable")
    s.add_argument("--grid", default="smoke", help="smoke, quick, extended (d 16-128 x r 1-8), full or 'd=16,32;r=1,2;L=64' (default: %(default)s)")
    s.add_argument("--distiller", choices=distillers, default="gm")
    s.add_argument("--activation", choices=activations, default="relu",
                   help="the learner's σ: relu, quadratic (kink-free control) or a registered one (default: relu)")
    s.add_argument("--link", choices=("he2", "he2+cross"), default="he2")
    s.add_argument("--seeds", type=pos, default=3, help="seeds per cell (default: %(default)s)")
    s.add_argument("--seed", type=_int_at_least(0), default=0, help="base seed S (default: %(default)s)")
    s.add_argument("--workers", type=pos, default=1, help="processes (default: %(default)s)")
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    s.add_argument("--steps", type=_int_at_least(0), default=None, help="distiller steps (default: per grid)")
    s.add_argument("--out", type=Path, required=True, metavar="RUN", help="run folder (resumed if it holds this spec)")
    s.set_defaults(fn=_cmd_sweep)

    f = sub.add_parser("fit-slopes", help="log-log exponents with bootstrap 90%% CIs from a run")
    f.add_argument("run", type=Path, metavar="RUN")
    f.add_argument("--target", default=None, help=f"one of {', '.join(TARGETS)} (default: all that vary)")
    f.add_argument("--over", default=None, help="comma-separated axes for --target, e.g. r,d")
    f.add_argument("--law", action="store_true",
                   help="m1* fits that match the law: a + b*r^p, per-d r-slopes, power vs polylog in d "
                        "(ceiling rows censored)")
    f.add_argument("--reference-met", action="store_true",
                   help="--law on the rows whose real reference learner meets the target only (the others "
                        "are counted, not censored): the sensitivity fit of docs/experiments.md")
    f.add_argument("--resamples", type=nonneg_int, default=200, metavar="N",
                   help="bootstrap resamples for the --law CIs (0: point fits only; default 200)")
    f.add_argument("--json", action="store_true")
    f.set_defaults(fn=_cmd_fit)

    d = sub.add_parser("distill", help="distil one teacher into a safetensors file")
    d.add_argument("--d", type=pos, required=True)
    d.add_argument("--r", type=pos, required=True)
    d.add_argument("--L", type=pos, required=True)
    d.add_argument("--m1", type=pos, required=True, help="distilled stage-1 points")
    d.add_argument("--m2", type=pos, default=None, help="distilled stage-2 labels (default: L)")
    d.add_argument("--distiller", choices=distillers, default="gm")
    d.add_argument("--activation", choices=activations, default="relu", help="the learner's σ (default: relu)")
    d.add_argument("--link", choices=("he2", "he2+cross"), default="he2")
    d.add_argument("--teacher-seed", type=_int_at_least(0), required=True)
    d.add_argument("--steps", type=_int_at_least(0), default=400, help="cap on the distiller steps (it stops at its plateau)")
    d.add_argument("--lr", type=float, default=0.1)
    d.add_argument("--eta1", type=float, default=None,
                   help="the learner's step (default: tuned with --ridge on a dev teacher of the same d, r, L)")
    d.add_argument("--ridge", type=float, default=None, help="the learner's ridge λ (default: tuned on a dev teacher)")
    d.add_argument("--out", type=Path, required=True, metavar="FILE.safetensors")
    d.add_argument("--force", action="store_true", help="replace --out if it exists")
    d.set_defaults(fn=_cmd_distill)

    e = sub.add_parser("evaluate", help="test MSE, alignment and memory of a distilled set")
    e.add_argument("file", type=Path, metavar="FILE")
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_evaluate)

    p = sub.add_parser("plot", help="log-log plots of a run (PNG files written into RUN)")
    p.add_argument("run", type=Path, metavar="RUN")
    p.set_defaults(fn=_cmd_plot)

    r = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args([PROG], a))
    return parser


@cli_entry(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
