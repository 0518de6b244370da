"""The nbcg command line: synth / eval / reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import add_reproduce_arguments, reproduce_from_args


def _pos_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not (math.isfinite(v) and 0 < v <= 1):
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return v


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
    train = read_dataset(args.train, need_text=False)
    gold_ids = {r["id"] for r in gold}
    missing = [r["id"] for r in pred if r["id"] not in gold_ids]
    if missing or len(pred) != len(gold):
        raise UserError(f"{args.pred}: ids do not match {args.gold} (e.g. {(missing or ['?'])[0]!r})")
    labels = sorted({x for r in train for x in r["labels"]})
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
    counts = np.zeros(L)
    for r in train:
        for x in r["labels"]:
            counts[index[x]] += 1
    out = multilabel_scores(Yg, P, S, counts, k=args.k, rare_fraction=args.rare_fraction)
    out["unseen_gold_labels"] = len(unseen)
    if args.json:
        print(json.dumps(out))
    else:
        for key, v in out.items():
            print(f"{key:<20}{v:.4f}" if isinstance(v, float) else f"{key:<20}{v}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nbcg", description="NBCG: Nash-Bargained Causal Game for long-tailed "
                                              "multi-label text classification (reconstructed)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("synth", help="write the synthetic long-tailed set (planted DAG) as JSONL")
    p.add_argument("--n", type=_pos_int, default=2000, help="documents (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shift", action="store_true", help="the shifted split (spurious tie flipped)")
    p.add_argument("--out", type=Path, required=True, help="JSONL file to create (never overwritten)")
    p.set_defaults(fn=_cmd_synth)
    p = sub.add_parser("eval", help="micro/macro/rare F1, P@k, nDCG@k of predictions")
    p.add_argument("pred", type=Path, help='JSONL {"id", "labels", "scores"?}')
    p.add_argument("gold", type=Path, help="JSONL or CSV with the gold labels")
    p.add_argument("--train", type=Path, required=True, help="training file (label frequencies)")
    p.add_argument("--rare-fraction", type=_fraction, default=0.3)
    p.add_argument("--k", type=_pos_int, default=3)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_eval)
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
