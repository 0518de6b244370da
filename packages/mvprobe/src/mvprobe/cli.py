"""``mvprobe``: zoo build / index / train / eval / identify / sweep-layers / reproduce.

Heavy imports (torch, scikit-learn) live inside the commands so that ``--help`` stays fast. Every
user mistake, argparse's included, ends with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import (
    add_reproduce_arguments,
    float_in,
    positive_float,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import print_json

METHOD_NAMES = ("mvprobe", "probex", "probex4", "probex_recipe", "statnn", "flat", "mlp", "first_order",
                "xu_only", "second_order", "no_std", "prior")


def _print(obj, as_json: bool, lines) -> None:
    if as_json:
        print_json(obj, indent=2)
    else:
        for line in lines:
            print(line)


def _cmd_zoo_build(args) -> int:
    from .config import ZooConfig
    from .zoo import write_zoo

    try:
        cfg = ZooConfig(n_models=args.n_models, subset_size=args.subset_size, seed=args.seed,
                        ancestor_steps=args.ancestor_steps)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    info = write_zoo(cfg, args.out)
    print(f"wrote {info['models']} children ({info['train']}/{info['val']}/{info['test']} train/val/test) "
          f"to {args.out}")
    return 0


def _cmd_index(args) -> int:
    from .index import build_index

    show = not args.quiet and sys.stderr.isatty()

    def progress(i, n):
        if show:
            print(f"\r[{i}/{n}]", end="", file=sys.stderr, flush=True)

    try:
        info = build_index(args.data, args.layer, args.out, workers=args.workers, progress=progress)
    finally:
        if show:
            print("\r", end="", file=sys.stderr, flush=True)  # an error line overwrites the bar
    print(f"indexed {info['models']} x {tuple(info['shape'])} of {args.layer} -> {info['out']} "
          f"(read {info['bytes_read_per_file']} of {info['file_bytes']} bytes per file)")
    return 0


def _train(data, val, method: str, probe, epochs, seed, patience, lr):
    import torch

    from .baselines import build
    from .config import TrainConfig

    learner = build(method, data.shape, len(data.label_names), probe)
    cfg = TrainConfig(epochs=epochs, seed=seed, patience=patience if val is not None else None, lr=lr)
    X, Y = torch.tensor(data.weights), torch.tensor(data.labels)
    Xv, Yv = (None, None) if val is None else (torch.tensor(val.weights), torch.tensor(val.labels))
    info = learner.fit(X, Y, Xv, Yv, cfg)
    return learner, info


def _cmd_train(args) -> int:
    from .config import ProbeConfig
    from .index import load_data
    from .io import check_new_output, save_probe

    check_new_output(args.out)
    data = load_data(args.data, args.layer)
    val = (load_data(args.val, args.layer or data.layer, data.label_names, data.shape)
           if args.val else None)
    probe = ProbeConfig(n_probes=args.n_probes, proj_dim=args.proj_dim, rep_dim=args.rep_dim)
    learner, info = _train(data, val, args.method, probe, args.epochs, args.seed, args.patience, args.lr)
    info.pop("history", None)
    from dataclasses import asdict

    from . import __version__

    meta = {"method": args.method, "layer": data.layer, "shape": list(data.shape),
            "label_names": data.label_names, "version": __version__, "probe_config": asdict(probe),
            "train": {k: v for k, v in info.items() if k != "chosen"}, "threshold": 0.5}
    save_probe(args.out, learner, meta)
    best = info.get("best_val_accuracy")
    extra = f", best val per-label accuracy {best:.4f}" if val is not None and best == best else ""
    print(f"trained {args.method} on {len(data.paths)} checkpoints of {data.layer} {data.shape}{extra} "
          f"-> {args.out}")
    return 0


def _probs(learner, weights):
    import torch

    return learner.predict_proba(torch.tensor(weights))


def _cmd_eval(args) -> int:
    from .index import load_data
    from .io import load_probe
    from .train import metrics

    learner, meta = load_probe(args.probe)
    data = load_data(args.data, meta["layer"], meta["label_names"], tuple(meta["shape"]))
    m = metrics(_probs(learner, data.weights), data.labels, threshold=args.threshold)
    m["models"] = len(data.paths)
    _print(m, args.json, [f"{k:<24}{v:.4f}" if isinstance(v, float) else f"{k:<24}{v}" for k, v in m.items()])
    return 0


def _cmd_identify(args) -> int:
    import numpy as np

    from .io import load_probe, read_layer

    learner, meta = load_probe(args.probe)
    shape = tuple(meta["shape"])
    mats = []
    for p in args.checkpoints:
        X = read_layer(p, meta["layer"])
        if X.shape != shape:
            raise UserError(f"{p}: layer {meta['layer']!r} has shape {X.shape}, the probe expects {shape}")
        mats.append(X)
    probs = _probs(learner, np.stack(mats))
    names = meta["label_names"]
    recs = [{"path": str(p), "labels": [n for n, q in zip(names, row, strict=True) if q >= args.threshold],
             "probs": {n: round(float(q), 6) for n, q in zip(names, row, strict=True)}}
            for p, row in zip(args.checkpoints, probs, strict=True)]
    _print(recs, args.json, [f"{r['path']}: {', '.join(r['labels']) or '(none)'}" for r in recs])
    return 0


def _cmd_sweep(args) -> int:
    from .config import ProbeConfig
    from .index import load_data
    from .io import layer_names, read_jsonl

    if args.layers == "all":
        layers = layer_names(read_jsonl(args.data)[0]["path"])
    else:
        layers = [x.strip() for x in args.layers.split(",") if x.strip()]
    if not layers:
        raise UserError("--layers names no layer")
    rank, world = 0, 1
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under `accelerate launch`
        from accelerate import PartialState

        state = PartialState(cpu=True)
        rank, world = state.process_index, state.num_processes
    probe = ProbeConfig(n_probes=args.n_probes, proj_dim=args.proj_dim, rep_dim=args.rep_dim)
    rows = []
    for layer in layers[rank::world]:
        data = load_data(args.data, layer)
        val = load_data(args.val, layer, data.label_names, data.shape)
        _, info = _train(data, val, args.method, probe, args.epochs, args.seed, args.patience, args.lr)
        rows.append({"layer": layer, "shape": list(data.shape), "val_per_label_accuracy": info["best_val_accuracy"]})
    if world > 1:
        from accelerate.utils import gather_object

        rows = gather_object(rows)
        if rank:
            return 0
    rows.sort(key=lambda r: layers.index(r["layer"]))
    best = max(rows, key=lambda r: r["val_per_label_accuracy"])
    out = {"method": args.method, "layers": rows, "best_layer": best["layer"]}
    _print(out, args.json, [f"{r['layer']:<40}{str(tuple(r['shape'])):<14}{r['val_per_label_accuracy']:.4f}"
                            for r in rows] + [f"best layer on val: {best['layer']}"])
    return 0


def _add_probe_size(p) -> None:
    p.add_argument("--n-probes", type=positive_int, default=128, help="probes per branch (default 128)")
    p.add_argument("--proj-dim", type=positive_int, default=128, help="points-axis projection (default 128)")
    p.add_argument("--rep-dim", type=positive_int, default=512, help="representation size (default 512)")
    p.add_argument("--epochs", type=positive_int, default=3000, help="epoch budget (default 3000)")
    p.add_argument("--patience", type=positive_int, default=100,
                   help="with --val: stop after this many epochs without improvement (default 100)")
    p.add_argument("--lr", type=positive_float, default=3e-4,
                   help="Adam learning rate (default 3e-4, MVProbe's [C]; ProbeX's published 1e-3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", choices=METHOD_NAMES, default="mvprobe", help="default: %(default)s")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mvprobe", description="Tell what a checkpoint was trained on from one layer's "
                     "weights: MVProbe, ProbeX, ProbeX x4, StatNN and flat baselines.")
    sub = parser.add_subparsers(dest="command", required=True)

    z = sub.add_parser("zoo", help="the offline mini Model Jungle").add_subparsers(dest="zoo_cmd", required=True)
    b = z.add_parser("build", help="build a Model Tree: children as safetensors + train/val/test.jsonl")
    b.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    b.add_argument("--n-models", type=positive_int, default=1500)
    b.add_argument("--subset-size", type=positive_int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--ancestor-steps", type=positive_int, default=200,
                   help="full-batch Adam steps of the ancestor (default 200)")
    b.set_defaults(fn=_cmd_zoo_build)

    i = sub.add_parser("index", help="copy one layer of many checkpoints into one memory-mapped cache")
    i.add_argument("data", type=Path, metavar="DATA.jsonl")
    i.add_argument("--layer", required=True)
    i.add_argument("--out", type=Path, required=True, help="cache folder (must not exist; resumes <out>.partial)")
    i.add_argument("--workers", type=positive_int, default=min(4, os.cpu_count() or 1))
    i.add_argument("--quiet", action="store_true")
    i.set_defaults(fn=_cmd_index)

    t = sub.add_parser("train", help="train a probe on one layer")
    t.add_argument("--data", type=Path, required=True, help="TRAIN.jsonl or an index cache")
    t.add_argument("--layer", default=None, help="tensor name (required with JSONL)")
    t.add_argument("--out", type=Path, required=True, help="probe folder (must not exist)")
    t.add_argument("--val", type=Path, default=None, help="VAL.jsonl: early stopping, best-on-val kept")
    _add_probe_size(t)
    t.set_defaults(fn=_cmd_train)

    e = sub.add_parser("eval", help="per-label accuracy (p >= threshold), exact-subset accuracy, mAP")
    e.add_argument("--probe", type=Path, required=True)
    e.add_argument("--data", type=Path, required=True, help="TEST.jsonl or an index cache")
    e.add_argument("--threshold", type=float_in(0, 1), default=0.5)
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_eval)

    d = sub.add_parser("identify", help="predict the training labels of checkpoints")
    d.add_argument("checkpoints", nargs="+", type=Path, metavar="CHECKPOINT")
    d.add_argument("--probe", type=Path, required=True)
    d.add_argument("--threshold", type=float_in(0, 1), default=0.5)
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=_cmd_identify)

    s = sub.add_parser("sweep-layers", help="train one probe per layer, choose the best on --val "
                       "(spread over processes with `accelerate launch`)")
    s.add_argument("--data", type=Path, required=True, help="TRAIN.jsonl")
    s.add_argument("--val", type=Path, required=True, help="VAL.jsonl (chooses the layer)")
    s.add_argument("--layers", required=True, help="NAME,NAME,... or all")
    s.add_argument("--json", action="store_true")
    _add_probe_size(s)
    s.set_defaults(fn=_cmd_sweep)

    r = sub.add_parser("reproduce", help="the mini Model Jungle reproduction")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args(["mvprobe"], a))
    return parser


@cli_entry("mvprobe")
def main(argv: list[str] | None = None) -> int:
    import warnings

    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no library warnings leak into the one-line contract
        return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
