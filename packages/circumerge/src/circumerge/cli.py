"""``circumerge``: merge / inspect / bench / reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    float_in,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import print_json

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
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise argparse.ArgumentTypeError(f"weights must be finite numbers, got {bad[0]:g}")
    if not any(values):
        raise argparse.ArgumentTypeError("weights are all zero: the merged adapter would be empty")
    return values


def _rule(text: str) -> str:
    from .config import rule_error

    if text == "dare":  # argparse's "invalid choice" would not say which DARE to pick
        raise argparse.ArgumentTypeError(rule_error(text))
    return text


def _ints(text: str, count: int, example: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.lower().split("x"))
    except ValueError:
        values = ()
    if len(values) != count or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must look like {example} (positive integers), got {text!r}")
    return values


def _shape(text: str) -> tuple[int, int]:
    return _ints(text, 2, "4096x4096")


def _peft_at(text: str) -> tuple[int, int, int, int]:
    return _ints(text, 4, "1024x1024x8x16 (m x n x tasks x rank)")


def _cap(text: str) -> tuple[str, int]:
    label, _, value = text.rpartition("=")
    if label.partition("@")[0] not in SPACES or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must look like knots=1024 or circulant@none=512 (a space "
                                         f"and a stacked rank), got {text!r}")
    return label, int(value)


def _cap_of(caps: dict[str, int], label: str) -> int | None:
    """The --max-R cap of a bench label ("circulant@none" first, then its space "circulant")."""
    return caps.get(label, caps.get(label.partition("@")[0]))


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

    summary = merge_adapters(args.adapters, args.out, cfg, force=args.force, progress=progress,
                             ignore_base_name=args.ignore_base_name)
    if not args.quiet:
        print(file=sys.stderr)
    print(f"merged {summary['adapters']} adapters ({summary['modules']} modules, rank "
          f"{summary['rank']}) with {cfg.rule} in {cfg.space} space in {summary['merge_seconds']:.2f} s "
          f"(read/write {summary['io_seconds']:.2f} s, setup and imports {summary['setup_seconds']:.2f} s) "
          f"-> {summary['out']}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .adapters import inspect_adapters

    info = inspect_adapters(args.adapters)
    if args.json:
        print_json(info, indent=2)
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
    import torch

    from .synthetic import bench, format_records

    if args.spaces is None:  # default: core, circulant and peft's cat (TA) where peft is installed
        import importlib.util

        args.spaces = ["core", "circulant"]
        if importlib.util.find_spec("transformers") is not None:
            args.spaces.append("peft")
        else:
            print("peft not timed: pip install 'circumerge[peft]'", file=sys.stderr)
    for s in args.spaces:  # "circulant@512" / "circulant@none": the circulant space, sketch size given
        space, at, size = s.partition("@")
        if space not in SPACES:
            raise UserError(f"unknown space {space!r} (choose from {', '.join(SPACES)})")
        if at and not (size in ("auto", "none") or (size.isdigit() and int(size) > 0)):
            raise UserError(f"bad sketch size in {s!r} (use auto, none or a positive integer)")
    from .config import rule_error

    for r in [*args.rules, *args.error_rules]:
        if rule_error(r):
            raise UserError(rule_error(r))
    for path in (args.json, args.plot):
        if path is not None and path.exists() and not args.force:
            raise UserError(f"{path} already exists (pass --force to replace it)")
    if args.plot is not None and args.plot.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UserError(f"--plot must name a .png, .pdf or .svg file, got {args.plot}")
    caps = dict(args.max_R)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    records = []
    try:
        runs = [(m, n, T, r, args.spaces, False) for m, n in args.shapes for T in args.tasks
                for r in args.rank]
        if args.peft_at is not None:
            m, n, T, r = args.peft_at
            runs.append((m, n, T, r, ["core", "circulant", "peft"], True))
        for m, n, T, r, spaces, peft_dense in runs:
            keep = [s for s in spaces if T * r <= (_cap_of(caps, s) or T * r)]
            for s in spaces:
                if s not in keep:
                    print(f"{s} not run at {m}x{n}, T={T}, r={r} (R={T * r} > --max-R "
                          f"{_cap_of(caps, s)})", file=sys.stderr)
            if "core" not in keep:
                keep = ["core", *keep]  # every ratio and error is to core, measured in the same rounds
            new = bench(m, n, T, r, spaces=keep, rules=args.rules, error_rules=args.error_rules,
                        sketch_size=args.sketch_size, seed=args.seed, repeats=args.repeats,
                        warmup=args.warmup, peft_dense=peft_dense)
            records += new
            if args.verbose:
                print(format_records(new), file=sys.stderr, flush=True)
            _write_bench(records, args)  # after every shape: a long sweep keeps what it measured
    finally:
        torch.set_num_threads(threads)
    print(format_records(records))
    return 0


def _write_bench(records: list[dict], args: argparse.Namespace) -> None:
    from icml26_shared.io import write_json

    if args.json is not None:
        write_json(args.json, records, indent=2)
    if args.plot is not None:
        from .plots import plot_bench

        plot_bench(records, args.plot)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="circumerge", description="Merge LoRA adapters into one LoRA "
                                "adapter: CircuMerge (circulant sketch, reconstructed), Core Space, "
                                "KnOTS and full-space merging.")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("merge", help="merge PEFT LoRA adapter folders into one PEFT adapter")
    m.add_argument("adapters", nargs="+", type=Path, metavar="ADAPTER_DIR")
    m.add_argument("--out", type=Path, required=True, help="output adapter folder (must not exist)")
    m.add_argument("--space", choices=SPACES, default="core",
                   help="merge space (default: %(default)s, exact; circulant is the reconstructed sketch, opt-in)")
    m.add_argument("--rule", type=_rule, choices=RULES, default="ta",
                   help="merge rule (default: %(default)s; TIES trims each layer on its own, as Core Space's code does)")
    m.add_argument("--weights", type=_weights, default=None, help="per-adapter weights, either sign, e.g. 1,0.5,-0.5 (-1 negates a task)")
    m.add_argument("--density", type=float_in(0.0, 1.0, low_open=True), default=None,
                   help="TIES/DARE/magnitude_prune kept fraction in (0, 1] (default: ties 0.2, dare 0.5)")
    m.add_argument("--sketch-size", type=_sketch_size, default="auto", help="circulant: auto, none or N rows")
    m.add_argument("--sketch-target", type=float_in(0.0, 1.0, low_open=True, high_open=True), default=0.25,
                   help="circulant auto: target Gram distortion ε, s = R/ε² rows (default: %(default)s)")
    m.add_argument("--out-rank", type=positive_int, default=None, help="compress each merged layer to this rank")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--force", action="store_true",
                   help="replace --out if it is an earlier circumerge output (never an input or a user's files)")
    m.add_argument("--ignore-base-name", action="store_true",
                   help="merge adapters whose base_model_name_or_path differ (modules and shapes still checked)")
    m.add_argument("--quiet", action="store_true", help="no progress line")
    m.set_defaults(fn=_cmd_merge)

    i = sub.add_parser("inspect", help="ranks, effective ranks and pairwise subspace overlap of adapters")
    i.add_argument("adapters", nargs="+", type=Path, metavar="ADAPTER_DIR")
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(fn=_cmd_inspect)

    b = sub.add_parser("bench", help="merge time per space and rule on synthetic LoRA factors")
    b.add_argument("--shapes", type=_shape, nargs="+", default=[(4096, 4096)], help="MxN (default 4096x4096)")
    b.add_argument("--tasks", type=positive_int, nargs="+", default=[8], help="T values (default 8)")
    b.add_argument("--rank", type=positive_int, nargs="+", default=[16], help="LoRA ranks r (default 16)")
    b.add_argument("--spaces", nargs="+", default=None,
                   help="spaces to time (default: core circulant peft); circulant@N / circulant@none "
                        "fix the sketch size; peft times TA only (its factored cat), its dense "
                        "*_svd rules run at --peft-at")
    b.add_argument("--rules", nargs="+", default=["ta", "ties"], help="rules to time")
    b.add_argument("--error-rules", nargs="+", default=[], help="rules whose error to core (not time) is also recorded")
    b.add_argument("--max-R", type=_cap, nargs="+", default=[], metavar="SPACE=R",
                   help="run SPACE (or a label such as circulant@none) only where T·r <= R, e.g. knots=256")
    b.add_argument("--peft-at", type=_peft_at, default=None, metavar="MxNxTxR",
                   help="also time core, circulant and peft's add_weighted_adapter (every rule it "
                        "has, the dense *_svd ones included) at this shape")
    b.add_argument("--threads", type=positive_int, default=1, help="torch threads (default: %(default)s)")
    b.add_argument("--warmup", type=int, choices=(0, 1, 2), default=1,
                   help="untimed calls per method before the rounds (default: %(default)s)")
    b.add_argument("--sketch-size", type=_sketch_size, default="auto")
    b.add_argument("--repeats", type=positive_int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", type=Path, default=None, help="also write the records as JSON")
    b.add_argument("--plot", type=Path, default=None, help="also plot merge time and sketch error against R")
    b.add_argument("--verbose", action="store_true", help="print each shape's rows as they finish")
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
