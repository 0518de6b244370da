"""The flam-wm command line: gen-data, train, reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import add_reproduce_arguments, reproduce_from_args


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def _cmd_gen(args: argparse.Namespace) -> int:
    from .io import write_dataset
    from .sprites import generate

    if args.out.exists():
        raise UserError(f"{args.out} already exists (choose a new --out)")
    if args.size % 4:
        raise UserError(f"--size must be a multiple of 4 (the sprite size), got {args.size}")
    if args.frames < 2:
        raise UserError(f"--frames must be at least 2, got {args.frames}")
    video, acts = generate(args.entities, args.clips, args.frames, args.size, args.seed,
                           distractor=args.distractor)
    meta = {"generator": "sprites", "entities": args.entities, "clips": args.clips, "frames": args.frames,
            "size": args.size, "seed": args.seed, "distractor": args.distractor}
    write_dataset(video, acts, args.out, meta)
    print(f"wrote {args.clips} clips x {args.frames} frames ({args.entities} sprites) -> {args.out}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise UserError(f"{args.out} already exists (choose a new --out)")
    from .config import ModelConfig, TrainConfig
    from .io import read_dataset, write_run

    try:
        slots = args.slots if args.model == "flam" else 1
        mcfg = ModelConfig(model=args.model, slots=slots, latent_dim=args.latent_dim, beta=args.beta,
                           size=args.size, temporal=not args.no_temporal)
        tcfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seed=args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    video, acts = read_dataset(args.data, args.size)
    import io as _io

    import torch

    from .train import rollout_psnr, train

    model = train(mcfg, tcfg, video)
    metrics = rollout_psnr(model, video, horizon=min(10, video.shape[1] - 1))
    buf = _io.BytesIO()
    torch.save(model.state_dict(), buf)
    config = {"model": mcfg.to_dict(), "train": {"steps": tcfg.steps, "batch_size": tcfg.batch_size,
                                                 "seed": tcfg.seed, "lr": tcfg.lr}}
    write_run(args.out, {"model.pt": buf.getvalue(), "config.json": json.dumps(config, indent=2).encode(),
                         "metrics.json": json.dumps(metrics, indent=2).encode()})
    h = metrics["horizon"]
    print(f"trained {args.model} for {args.steps} steps -> {args.out}; PSNR 1-step {metrics['psnr_1']:.2f} dB, "
          f"{h}-step {metrics[f'psnr_{h}']:.2f} dB (copy frame 0: {metrics[f'copy_{h}']:.2f} dB, training clips)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="flam-wm", description="FLAM: Factored Latent Action world models")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("gen-data", help="write a generated data set in the clip-folder format")
    g.add_argument("generator", choices=["sprites"])
    g.add_argument("--entities", type=_positive_int, default=2)
    g.add_argument("--clips", type=_positive_int, default=100)
    g.add_argument("--frames", type=_positive_int, default=12)
    g.add_argument("--size", type=_positive_int, default=32)
    g.add_argument("--distractor", choices=["none", "jitter"], default="none")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, required=True, help="new folder to write")
    g.set_defaults(fn=_cmd_gen)
    t = sub.add_parser("train", help="train FLAM or the monolithic LAM on a clip folder")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--model", choices=["flam", "lam"], default="flam")
    t.add_argument("--slots", type=_positive_int, default=5, help="K (flam only)")
    t.add_argument("--latent-dim", type=_positive_int, default=10, help="d; each slot gets d/K")
    t.add_argument("--beta", type=_nonneg_float, default=0.01)
    t.add_argument("--size", type=_positive_int, default=32)
    t.add_argument("--steps", type=_positive_int, default=400)
    t.add_argument("--batch-size", type=_positive_int, default=16)
    t.add_argument("--no-temporal", action="store_true", help="ablation: no causal temporal attention")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", type=Path, required=True, help="new RUN folder")
    t.set_defaults(fn=_cmd_train)
    p = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["flam-wm"], a))
    return parser


@cli_entry("flam-wm")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
