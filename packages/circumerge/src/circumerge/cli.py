"""``circumerge``: merge / inspect / bench / reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser, add_reproduce_arguments, reproduce_from_args

from .config import RULE_NAMES as RULES
from .config import SPACE_NAMES as SPACES


def _sketch_size(text: str) -> int | str:
    if text in ("auto", "none"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be auto, none or a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _weights(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights must be numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one weight")
    bad = [v for v in values if not (math.isfinite(v) and v >= 0)]
    if bad:
        raise argparse.ArgumentTypeError(f"weights must be finite and non-negative, got {bad[0]:g}")
    return values


def _finite(kind: str, low: float, high: float, low_open: bool = True):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{kind} must be a number, got {text!r}") from None
        ok = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"{kind} must be in {'(' if low_open else '['}{low:g}, "
                                             f"{high:g}], got {text}")
        return value

    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _shape(text: str) -> tuple[int, int]:
    try:
        m, n = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must look like 4096x4096, got {text!r}") from None
    if m < 1 or n < 1:
        raise argparse.ArgumentTypeError(f"shape must be positive, got {text!r}")
    return m, n


def _cmd_merge(args: argparse.Namespace) -> int:
    from .adapters import merge_adapters
    from .config import MergeConfig

    try:
        cfg = MergeConfig(space=args.space, rule=args.rule, weights=args.weights, density=args.density,
                          sketch_size=args.sketch_size, sketch_target=args.sketch_target,
                          out_rank=args.out_rank, seed=args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None

    def progress(i: int, total: int, mod: str) -> None:
        if not args.quiet:
            print(f"\r[{i}/{total}] {mod[-60:]:<60}", end="", file=sys.stderr, flush=True)

    summary = merge_adapters(args.adapters, args.out, cfg, force=args.force, progress=progress)
    if not args.quiet:
        print(file=sys.stderr)
    print(f"merged {summary['adapters']} adapters ({summary['modules']} modules, rank "
          f"{summary['rank']}) with {cfg.rule} in {cfg.space} space in {summary['merge_seconds']:.2f} s "
          f"-> {summary['out']}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .adapters import inspect_adapters

    info = inspect_adapters(args.adapters)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"base model: {info['base_model']}   modules: {info['modules']}")
    for i, ad in enumerate(info["adapters"]):
        print(f"[{i}] {ad['path']}: rank {','.join(map(str, ad['ranks']))}, "
              f"mean effective rank {ad['mean_effective_rank']:.2f}")
    print(f"stacked A factors: mean effective rank {info['stacked_A_effective_rank']:.2f}")
    print("pairwise subspace overlap (1 = same subspaces, 0 = orthogonal):")
    for i, row in enumerate(info["overlap"]):
        print(f"[{i}] " + " ".join(f"{v:.3f}" for v in row))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .synthetic import bench, format_records

    for s in args.spaces:  # "circulant@512" / "circulant@none": the circulant space, sketch size given
        space, at, size = s.partition("@")
        if space not in SPACES:
            raise UserError(f"unknown space {space!r} (choose from {', '.join(SPACES)})")
        if at and not (size in ("auto", "none") or (size.isdigit() and int(size) > 0)):
            raise UserError(f"bad sketch size in {s!r} (use auto, none or a positive integer)")
    for r in args.rules:
        if r not in RULES:
            raise UserError(f"unknown rule {r!r} (choose from {', '.join(RULES)})")
    if args.json is not None and args.json.exists() and not args.force:
        raise UserError(f"{args.json} already exists (pass --force to replace it)")
    records = []
    for m, n in args.shapes:
        records += bench(m, n, args.tasks, args.rank, spaces=args.spaces, rules=args.rules,
                         sketch_size=args.sketch_size, seed=args.seed, repeats=args.repeats)
    print(format_records(records))
    if args.json is not None:
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(records, indent=2) + "\n")
        tmp.replace(args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="circumerge", description="Merge LoRA adapters into one LoRA "
                                "adapter: CircuMerge (circulant sketch, reconstructed), Core Space, "
                                "KnOTS and full-space merging.")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("merge", help="merge PEFT LoRA adapter folders into one PEFT adapter")
    m.add_argument("adapters", nargs="+", type=Path, metavar="ADAPTER_DIR")
    m.add_argument("--out", type=Path, required=True, help="output adapter folder (must not exist)")
    m.add_argument("--space", choices=SPACES, default="circulant", help="merge space (default: %(default)s)")
    m.add_argument("--rule", choices=RULES, default="ta", help="merge rule (default: %(default)s)")
    m.add_argument("--weights", type=_weights, default=None, help="per-adapter weights, e.g. 1,0.5,0.5")
    m.add_argument("--density", type=_finite("density", 0.0, 1.0), default=None,
                   help="TIES/DARE/magnitude_prune kept fraction in (0, 1] (default: ties 0.2, dare 0.5)")
    m.add_argument("--sketch-size", type=_sketch_size, default="auto", help="circulant: auto, none or N rows")
    m.add_argument("--sketch-target", type=_finite("sketch target", 0.0, 0.999), default=0.25,
                   help="circulant auto: target Gram distortion ε, s = R/ε² rows (default: %(default)s)")
    m.add_argument("--out-rank", type=_positive_int, default=None, help="compress each merged layer to this rank")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--force", action="store_true", help="replace --out if it exists")
    m.add_argument("--quiet", action="store_true", help="no progress line")
    m.set_defaults(fn=_cmd_merge)

    i = sub.add_parser("inspect", help="ranks, effective ranks and pairwise subspace overlap of adapters")
    i.add_argument("adapters", nargs="+", type=Path, metavar="ADAPTER_DIR")
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(fn=_cmd_inspect)

    b = sub.add_parser("bench", help="merge time per space and rule on synthetic LoRA factors")
    b.add_argument("--shapes", type=_shape, nargs="+", default=[(4096, 4096)], help="MxN (default 4096x4096)")
    b.add_argument("--tasks", type=_positive_int, default=8)
    b.add_argument("--rank", type=_positive_int, default=16)
    b.add_argument("--spaces", nargs="+", default=["core", "circulant"],
                   help="spaces to time; circulant@N / circulant@none fix the sketch size")
    b.add_argument("--rules", nargs="+", default=["ta", "ties"])
    b.add_argument("--sketch-size", type=_sketch_size, default="auto")
    b.add_argument("--repeats", type=_positive_int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", type=Path, default=None, help="also write the records as JSON")
    b.add_argument("--force", action="store_true", help="replace --json if it exists")
    b.set_defaults(fn=_cmd_bench)

    r = sub.add_parser("reproduce", help="run the laptop-scale reproduction")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args(["circumerge"], a))
    return p


@cli_entry("circumerge")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
