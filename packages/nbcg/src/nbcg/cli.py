"""The nbcg command line: train / predict / eval / dag / coalitions / synth / reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import add_reproduce_arguments, float_in, positive_int, reproduce_from_args
from icml26_shared.io import print_json

# the arms of nbcg.baselines.ARMS (kept here so --help imports no torch; a test pins the equality)
METHODS = ("nbcg", "nbcg-bce", "nbcg-asl", "nbcg-db", "nbcg-nomask", "bce", "resample", "focal", "cb", "asl", "db", "random-nash", "causal-uniform", "nash-mtl")


def _features_kind(value: str) -> str:
    if value in ("tfidf", "minilm") or (value.startswith("st:") and len(value) > 3):
        return value
    raise argparse.ArgumentTypeError(f"must be tfidf, minilm or st:DIR, got {value!r}")


def _cmd_train(args: argparse.Namespace) -> int:
    from .io import read_dataset, refuse_existing
    from .pipeline import fit, save
    from .scale import process_group

    refuse_existing(args.out)
    from .estimator import resolve_device

    device = resolve_device(args.device)      # cuda without a GPU: refused before any work
    if args.model is not None and args.features != "tfidf":
        raise UserError("--model fine-tunes its own encoder; drop --features")
    if args.model is not None and not (args.model / "config.json").is_file():
        raise UserError(f"{args.model}: not a Hugging Face model folder (no config.json)")
    if args.features == "minilm":
        from .features import _require_minilm

        _require_minilm()
    elif args.features.startswith("st:"):
        from .features import _require_st

        _require_st(args.features)       # a missing or wrong folder: one line, before any work
    train = read_dataset(args.train)
    valid = read_dataset(args.valid) if args.valid is not None else None
    group = process_group()
    bundle = fit(train, valid, args.method, args.max_coalition, args.epochs, args.seed,
                 features=args.features, model_dir=args.model, coalition_method=args.coalitions,
                 sem_threshold=args.sem_threshold, group=group, device=device,
                 threshold_mode=args.threshold_mode)
    if group.rank != 0:
        return 0
    save(bundle, args.out)
    m = bundle["meta"]
    from .train import THRESHOLD_GRID

    d, lpd = m["decision"], m["dev_labels_per_doc"]
    if d["mode"] == "global" and m["threshold"] in (float(THRESHOLD_GRID.min()), float(THRESHOLD_GRID.max())):
        print(f"nbcg: warning: the dev-chosen decision threshold {m['threshold']:g} sits on the edge of its grid "
              f"({THRESHOLD_GRID.min():g}-{THRESHOLD_GRID.max():g}); consider --threshold-mode top-k", file=sys.stderr)
    if lpd["gold"] > 0 and not 0.5 <= lpd["predicted"] / lpd["gold"] <= 2.0:
        print(f"nbcg: warning: on dev the model predicts {lpd['predicted']:.2f} labels per document against "
              f"{lpd['gold']:.2f} gold; consider another --threshold-mode or predict --top-k", file=sys.stderr)
    rule = {"global": f"threshold {m['threshold']:.2f}", "top-k": f"top {d.get('k')}",
            "per-label": "per-label thresholds"}[d["mode"]]
    print(f"trained {args.method} (loss {m['loss']}) on {len(train)} documents, {len(m['labels'])} labels, "
          f"{len(m['causal_coalitions'])} {m['coalition_method']} coalitions (max {m['max_coalition']}, "
          f"SEM threshold {m['sem_threshold']}); decision rule {rule} (mode {d['mode']}, "
          f"{d['chosen_by']}, on {m['threshold_chosen_on']}); dev labels per document {lpd['predicted']:.2f} "
          f"(gold {lpd['gold']:.2f}) -> {args.out}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from icml26_shared.io import write_json

    from .experiments import LR_GRID, TUNE_SEEDS, tune
    from .io import refuse_existing

    if not args.force:
        refuse_existing(args.out)
    datasets = [d for d in args.datasets.split(",") if d]
    bad = [d for d in datasets if d not in ("synthetic", "pyapi")]
    if bad or not datasets:
        raise UserError(f"--datasets: unknown data set {bad[0]!r} (synthetic, pyapi)" if bad else "--datasets: none given")
    out = tune(tuple(datasets), tuple(args.lrs or LR_GRID), tuple(args.seeds or TUNE_SEEDS), args.scale,
               progress=None if args.quiet else lambda r: print(
                   f"{r['dataset']} {r['arm']} lr={r['lr']:g} seed={r['seed']}: dev macro-F1 "
                   f"{r['dev_macro_f1']:.4f} at epoch {r['best_epoch']} of {r['max_epochs']}", file=sys.stderr))
    write_json(args.out, out, indent=1)
    for ds, arms in out["chosen"].items():
        print(f"{ds}: " + ", ".join(f"{a} {c['lr']:g}" for a, c in arms.items()))
    print(f"-> {args.out}")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from icml26_shared.io import atomic_write_bytes, atomic_write_text, write_json

    from . import pyapi
    from .io import refuse_existing

    out = Path(args.out)
    side = [out.with_name(out.name + ".meta.json"), out.with_name(out.name + ".NOTICES.txt")]
    for p in (out, *side):
        refuse_existing(p)
    recs, meta, notices = pyapi.build()
    raw = pyapi.records_jsonl(recs)
    atomic_write_text(side[1], notices, mkdir=False)
    write_json(side[0], meta, indent=1, mkdir=False)
    atomic_write_bytes(out, pyapi.gzip_bytes(raw) if out.suffix == ".gz" else raw, mkdir=False)
    print(f"wrote {meta['n_documents']} documents, {meta['n_labels']} labels (sha256 {meta['sha256'][:12]}) "
          f"-> {out}, {side[0].name}, {side[1].name}")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from .io import read_dataset, refuse_existing, write_jsonl
    from .pipeline import predict

    refuse_existing(args.out)
    recs = read_dataset(args.data)
    out = predict(args.model_dir, recs, args.threshold, args.top_k)
    write_jsonl(args.out, out)
    print(f"wrote {len(out)} predictions -> {args.out}")
    return 0


def _cmd_dag(args: argparse.Namespace) -> int:
    from .pipeline import dag_export, load_meta

    print(dag_export(load_meta(args.model_dir), args.export))
    return 0


def _cmd_coalitions(args: argparse.Namespace) -> int:
    from .pipeline import load_meta

    meta = load_meta(args.model_dir)
    labels, counts = meta["labels"], meta["counts"]
    for k, c in enumerate(meta["causal_coalitions"]):
        print(f"coalition {k} ({len(c)} labels): " + ", ".join(f"{labels[j]}({int(counts[j])})" for j in c))
    return 0


def _cmd_split(args: argparse.Namespace) -> int:
    from .io import read_dataset, refuse_existing
    from .pipeline import make_split, save_split

    refuse_existing(args.out)
    parts, info = make_split(read_dataset(args.data), args.kind, args.seed)
    if min(len(v) for v in parts.values()) == 0:
        raise UserError(f"{args.data}: too few documents for a {args.kind} split "
                        f"(sizes {info['sizes']}); nothing was written")
    save_split(parts, info, args.out)
    print(", ".join(f"{k} {v}" for k, v in info["sizes"].items()) + f" -> {args.out}")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from .io import refuse_existing, write_jsonl
    from .synth import make_world, sample

    refuse_existing(args.out)
    world = make_world(seed=args.seed)
    texts, Y = sample(world, args.n, seed=args.seed + 1, shift=args.shift)
    names = world.names
    recs = [{"id": f"doc{i}", "text": t, "labels": [names[j] for j in Y[i].nonzero()[0]]}
            for i, t in enumerate(texts)]
    write_jsonl(args.out, recs)
    print(f"wrote {len(recs)} documents, {len(names)} labels{' (shift split)' if args.shift else ''} "
          f"-> {args.out}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from .core import multilabel_scores
    from .io import read_dataset

    pred = read_dataset(args.pred, need_text=False)
    gold = read_dataset(args.gold, need_text=False)
    if (args.train is None) == (args.model_dir is None):
        raise UserError("eval needs exactly one of --train FILE or --model DIR (for the label frequencies)")
    if args.train is not None:
        train = read_dataset(args.train, need_text=False)
        labels = sorted({x for r in train for x in r["labels"]})
        count_of = {x: 0 for x in labels}
        for r in train:
            for x in r["labels"]:
                count_of[x] += 1
    else:
        from .pipeline import load_meta

        meta = load_meta(args.model_dir)
        labels = list(meta["labels"])
        count_of = dict(zip(labels, meta["counts"], strict=True))
    gold_ids = {r["id"] for r in gold}
    missing = [r["id"] for r in pred if r["id"] not in gold_ids]
    if missing or len(pred) != len(gold):
        raise UserError(f"{args.pred}: ids do not match {args.gold} (e.g. {(missing or ['?'])[0]!r})")
    index = {x: i for i, x in enumerate(labels)}
    unseen = sorted({x for r in gold for x in r["labels"] if x not in index})
    by_id = {r["id"]: r for r in pred}
    L = len(labels)
    Yg, P, S = (np.zeros((len(gold), L)) for _ in range(3))
    for i, g in enumerate(gold):
        p = by_id[g["id"]]
        for x in g["labels"]:
            if x in index:
                Yg[i, index[x]] = 1
        for x in p["labels"]:
            if x in index:
                P[i, index[x]] = 1
        scores = p.get("scores")
        if isinstance(scores, dict):
            for x, s in scores.items():
                if x in index and isinstance(s, (int, float)):
                    S[i, index[x]] = float(s)
        else:
            S[i] = P[i]
    counts = np.array([float(count_of[x]) for x in labels])
    out = multilabel_scores(Yg, P, S, counts, k=args.k, rare_fraction=args.rare_fraction)
    out["unseen_gold_labels"] = len(unseen)
    if args.json:
        print_json(out, indent=None)
    else:
        for key, v in out.items():
            print(f"{key:<20}{v:.4f}" if isinstance(v, float) else f"{key:<20}{v}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nbcg", description="NBCG: Nash-Bargained Causal Game for long-tailed "
                                              "multi-label text classification (reconstructed)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("train", help="train an arm on a JSONL/CSV file and store the model folder")
    p.add_argument("train", type=Path, help='JSONL {"id", "text", "labels"} or CSV id,text,labels')
    p.add_argument("--valid", type=Path, help="dev file for the threshold (default: 20%% of TRAIN)")
    p.add_argument("--features", type=_features_kind, default="tfidf", metavar="tfidf|minilm|st:DIR",
                   help="TF-IDF, frozen all-MiniLM-L6-v2 embeddings (nbcg[minilm]), or frozen embeddings "
                        "of a local sentence-transformers folder DIR")
    p.add_argument("--model", type=Path, help="local Hugging Face encoder folder to fine-tune")
    p.add_argument("--method", choices=METHODS, default="nbcg")
    p.add_argument("--coalitions", choices=("components", "ancestors", "spectral"), default="components")
    p.add_argument("--max-coalition", type=positive_int, default=None,
                   help="largest coalition (default: chosen on dev from 4, 8, 16)")
    p.add_argument("--sem-threshold", type=float_in(0, 10, low_open=True), default=None,
                   help="|A_ij| edge threshold of the DAG (default: the BIC of the label SEM on TRAIN, 0.05 ... 2)")
    p.add_argument("--threshold-mode", choices=("auto", "global", "per-label", "top-k"), default="auto",
                   help="decision rule fitted on dev: one threshold, one per label, or the top k labels "
                        "(default auto: the best by 2-fold cross-fitted dev macro-F1)")
    p.add_argument("--epochs", type=positive_int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]",
                   help="where the MLP or the fine-tuned encoder trains (default: auto = cuda when visible)")
    p.add_argument("--out", type=Path, required=True, help="model folder to create (never overwritten)")
    p.set_defaults(fn=_cmd_train)
    p = sub.add_parser("predict", help='write JSONL {"id", "labels", "scores"} for DATA')
    p.add_argument("model_dir", type=Path, metavar="DIR")
    p.add_argument("data", type=Path, metavar="DATA")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--threshold", type=float_in(0, 1), help="default: the decision rule chosen on dev at training")
    g.add_argument("--top-k", type=positive_int)
    p.add_argument("--out", type=Path, required=True, help="JSONL file to create (never overwritten)")
    p.set_defaults(fn=_cmd_predict)
    p = sub.add_parser("dag", help="export the learned label DAG")
    p.add_argument("model_dir", type=Path, metavar="DIR")
    p.add_argument("--export", choices=("dot", "json"), default="json")
    p.set_defaults(fn=_cmd_dag)
    p = sub.add_parser("coalitions", help="list the causal label coalitions of a model")
    p.add_argument("model_dir", type=Path, metavar="DIR")
    p.set_defaults(fn=_cmd_coalitions)
    p = sub.add_parser("split", help="IID or co-occurrence-breaking train/dev/test(/test_shift) split")
    p.add_argument("data", type=Path, metavar="DATA")
    p.add_argument("--kind", choices=("iid", "shift"), required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="folder to create (never overwritten)")
    p.set_defaults(fn=_cmd_split)
    p = sub.add_parser("synth", help="write the synthetic long-tailed set (planted DAG) as JSONL")
    p.add_argument("--n", type=positive_int, default=2000, help="documents (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shift", action="store_true", help="the shifted split (spurious tie flipped)")
    p.add_argument("--out", type=Path, required=True, help="JSONL file to create (never overwritten)")
    p.set_defaults(fn=_cmd_synth)
    p = sub.add_parser("eval", help="micro/macro/rare F1, P@k, nDCG@k of predictions")
    p.add_argument("pred", type=Path, help='JSONL {"id", "labels", "scores"?}')
    p.add_argument("gold", type=Path, help="JSONL or CSV with the gold labels")
    p.add_argument("--train", type=Path, help="training file (label frequencies)")
    p.add_argument("--model", dest="model_dir", type=Path, metavar="DIR",
                   help="or a model folder: its stored training counts")
    p.add_argument("--rare-fraction", type=float_in(0, 1, low_open=True), default=0.3)
    p.add_argument("--k", type=positive_int, default=3)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("data", help="build data sets")
    dsub = p.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    q = dsub.add_parser("build-pyapi", help="rebuild the pyapi set from the installed numpy/scipy/"
                                            "scikit-learn/pandas docstrings")
    q.add_argument("--out", type=Path, required=True, help="FILE (.jsonl or .jsonl.gz), never overwritten")
    q.set_defaults(fn=_cmd_data)
    p = sub.add_parser("tune", help="each arm's learning rate for quick, on dev of tuning seeds (no test split "
                                    "read); writes the JSON that quick ships as tuned_quick.json")
    p.add_argument("--datasets", default="synthetic,pyapi", help="comma-separated (default: %(default)s)")
    p.add_argument("--lrs", type=float_in(0, 10, low_open=True), nargs="+", help="grid (default: 0.003 0.01 0.03 0.1)")
    p.add_argument("--seeds", type=int, nargs="+", help="tuning seeds (default: 100; keep them apart from "
                                                         "the reported 0, 1, 2)")
    p.add_argument("--scale", choices=("smoke", "quick"), default="quick", help="budgets and data of this scale")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    p.add_argument("--out", type=Path, required=True, help="JSON file to create")
    p.set_defaults(fn=_cmd_tune)
    p = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["nbcg"], a))
    return parser


@cli_entry("nbcg")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
