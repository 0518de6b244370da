"""``figuro``: estimate / multimodal / compare / sweep / simulate / embed / reproduce.

Heavy imports (torch, skdim, sentence-transformers) live inside the commands, so ``--help`` is
fast. Every user mistake is one ``figuro: error: ...`` line and exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import add_reproduce_arguments, reproduce_from_args

ESTIMATORS = ("twonn", "mle", "danco", "lpca", "ajive", "figuro")


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


def _threshold(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(v) or not 0 < v <= 10:
        raise argparse.ArgumentTypeError(f"must be a finite number in (0, 10], got {text!r}")
    return v


def _list(parse):
    def inner(text: str) -> list:
        return [parse(t) for t in text.split(",") if t.strip()]
    return inner


def _json_target(args) -> Path | None:
    from .io import check_new

    return check_new(args.json) if getattr(args, "json", None) is not None else None


def _emit(obj: dict, target: Path | None) -> int:
    from icml26_shared.io import print_json

    if target is not None:
        from .io import save_json

        save_json(target, obj)
    print_json(obj, indent=2)
    return 0


def _fit(views, args):
    import warnings

    from .estimator import FiGuRO

    est = FiGuRO(latent_dim=args.latent_dim, distortion_threshold=args.threshold,
                 max_rounds=args.max_rounds, n_threads=args.threads, random_state=args.seed)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            est.fit(views if len(views) > 1 else views[0])
    except ValueError as exc:
        raise UserError(str(exc)) from None
    est.cli_warnings_ = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    for w in est.cli_warnings_:
        print(f"figuro: warning: {w}", file=sys.stderr)
    return est


def _report(est) -> dict:
    """What every FiGuRO command prints beside the ranks: the answer's own held-out distortion,
    the reference, the pre-training and search summaries, and any warning."""
    return {"answer_distortion": est.answer_distortion_,
            "reference_distortion": est.reference_distortion_,
            "distortion_unit": est.distortion_scale_,
            "pretrain_steps": est.pretrain_steps_, "pretrain_plateau": est.pretrain_plateau_,
            "history": est.rank_history_, "stop": est.stop_reason_,
            "max_rounds_hit": est.stopped_by_max_rounds_, "warnings": est.cli_warnings_}


def _cmd_estimate(args) -> int:
    from .io import load_views

    target = _json_target(args)
    views = load_views([args.X], min_rows=4 * args.latent_dim)
    est = _fit(views, args)
    return _emit({"dimension": int(est.dimension_), **_report(est)}, target)


def _cmd_multimodal(args) -> int:
    from .io import load_views

    target = _json_target(args)
    views = load_views(args.views, args.id_column, min_rows=4 * args.latent_dim)
    est = _fit(views, args)
    return _emit({"shared": int(est.shared_dim_), "private": [int(k) for k in est.private_dims_],
                  **_report(est)}, target)


def _cmd_compare(args) -> int:
    from .io import load_views

    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown or not names:
        raise UserError(f"unknown estimator {', '.join(unknown) or '(none)'} "
                        f"(choose from {', '.join(ESTIMATORS)})")
    target = _json_target(args)
    views = load_views(args.views, args.id_column, min_rows=4 * args.latent_dim)
    if len(views) > 2:
        raise UserError("compare takes one view (dimension) or two (shared/private)")
    if "ajive" in names and len(views) != 2:
        raise UserError("ajive needs two views")
    from . import baselines

    out = {}
    for name in names:
        if name == "figuro":
            est = _fit(views, args)
            out[name] = ({"dimension": est.dimension_} if len(views) == 1 else
                         {"shared": est.shared_dim_, "private": est.private_dims_})
        else:
            r = baselines.estimate(name, views, args.seed)
            out[name] = {k: r[k] for k in ("dimension", "shared", "private") if k in r}
    return _emit(out, target)


def _cmd_sweep(args) -> int:
    from .io import load_views

    target = _json_target(args)
    views = load_views(args.views, args.id_column, min_rows=4 * max(args.latent_dims))
    from .estimator import FiGuRO

    rows = []
    for lam in args.lambdas:
        for L in args.latent_dims:
            est = FiGuRO(latent_dim=L, distortion_threshold=lam, random_state=args.seed)
            try:
                est.fit(views)
            except ValueError as exc:
                raise UserError(str(exc)) from None
            rows.append({"lambda": lam, "latent_dim": L, "shared": est.shared_dim_,
                         "private": est.private_dims_, "max_rounds_hit": est.stopped_by_max_rounds_})
            print(f"λ={lam:<6g} L={L:<3d} shared={est.shared_dim_} private={est.private_dims_}",
                  file=sys.stderr)
    shared = [r["shared"] for r in rows]
    return _emit({"runs": rows, "shared_spread": max(shared) - min(shared)}, target)


def _cmd_simulate(args) -> int:
    from .io import check_new, save_dir

    check_new(args.out)
    from .core import simulate

    try:
        x1, x2, truth = simulate(args.ks, args.k1, args.k2, n=args.n, dim=args.dim, seed=args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    save_dir(args.out, {"x1.npy": x1, "x2.npy": x2, "truth.json": truth})
    print(f"wrote {args.out}/x1.npy, x2.npy ({args.n} × {args.dim}) and truth.json "
          f"(shared {args.ks}, private [{args.k1}, {args.k2}])")
    return 0


def _cmd_embed(args) -> int:
    from .io import check_new, embed_texts, load_texts, resolve_model_dir, save_npy

    if args.out.suffix.lower() != ".npy":
        raise UserError(f"--out must end in .npy, got {args.out}")
    check_new(args.out)
    model_dir = resolve_model_dir(args.model)
    texts = load_texts(args.texts)
    emb, hit = embed_texts(texts, model_dir, batch_size=args.batch_size)
    save_npy(args.out, emb)
    print(f"wrote {emb.shape[0]} × {emb.shape[1]} embeddings to {args.out} "
          f"({'cache hit' if hit else 'encoded'}; model {model_dir})")
    return 0


def _common(p, views: bool = True) -> None:
    p.add_argument("--latent-dim", type=_int_at_least(1), default=32, help="L (default 32)")
    p.add_argument("--threshold", type=_threshold, default=0.05, help="λ (default 0.05)")
    p.add_argument("--max-rounds", type=_int_at_least(1), default=200,
                   help="most rank checks before the search stops (default 200)")
    p.add_argument("--threads", type=_int_at_least(1), default=1, help="torch CPU threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the result here (new file)")
    if views:
        p.add_argument("--id-column", default=None, help="CSV column that aligns rows across views")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="figuro", description="Shared and private intrinsic dimension by "
                "fidelity-guided rank optimisation (FiGuRO, reconstructed) and classical baselines.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    e = sub.add_parser("estimate", help="intrinsic dimension of one view (.npy or CSV)")
    e.add_argument("X", type=Path)
    _common(e, views=False)
    e.set_defaults(fn=_cmd_estimate)

    m = sub.add_parser("multimodal", help="shared and private dimensions of paired views")
    m.add_argument("views", nargs="+", type=Path, metavar="X")
    _common(m)
    m.set_defaults(fn=lambda a: _cmd_multimodal(_need_two(a)))

    c = sub.add_parser("compare", help="several estimators on one view or two paired views")
    c.add_argument("views", nargs="+", type=Path, metavar="X")
    c.add_argument("--estimators", default="twonn,mle,lpca,ajive,figuro",
                   help=f"comma-separated, from {','.join(ESTIMATORS)}")
    _common(c)
    c.set_defaults(fn=_cmd_compare)

    s = sub.add_parser("sweep", help="robustness: the shared estimate over λ × L")
    s.add_argument("views", nargs="+", type=Path, metavar="X")
    s.add_argument("--lambdas", type=_list(_threshold), default=[0.01, 0.05, 0.1])
    s.add_argument("--latent-dims", type=_list(_int_at_least(1)), default=[16, 32, 64])
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", type=Path, default=None)
    s.add_argument("--id-column", default=None)
    s.set_defaults(fn=lambda a: _cmd_sweep(_need_two(a)))

    sim = sub.add_parser("simulate", help="paired views with known shared/private dimensions")
    for name in ("--ks", "--k1", "--k2"):
        sim.add_argument(name, type=_int_at_least(0), required=True)
    sim.add_argument("--n", type=_int_at_least(2), default=2000)
    sim.add_argument("--dim", type=_int_at_least(1), default=50)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--out", type=Path, required=True, help="new folder for x1.npy, x2.npy, truth.json")
    sim.set_defaults(fn=_cmd_simulate)

    em = sub.add_parser("embed", help="sentence-transformers embeddings of texts (.txt or JSONL)")
    em.add_argument("texts", type=Path)
    em.add_argument("--model", type=Path, default=None, help="local model folder (default MiniLM)")
    em.add_argument("--out", type=Path, required=True, help="new .npy file")
    em.add_argument("--batch-size", type=_int_at_least(1), default=64)
    em.set_defaults(fn=_cmd_embed)

    r = sub.add_parser("reproduce", help="run the reproduction (smoke / quick / full)")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args(["figuro"], a))
    return p


def _need_two(args):
    if len(args.views) < 2:
        raise UserError(f"{args.command} needs at least two views (got {len(args.views)})")
    return args


@cli_entry("figuro")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
