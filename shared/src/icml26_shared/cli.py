"""The umbrella ``icml26`` CLI: list, reproduce, report, env.

Each package's own CLI reuses ``add_reproduce_arguments`` / ``reproduce_from_args`` for its
``reproduce`` verb, so every package reproduces the same way.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from .errors import UserError, cli_entry
from .results import SCALES


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose mistakes raise ``UserError``: one line and exit 2 through ``cli_entry``,
    not a usage dump. Subparsers made by ``add_subparsers`` inherit the class."""

    def error(self, message: str):  # type: ignore[override]
        raise UserError(message)


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts: an integer >= 1 (``1e6`` accepted when integral)."""
    return _integer(text, 1)


def nonneg_int(text: str) -> int:
    """argparse ``type=`` for an integer >= 0."""
    return _integer(text, 0)


def finite_float(text: str) -> float:
    """argparse ``type=`` for a finite number (NaN and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def nonneg_float(text: str) -> float:
    """argparse ``type=`` for a finite number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type=`` for a finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def float_in(low: float, high: float, *, low_open: bool = False, high_open: bool = False):
    """An argparse ``type=`` converter for a finite number in an interval, e.g.
    ``float_in(0, 1, low_open=True)`` accepts (0, 1]."""
    span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {span}, got {text!r}") from None
        ok = math.isfinite(value) and (value > low if low_open else value >= low) \
            and (value < high if high_open else value <= high)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a number in {span}, got {text!r}")
        return value

    convert.__name__ = f"float_in{span}"
    return convert


def _integer(text: str, low: int) -> int:
    what = "a positive integer" if low == 1 else f"an integer >= {low}"
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(f) or f != int(f):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        value = int(f)
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def add_reproduce_arguments(p: argparse.ArgumentParser, default_scale: str = "quick") -> None:
    p.add_argument("--scale", default=default_scale,
                   help=f"one of {', '.join(SCALES)}: smoke = seconds (tests), quick = minutes on "
                        "2 CPU cores, long = an hour or two on CPU (only packages that offer it; "
                        "the others are skipped), full = the GPU-scale recipe (default: "
                        "%(default)s)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: runs/reproduce-<scale>)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default: %(default)s)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out: reuse every package whose results.json is ok "
                        "for the same scale, seed and version, run the rest")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier run's --out folder (refused without --resume/--force)")
    p.add_argument("--record", action="store_true",
                   help="with --scale quick (or long): also write each finished package's "
                        "verdicts to packages/<name>/results/quick.json (long.json) in its source "
                        "checkout (commit it: the root README's status column is generated from "
                        "quick.json)")


def reproduce_from_args(names: list[str] | None, args: argparse.Namespace) -> int:
    """Run the named packages' reproductions (all registered when ``names`` is empty).

    Exit code 0 when every package is ok or skipped (refused this scale here, e.g. ``full``
    without a GPU), 1 when one failed; a user's mistake raises ``UserError`` (exit 2). With one
    package named, its refusal is the answer to the user's request: one line, exit 2.
    """
    from . import registry, runner
    from .report import print_summary

    runner.check_scale(args.scale)
    out = args.out or Path("runs") / f"reproduce-{args.scale}"
    methods = registry.discover()
    if names:
        unknown = [n for n in names if n not in methods]
        if unknown:
            known = ", ".join(methods) or "none registered"
            raise UserError(f"unknown package {', '.join(unknown)} (registered: {known})")
        descs = [methods[n] for n in dict.fromkeys(names)]
    else:
        descs = list(methods.values())
    if not descs:
        print("no paper packages are registered yet (entry-point group icml26.methods); nothing to run")
        return 0
    results = runner.run_many(descs, args.scale, out, args.seed,
                              resume=getattr(args, "resume", False),
                              force=getattr(args, "force", False),
                              record=getattr(args, "record", False),
                              refusal="raise" if len(descs) == 1 and names else "skip")
    print_summary(results)
    print(f"report: {out / 'REPORT.md'}")
    return 1 if any(r.status == "failed" for r in results) else 0


def _cmd_list(args: argparse.Namespace) -> int:
    from . import registry

    methods = registry.discover()
    if not methods:
        print("no paper packages are registered yet (entry-point group icml26.methods)")
        return 0
    for d in methods.values():
        if d.load_error:
            print(f"{d.name} {d.version} — BROKEN: {d.load_error}")
            continue
        arxiv = f" (arXiv {d.paper.arxiv})" if d.paper.arxiv else ""
        quick = f" · quick ≈ {d.quick_minutes:g} min" if d.quick_minutes else " · quick: not timed"
        print(f"{d.name} {d.version} — {d.paper.title}, {d.paper.venue}{arxiv}{quick}")
        for c in d.claims:
            paper = f" [paper: {c.paper_value:g}{c.unit}]" if c.paper_value is not None else ""
            print(f"    - {c.description} ({c.metric}, {c.direction} is better){paper}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import print_summary, write_report
    from .runner import load_results_dir

    results = load_results_dir(args.dir)
    path = write_report(results, args.dir)  # a re-render: the packages not run are not known here
    print_summary(results)
    print(f"report: {path}")
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    from .data import device_name
    from .results import EnvInfo

    env = EnvInfo.capture()
    print(f"python    {env.python} on {env.platform}")
    print(f"cpu       {env.cpu} x{env.cpu_count}")
    print(f"device    {device_name()}")
    print(f"commit    {env.git_commit or 'unknown'}")
    for lib in env.blas or ():
        layer = {"openmp": "OpenMP", "pthreads": "pthreads"}.get(lib.get("threading_layer") or "",
                                                                lib.get("threading_layer") or "?")
        print(f"blas      {lib.get('internal_api')} {lib.get('version')} ({layer}, {lib.get('num_threads')} threads)")
    for name, ver in env.packages.items():
        print(f"{name:<16}{ver}")
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    from .hf import load_pretrained, summarize

    model, tok = load_pretrained(args.path, args.kind, dtype=args.dtype, device=args.device,
                                 trust_remote_code=args.trust_remote_code)
    for key, value in summarize(model, tok).items():
        print(f"{key:<11}{value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="icml26", description="Reproduce ICML 2026 papers.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="registered packages, their papers and claims").set_defaults(fn=_cmd_list)
    p = sub.add_parser("reproduce", help="run reproductions, print the summary, write REPORT.md")
    p.add_argument("packages", nargs="*", help="package names (default: all registered)")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(a.packages, a))
    p = sub.add_parser("report", help="re-render REPORT.md from a results folder")
    p.add_argument("dir", type=Path)
    p.set_defaults(fn=_cmd_report)
    sub.add_parser("env", help="versions and devices").set_defaults(fn=_cmd_env)
    p = sub.add_parser("model", help="load a local Hugging Face folder (checked, offline) and summarise it")
    p.add_argument("path", type=Path)
    # no argparse choices: load_pretrained checks them and a bad one is one line, not a usage dump
    p.add_argument("--kind", default="causal_lm", help="causal_lm, vlm, seq2seq_lm, masked_lm, encoder "
                   "or sequence_classification (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16 (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--trust-remote-code", action="store_true", help="run the folder's own modelling code")
    p.set_defaults(fn=_cmd_model)
    return parser


@cli_entry("icml26")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
