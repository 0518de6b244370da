"""``orthomerge``: oft / full / diagnose / reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import add_reproduce_arguments, finite_float, reproduce_from_args
from icml26_shared.io import print_json

RULES = "ta, ties, magnitude_prune, dare_linear, dare_ties, tsv, iso"


def _weights(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights must be numbers, got {text!r}") from None
    if not vals or not all(math.isfinite(v) and v >= 0 for v in vals) or sum(vals) <= 0:
        raise argparse.ArgumentTypeError(f"weights must be finite, >= 0 and not all 0, got {text!r}")
    return vals


class _Parser(argparse.ArgumentParser):
    """argparse errors as one line (no usage dump), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog.split()[0]}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _config(cls, **kw):
    try:
        return cls(**kw)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _progress(quiet: bool):
    def show(i: int, total: int, name: str) -> None:
        if not quiet and sys.stderr.isatty():
            print(f"\r[{i}/{total}] {name[-60:]:<60}", end="" if i < total else "\n", file=sys.stderr, flush=True)
    return show


def _cmd_oft(args: argparse.Namespace) -> int:
    from .config import OFTMergeConfig
    from .io import Adapter, Tensors, prepare_out, write_adapter, write_checkpoint
    from .merging import merge_oft_adapters, oft_dense, orthogonality, orthogonality_warning

    cfg = _config(OFTMergeConfig, method=args.method, magnitude=args.magnitude, granularity=args.granularity,
                  weights=args.weights, scale=args.scale, density=args.density, trim_scope=args.trim_scope,
                  exact_cayley=args.exact_cayley, seed=args.seed)
    euclid = args.method not in ("orthomerge", "avg")
    if euclid and not args.dense:
        raise UserError(f"--method {args.method} merges dense deltas: pass --base PATH --dense")
    if args.dense and args.base is None:
        raise UserError("--dense needs --base PATH (the base model's safetensors checkpoint)")
    if args.weights is not None and len(args.weights) != len(args.adapters):
        raise UserError(f"{len(args.weights)} weights given for {len(args.adapters)} adapters")
    out = prepare_out(args.out, args.force, [*args.adapters, *([args.base] if args.base else [])])
    ads = [Adapter.open(p) for p in args.adapters]
    merged = None
    if not euclid:
        merged = merge_oft_adapters(ads, cfg, progress=_progress(args.quiet))
    if args.dense:
        base = Tensors.open(args.base)
        tensors = oft_dense(ads, base, cfg, progress=_progress(args.quiet))
        write_checkpoint(out, tensors, Path(args.base) if Path(args.base).is_dir() else None, force=args.force)
        what = "dense checkpoint"
    else:
        write_adapter(out, merged[1], merged[0], force=args.force)
        what = f"{ads[0].peft_type} adapter"
    rep = orthogonality(ads, *(merged or ({}, {})), cfg)
    print(f"merged {len(ads)} {ads[0].peft_type} adapters with {args.method} -> {what} {args.out}"
          + _geometry_summary(rep))
    warn = orthogonality_warning(rep)
    if warn:
        print(f"orthomerge: warning: {warn}", file=sys.stderr)
    return 0


def _geometry_summary(rep: dict) -> str:
    if not rep["inputs"]:
        return ""
    path = f"Neumann path, {rep['terms']} terms" if rep["path"] == "neumann" else "exact Cayley path"
    text = f"; max ‖RᵀR − I‖_F ({path}): inputs {max(r['orthogonality_error'] for r in rep['inputs']):.3g}"
    if rep["merged"]:
        text += f", merged {rep['merged']['orthogonality_error']:.3g}"
    if rep["exact_cayley_gap"] is not None:
        text += (f" (written on the exact path; max ‖R_Neumann − R_exact‖₂ over modules "
                 f"{rep['exact_cayley_gap']:.3g})")
    return text


def _open_expert(path: Path, base):
    from .io import ADAPTER_CONFIG, Adapter, Tensors
    from .merging import LoraExpert

    if path.is_dir() and (path / ADAPTER_CONFIG).is_file():
        return LoraExpert(Adapter.open(path, allowed=("LORA",)), base)
    return Tensors.open(path)


def _cmd_full(args: argparse.Namespace) -> int:
    from .config import DecoupleConfig
    from .io import Tensors, prepare_out, write_checkpoint
    from .merging import orthogonal_residual_merge

    cfg = _config(DecoupleConfig, ortho=args.ortho, residual=args.residual, residual_scale=args.residual_scale,
                  density=args.density, trim_scope=args.trim_scope, seed=args.seed)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is available")
    out = prepare_out(args.out, args.force, [args.base, *args.experts])
    base = Tensors.open(args.base)
    experts = [_open_expert(Path(p), base) for p in args.experts]
    merged = orthogonal_residual_merge(base, experts, cfg, device=args.device, progress=_progress(args.quiet),
                                       spill_dir=out.parent)
    write_checkpoint(out, merged, Path(args.base) if Path(args.base).is_dir() else None, force=args.force)
    print(f"merged {len(experts)} experts (ortho {args.ortho}, residual {args.residual} x "
          f"{cfg.residual_scale:g}) -> {args.out}")
    return 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from .io import ADAPTER_CONFIG, Adapter, Tensors
    from .merging import diagnose, diagnose_adapter

    path = Path(args.path)
    base = Tensors.open(args.base) if args.base else None
    if path.is_dir() and (path / ADAPTER_CONFIG).is_file():
        rows = diagnose_adapter(Adapter.open(path), base)
    else:
        rows = diagnose(Tensors.open(path), base)
    if args.json:
        print_json(rows, indent=2)
        return 0
    cols = [c for c in ("hyperspherical_energy", "base_hyperspherical_energy", "spectral_norm",
                        "base_spectral_norm", "orthogonality_error", "residual_fraction") if rows and c in rows[0]]
    print(f"{'module':<48}" + "".join(f"{c[:22]:>24}" for c in cols))
    for r in rows:
        print(f"{r['module'][-48:]:<48}" + "".join(f"{r[c]:>24.6g}" for c in cols))
    return 0


