"""``core-mtl``: gen-data / train / eval / diagnose / reproduce. Heavy imports live inside the
commands, so ``--help`` stays fast; users' mistakes end with one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as Parser
from icml26_shared.cli import add_reproduce_arguments, float_in, positive_int, reproduce_from_args
from icml26_shared.io import print_json

METHODS = ("core", "single", "ew", "uw", "dwa", "gradnorm", "mgda", "pcgrad", "cagrad", "nashmtl",
           "famo", "fairgrad", "stch", "mtan")  # = baselines.ALL_METHODS (kept here: no torch import)


def _cmd_gen(args) -> int:
    from .io import refuse_existing, write_dataset
    from .synthetic import N_CLASSES, make_split

    refuse_existing(args.out)
    if args.size < 8:
        raise UserError(f"--size must be >= 8, got {args.size}")
    kw = dict(shift=args.shift, attributes=args.attributes)
    splits = {"train": make_split(args.n_train, args.size, args.seed, split="train", **kw),
              "test": make_split(args.n_test, args.size, args.seed, split="test", **kw),
              "test_ood": make_split(args.n_test, args.size, args.seed, split="test_ood", **kw)}
    tasks = {"seg": {"kind": "segmentation", "dir": "label", "classes": N_CLASSES},
             "depth": {"kind": "depth", "dir": "depth"}, "normal": {"kind": "normal", "dir": "normal"}}
    if args.attributes:
        tasks["attr"] = {"kind": "attributes", "dir": "attr", "classes": args.attributes}
    write_dataset(args.out, splits, tasks)
    print(f"wrote ShadedShapes ({args.shift} shift) to {args.out}: {args.n_train} train, "
          f"{args.n_test} test, {args.n_test} test_ood images of {args.size}x{args.size}")
    return 0


def _select_tasks(all_tasks, names: str | None):
    if not names:
        return all_tasks
    by = {t.name: t for t in all_tasks}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by]
    if unknown or not wanted:
        raise UserError(f"unknown task {', '.join(unknown) or names!r} (this dataset has {', '.join(by)})")
    return tuple(by[n] for n in wanted)


def _batch(images, targets, tasks):
    import torch

    from .train import Batch

    return Batch(torch.from_numpy(images), {t.name: torch.from_numpy(targets[t.name]) for t in tasks})


def _one_task(b, name: str):
    return None if b is None else type(b)(b.image, {name: b.targets[name]})


def _cmd_train(args) -> int:
    from dataclasses import asdict

    from .config import ModelConfig, TrainConfig
    from .io import load_tasks, read_split, refuse_existing, save_run
    from .train import train

    refuse_existing(args.out)
    if args.method not in METHODS:
        raise UserError(f"unknown method {args.method!r} (choose from {', '.join(METHODS)})")
    device = _device(args.device)
    encoder, enc_spec = None, None
    if args.encoder:
        from . import encoders

        _, enc_spec = encoders.resolve(args.encoder)
        encoder = encoders.build(enc_spec)
    tasks = _select_tasks(load_tasks(args.data), args.tasks)
    images, targets, _ = read_split(args.data, "train", tasks, image_scale=args.image_scale)
    n_dev = int(round(args.dev_frac * len(images)))
    if len(images) - n_dev < args.batch_size:
        raise UserError(f"{len(images) - n_dev} training images is fewer than --batch-size {args.batch_size}")
    tr = _batch(images[n_dev:], {k: v[n_dev:] for k, v in targets.items()}, tasks)
    dev = _batch(images[:n_dev], {k: v[:n_dev] for k, v in targets.items()}, tasks) if n_dev >= 2 else None
    try:
        cfg = TrainConfig(method=args.method, tasks=tuple(t.name for t in tasks), epochs=args.epochs,
                          batch_size=args.batch_size, lr=args.lr, physics=not args.no_physics,
                          cka=not args.no_cka, cfa=not args.no_cfa, seed=args.seed,
                          model=ModelConfig(heads_read_shared=args.heads_read_shared))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    main_process = True
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under `accelerate launch` / torchrun
        from accelerate import PartialState

        main_process = PartialState().is_main_process  # initialises torch.distributed
    say = (lambda e, n: print(f"\repoch {e}/{n}", end="", file=sys.stderr, flush=True))
    try:
        if args.method == "single":
            models, history = {}, {}
            for t in tasks:
                r = train(cfg, (t,), _one_task(tr, t.name), _one_task(dev, t.name), progress=say,
                          encoder=encoder, device=device)
                models[t.name], history[t.name] = r.model, r.history
        else:
            r = train(cfg, tasks, tr, dev, progress=say, encoder=encoder, device=device)
            models, history = {"*": r.model}, r.history
    except ValueError as exc:  # the encoder's output, say
        raise UserError(str(exc)) from None
    print(file=sys.stderr)
    if not main_process:
        return 0
    save_run(args.out, asdict(cfg), tasks, {k: m.cpu() for k, m in models.items()}, history,
             encoder=enc_spec, image_scale=args.image_scale)
    print(f"trained {args.method} on {len(tr)} images ({n_dev} held out as dev), tasks "
          f"{','.join(t.name for t in tasks)} -> {args.out}")
    return 0


def _device(spec: str):
    from .train import resolve_device

    try:
        return resolve_device(spec)
    except ValueError as exc:
        raise UserError(f"--device: {exc}") from None


def _load(args, split: str):
    from .io import load_run, read_split

    device = _device(args.device)
    meta: dict = {}
    cfg, tasks, models = load_run(args.run, device=device, meta_out=meta)
    images, targets, extra = read_split(args.data, split, tasks, image_scale=meta["image_scale"])
    return cfg, tasks, models, images, targets, extra


def _cmd_eval(args) -> int:
    import torch

    from .metrics import evaluate, predict

    cfg, tasks, models, images, targets, _ = _load(args, "test" if args.split == "id" else "test_ood")
    m = evaluate(tasks, predict(models, torch.from_numpy(images)), targets)
    if args.reference is not None:
        from .io import load_run
        from .metrics import delta_m_percent

        _, rtasks, rmodels = load_run(args.reference, device=_device(args.device))
        ref = evaluate(rtasks, predict(rmodels, torch.from_numpy(images)), targets)
        m["delta_m_percent"] = delta_m_percent(m, ref)
    if args.json:
        print_json({"method": cfg["method"], "split": args.split, "metrics": m}, indent=2)
    else:
        print(f"{cfg['method']} on {args.split} ({len(images)} images)")
        for k, v in m.items():
            print(f"  {k:<16}{v:.4f}")
    return 0


def _cmd_diagnose(args) -> int:
    import torch

    from .metrics import cka_streams, conflict_on, hue_probe, predict

    cfg, tasks, models, images, targets, extra = _load(args, "test")
    x = torch.from_numpy(images)
    p = predict(models, x)
    d = {"method": cfg["method"], "cka_zs_zp": cka_streams(p)}
    if "*" in models and len(tasks) > 1:
        t = {k: torch.from_numpy(v) for k, v in targets.items()}
        d["conflict_cos"], d["conflict_neg_frac"] = conflict_on(models["*"], tasks, x, t)
    if "hue" in extra and len(set(extra["hue"].tolist())) > 1:
        d["hue_probe_acc"], d["hue_chance"] = hue_probe(p["_z_s"], extra["hue"], seed=0)
    if args.json:
        print_json(d, indent=2)
    else:
        for k, v in d.items():
            print(f"{k:<18}{v if isinstance(v, str) else f'{v:.4f}'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="core-mtl", description="CORE-MTL: semantic and residual streams for multi-task "
               "learning (SH inverse rendering, CKA, counterfactual swaps) against gradient balancing.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gen-data", help="write a synthetic dataset in the LibMTL layout")
    g.add_argument("dataset", choices=("shaded-shapes",))
    g.add_argument("--n-train", type=positive_int, default=1000)
    g.add_argument("--n-test", type=positive_int, default=300)
    g.add_argument("--size", type=positive_int, default=32)
    g.add_argument("--shift", choices=("color", "light", "corrupt"), default="color")
    g.add_argument("--attributes", type=int, default=0, choices=range(0, 41), metavar="K",
                   help="add K binary attributes (0-40)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    g.set_defaults(fn=_cmd_gen)

    t = sub.add_parser("train", help="train CORE-MTL or a baseline; writes a run folder")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--method", default="core", help=f"one of {', '.join(METHODS)}")
    t.add_argument("--tasks", default=None, help="comma-separated subset, e.g. seg,depth,normal")
    t.add_argument("--epochs", type=positive_int, default=5)
    t.add_argument("--batch-size", type=positive_int, default=32)
    t.add_argument("--lr", type=float_in(0, 1, low_open=True, high_open=True), default=3e-3)
    t.add_argument("--dev-frac", type=float_in(0, 1, low_open=True, high_open=True), default=0.15, help="share of train/ held out as dev")
    t.add_argument("--no-physics", action="store_true", help="ablation: no SH inverse-rendering prior")
    t.add_argument("--no-cka", action="store_true", help="ablation: no CKA independence penalty")
    t.add_argument("--no-cfa", action="store_true", help="ablation: no counterfactual swaps")
    t.add_argument("--heads-read-shared", action="store_true", help="heads also read proj(F), as the code does")
    t.add_argument("--encoder", default=None, metavar="MODULE:FACTORY",
                   help="your backbone: a zero-argument factory returning a module [B,3,H,W] -> [B,C,h,w] "
                        "(MODULE dotted or a .py file); recorded in the run for eval/diagnose")
    t.add_argument("--device", default="auto", help="auto (CUDA if there is one), cpu, cuda or cuda:N")
    t.add_argument("--image-scale", type=float_in(0, 1e6, low_open=True), default=1.0,
                   help="divide stored images by this (255 for 0-255 files); they must end in [0, 1]")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", type=Path, required=True, help="run folder (must not exist)")
    t.set_defaults(fn=_cmd_train)

    e = sub.add_parser("eval", help="metrics of a run on test (id) or test_ood (ood)")
    e.add_argument("run", type=Path)
    e.add_argument("--data", type=Path, required=True)
    e.add_argument("--split", choices=("id", "ood"), default="id")
    e.add_argument("--reference", type=Path, default=None, help="a --method single run, for Delta_m%%")
    e.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_eval)

    d = sub.add_parser("diagnose", help="CKA(z_s, z_p), task-gradient conflict and the hue probe")
    d.add_argument("run", type=Path)
    d.add_argument("--data", type=Path, required=True)
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=_cmd_diagnose)

    r = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args(["core-mtl"], a))
    return p


@cli_entry("core-mtl")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
