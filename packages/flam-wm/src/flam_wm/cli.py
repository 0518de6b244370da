"""The flam-wm command line: gen-data, train, eval, probe, render, reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import (
    add_reproduce_arguments,
    nonneg_float,
    positive_int,
    reproduce_from_args,
)


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
                           distractor=args.distractor, controlled=args.controlled)
    meta = {"generator": "sprites", "entities": args.entities, "clips": args.clips, "frames": args.frames,
            "size": args.size, "seed": args.seed, "distractor": args.distractor, "controlled": args.controlled}
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


def _cmd_eval(args: argparse.Namespace) -> int:
    """PSNR at 1 and --horizon autoregressive steps (latents inferred from the true frames) on
    every clip of --data, beside holding frame 0 (the copy baseline); the horizon is cut to the
    clips' length minus one (the JSON's ``horizon`` says which was used)."""
    from .io import load_run, read_dataset

    model, _ = load_run(args.run)
    video, _ = read_dataset(args.data, model.cfg.size)
    from .train import rollout_psnr

    m = rollout_psnr(model, video, args.horizon)
    h = m["horizon"]
    out = {"run": str(args.run), "data": str(args.data), "clips": int(video.shape[0]), **m}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{video.shape[0]} clips: PSNR 1-step {m['psnr_1']:.2f} dB, {h}-step {m[f'psnr_{h}']:.2f} dB "
              f"(copy frame 0: {m['copy_1']:.2f} / {m[f'copy_{h}']:.2f} dB)")
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    """Factor-entity correspondence of a RUN's latents on --data's true actions: logistic probes fit
    on the first 70% of clips, their C chosen on the next 15% (dev), scored on the last 15% (test)."""
    from .io import load_run, read_dataset

    model, _ = load_run(args.run)
    video, acts = read_dataset(args.data, model.cfg.size)
    if acts is None:
        raise UserError(f"{args.data}: probing needs true actions for every clip "
                        "(actions.npy in a clip folder or <clip>.actions.npy)")
    if video.shape[0] < 4:
        raise UserError(f"{args.data}: probing needs at least 4 clips (train / dev / test), got {video.shape[0]}")
    import warnings

    from .experiments import PROBE_C, _split
    from .train import chance_per_entity, correspondence, latents, probe_matrix

    sl = dict(zip(("train", "dev", "test"), _split(video.shape[0]), strict=True))
    lat = {k: latents(model, video[s]) for k, s in sl.items()}
    act = {k: acts[s].reshape(-1, acts.shape[-1]) for k, s in sl.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = max(PROBE_C, key=lambda c: correspondence(
            probe_matrix(lat["train"], act["train"], lat["dev"], act["dev"], c), chance_per_entity(act["dev"]))[0])
        acc = probe_matrix(lat["train"], act["train"], lat["test"], act["test"], c)
    chance = chance_per_entity(act["test"])
    score, match = correspondence(acc, chance)
    per = [float(acc[m, j]) if m >= 0 else float(chance[j]) for j, m in enumerate(match)]
    out = {"run": str(args.run), "data": str(args.data), "correspondence": score, "factor_per_entity": match,
           "accuracy_per_entity": per, "chance_per_entity": chance.tolist(),
           "best_probe": float(acc.max(0).mean()), "probe_c": c, "split": "test (last 15% of clips)"}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"correspondence {score:.3f} (test clips; best probe {out['best_probe']:.3f}, probe C {c} from dev)")
        for j, (m, a) in enumerate(zip(match, per, strict=True)):
            print(f"  entity {j}: factor {m if m >= 0 else '-'}  accuracy {a:.3f}  (chance {chance[j]:.3f})")
    return 0


def _parse_action(text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None
    if not vals or not all(math.isfinite(v) for v in vals):
        raise argparse.ArgumentTypeError(f"must be finite comma-separated numbers, got {text!r}")
    return vals


def _cmd_render(args: argparse.Namespace) -> int:
    """Write a clip's rollout (frame 0, then one predicted frame per step) at the clip's own size,
    optionally with one slot's latent action replaced by --action."""
    if args.out.exists():
        raise UserError(f"{args.out} already exists (choose a new --out)")
    if args.out.suffix.lower() not in (".gif", ".npy"):
        raise UserError(f"--out must end in .gif or .npy, got {args.out.name!r}")
    if (args.edit_slot is None) != (args.action is None):
        raise UserError("--edit-slot and --action go together")
    from .io import load_run, read_clip, write_frames

    model, _ = load_run(args.run)
    k, d = model.cfg.slots, model.cfg.slot_latent
    if args.edit_slot is not None:
        if not 0 <= args.edit_slot < k:
            raise UserError(f"--edit-slot must be in 0..{k - 1} (the RUN has {k} slots), got {args.edit_slot}")
        if len(args.action) != d:
            raise UserError(f"--action needs {d} numbers (the per-slot latent size d/K), got {len(args.action)}")
    native, _ = read_clip(args.clip, None)
    clip, _ = read_clip(args.clip, model.cfg.size)
    import numpy as np

    from .train import render_rollout

    frames = render_rollout(model, clip, args.edit_slot, None if args.action is None else np.array(args.action))
    h, w = native.shape[1:3]
    if (h, w) != frames.shape[1:3]:
        from PIL import Image

        frames = np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BILINEAR)) for f in frames])
    write_frames(frames, args.out)
    edit = "" if args.edit_slot is None else f", slot {args.edit_slot} set to {args.action}"
    print(f"wrote {len(frames)} frames ({w}x{h}{edit}) -> {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="flam-wm", description="FLAM: Factored Latent Action world models")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("gen-data", help="write a generated data set in the clip-folder format")
    g.add_argument("generator", choices=["sprites"])
    g.add_argument("--entities", type=positive_int, default=2)
    g.add_argument("--clips", type=positive_int, default=100)
    g.add_argument("--frames", type=positive_int, default=12)
    g.add_argument("--size", type=positive_int, default=32)
    g.add_argument("--distractor", choices=["none", "texture", "jitter"], default="none")
    g.add_argument("--controlled", action="store_true", help="sprite 0 heads for a visible target")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, required=True, help="new folder to write")
    g.set_defaults(fn=_cmd_gen)
    t = sub.add_parser("train", help="train FLAM or the monolithic LAM on a clip folder")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--model", choices=["flam", "lam"], default="flam")
    t.add_argument("--slots", type=positive_int, default=5, help="K (flam only)")
    t.add_argument("--latent-dim", type=positive_int, default=10, help="d; each slot gets d/K")
    t.add_argument("--beta", type=nonneg_float, default=0.01)
    t.add_argument("--size", type=positive_int, default=32)
    t.add_argument("--steps", type=positive_int, default=400)
    t.add_argument("--batch-size", type=positive_int, default=16)
    t.add_argument("--no-temporal", action="store_true", help="ablation: no causal temporal attention")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", type=Path, required=True, help="new RUN folder")
    t.set_defaults(fn=_cmd_train)
    e = sub.add_parser("eval", help="PSNR of a RUN's rollouts on a clip folder, beside copying frame 0")
    e.add_argument("run", type=Path)
    e.add_argument("--data", type=Path, required=True)
    e.add_argument("--horizon", type=positive_int, default=10)
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_eval)
    pr = sub.add_parser("probe", help="factor-entity correspondence of a RUN's latents (needs true actions)")
    pr.add_argument("run", type=Path)
    pr.add_argument("--data", type=Path, required=True)
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(fn=_cmd_probe)
    r = sub.add_parser("render", help="a clip's rollout as a GIF (or .npy), optionally editing one slot's action")
    r.add_argument("run", type=Path)
    r.add_argument("--clip", type=Path, required=True, help="a clip folder, .npy or .gif")
    r.add_argument("--edit-slot", type=int, default=None, help="slot k whose latent action is replaced")
    r.add_argument("--action", type=_parse_action, default=None, help="d/K comma-separated numbers")
    r.add_argument("--out", type=Path, required=True, help="new FILE.gif (or FILE.npy, exact)")
    r.set_defaults(fn=_cmd_render)
    p = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["flam-wm"], a))
    return parser


@cli_entry("flam-wm")
def main(argv: list[str] | None = None) -> int:
    raw, argv = list(sys.argv[1:] if argv is None else argv), []
    while raw:  # "--action -1,2": a vector may start with a minus sign
        a = raw.pop(0)
        if a == "--action" and raw and raw[0][:1] == "-" and raw[0][1:2] in set("0123456789."):
            a = f"--action={raw.pop(0)}"
        argv.append(a)
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