def _cmd_lm_demo(args: argparse.Namespace) -> int:
    from .io import atomic_dir, prepare_out
    from .lm import LMConfig, run, table

    cfg = _config(LMConfig, seeds=args.seeds, seed=args.seed, max_steps=args.max_steps)
    out = prepare_out(args.out, args.force)
    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with atomic_dir(out, args.force) as tmp:
        res = run(tmp, cfg, log=log)
        res.to_json(tmp / "results.json")
        text = table(res)
        (tmp / "table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    for c in res.claims:
        print(f"{c.claim_id} {c.status}: {c.description} — ours {c.ours:.4g} vs {c.baseline_name or 'threshold'}"
              + (f" {c.baseline:.4g}" if c.baseline is not None else "")
              + (f", 95% interval of the difference [{c.interval[0]:+.3f}, {c.interval[1]:+.3f}]" if c.interval else "")
              + (f". {c.note}" if c.note else ""))
    print(f"-> {args.out}/results.json, {args.out}/table.md, adapters in {args.out}/adapters")
    return 0


TRIM_HELP = ("TIES / magnitude_prune trim: model (default, the authors': each expert's top density over "
             "every tensor) or tensor (per tensor: peft's and mergekit's convention)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="orthomerge", description="OrthoMerge (ICML 2026): merge OFT/BOFT adapters and "
                "fine-tuned experts on the orthogonal group, plus the Euclidean merges.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    o = sub.add_parser("oft", help="merge peft OFT / BOFT adapters (one adapter out, or --dense)")
    o.add_argument("adapters", nargs="+", type=Path, metavar="ADAPTER")
    o.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    o.add_argument("--method", default="orthomerge",
                   help=f"orthomerge (default), avg (no magnitude correction), or a Euclidean rule ({RULES}; "
                        "needs --dense)")
    o.add_argument("--magnitude", choices=("mean", "median", "max"), default="mean")
    o.add_argument("--granularity", choices=("module", "block"), default="module")
    o.add_argument("--weights", type=_weights, default=None, help="per-adapter weights, e.g. 1,0.5,0.5")
    o.add_argument("--scale", type=finite_float, default=1.0, help="strength λ (default 1: the paper's)")
    o.add_argument("--density", type=finite_float, default=None,
                   help="TIES kept fraction (default 0.2) / DARE keep probability (default 0.5)")
    o.add_argument("--trim-scope", choices=("model", "tensor"), default="model", help=TRIM_HELP)
    o.add_argument("--exact-cayley", action="store_true",
                   help="inputs on peft's Neumann path: write the merged adapter on the exact Cayley path "
                        "(orthogonal to rounding; the summary reports the function change)")
    o.add_argument("--base", type=Path, default=None, help="base model (safetensors folder) for --dense")
    o.add_argument("--dense", action="store_true", help="write a merged Hugging Face checkpoint instead")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--force", action="store_true", help="replace --out if it exists")
    o.add_argument("--quiet", action="store_true")
    o.set_defaults(fn=_cmd_oft)

    f = sub.add_parser("full", help="Orthogonal-Residual Decoupling of full / LoRA experts")
    f.add_argument("--base", type=Path, required=True)
    f.add_argument("--experts", type=Path, nargs="+", required=True,
                   help="full checkpoints (safetensors) or peft LoRA adapter folders")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--residual", default="ta", help=f"the rule on the residuals: {RULES} (default ta)")
    f.add_argument("--ortho", choices=("none", "general", "conflict"), default="general")
    f.add_argument("--residual-scale", type=finite_float, default=None,
                   help="λ on the merged residual (default: the authors', 0.2 for ta, 1 for ties and the others)")
    f.add_argument("--density", type=finite_float, default=None,
                   help="TIES kept fraction (default 0.2) / DARE keep probability (default 0.5)")
    f.add_argument("--trim-scope", choices=("model", "tensor"), default="model", help=TRIM_HELP)
    f.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the SVDs run")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--force", action="store_true")
    f.add_argument("--quiet", action="store_true")
    f.set_defaults(fn=_cmd_full)

    d = sub.add_parser("diagnose", help="per 2-D module: hyperspherical energy, spectral norm, ‖RᵀR − I‖")
    d.add_argument("path", type=Path, help="a checkpoint, or an OFT / BOFT adapter folder")
    d.add_argument("--base", type=Path, default=None)
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=_cmd_diagnose)

    m = sub.add_parser("lm-demo", help="the language-model run: 3 OFT adapters on SmolLM2-135M-Instruct "
                       "(offline), merged by OrthoMerge, avg, TA, TIES and TSV-M (about 6 CPU-minutes)")
    m.add_argument("--out", type=Path, required=True, help="output folder (results.json, table.md, adapters/)")
    m.add_argument("--seeds", type=int, default=2, help="number of seeds (default 2)")
    m.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    m.add_argument("--max-steps", type=int, default=40, help="step cap per adapter (default 40; early stopping on dev)")
    m.add_argument("--force", action="store_true", help="replace an earlier lm-demo output")
    m.add_argument("--quiet", action="store_true")
    m.set_defaults(fn=_cmd_lm_demo)

    r = sub.add_parser("reproduce", help="run the laptop-scale reproduction")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args(["orthomerge"], a))
    return p


@cli_entry("orthomerge")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
