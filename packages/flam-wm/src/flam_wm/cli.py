"""The flam-wm command line: gen-data, train, eval, probe, bc, render, reproduce. Heavy imports live inside the commands."""

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
    float_in,
    nonneg_float,
    nonneg_int,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import print_json


def _cmd_gen(args: argparse.Namespace) -> int:
    from .io import write_dataset
    from .sprites import generate

    if args.out.exists():
        raise UserError(f"{args.out} already exists (choose a new --out)")
    if args.size % 4:
        raise UserError(f"--size must be a multiple of 4 (the sprite size), got {args.size}")
    if args.frames < 2:
        raise UserError(f"--frames must be at least 2, got {args.frames}")
    try:
        video, acts = generate(args.entities, args.clips, args.frames, args.size, args.seed,
                               distractor=args.distractor, controlled=args.controlled, identifiable=args.identifiable)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    meta = {"generator": "sprites", "entities": args.entities, "clips": args.clips, "frames": args.frames,
            "size": args.size, "seed": args.seed, "distractor": args.distractor, "controlled": args.controlled,
            "identifiable": args.identifiable}
    write_dataset(video, acts, args.out, meta)
    print(f"wrote {args.clips} clips x {args.frames} frames ({args.entities} sprites) -> {args.out}")
    return 0


def _accelerator():
    """An accelerate ``Accelerator`` when launched on several processes (``accelerate launch``), else None."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch
    from accelerate import Accelerator, DistributedDataParallelKwargs

    return Accelerator(cpu=not torch.cuda.is_available(),
                       kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])


def _cmd_train(args: argparse.Namespace) -> int:
    """Train into RUN: a new RUN is created with its config; a RUN of the same config resumes
    from its last checkpoint and ends at --steps; a RUN of another config is refused."""
    from .config import ModelConfig, TrainConfig
    from .io import finish_run, open_run, read_dataset

    tok, tok_info, tok_kw = None, None, {}
    if args.tokenizer is not None:  # a user's frozen tokenizer: refused at once when made for another size
        from .tokenizer import load_tokenizer

        tok = load_tokenizer(args.tokenizer, size=args.size)
        tok_kw = dict(tokenizer="conv", token_grid=tok.grid, token_channels=tok.channels, token_hidden=tok.hidden)
        tok_info = {"path": str(Path(args.tokenizer).resolve()), "sha256": _sha256(args.tokenizer)}
    try:
        slots = args.slots if args.model == "flam" else 1
        mcfg = ModelConfig(model=args.model, slots=slots, latent_dim=args.latent_dim, beta=args.beta,
                           size=args.size, width=args.width, temporal=not args.no_temporal, unroll=args.unroll,
                           local_sigma=args.local_sigma if args.model == "flam" else 0.0,
                           free_bits=args.free_bits, **tok_kw,
                           **({} if args.idm_input is None else {"idm_input": args.idm_input}),
                           **({} if args.token_idm is None else {"token_idm": args.token_idm}))
        tcfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seed=args.seed, lr=args.lr,
                           unroll_from=args.unroll_from, starts=args.starts,
                           start_steps=args.start_steps, start_floor=args.start_floor, start_max=args.start_max)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    video, _ = read_dataset(args.data, args.size, args.frames)
    acc = _accelerator()
    if acc is not None and tcfg.batch_size % acc.num_processes:
        raise UserError(f"--batch-size {tcfg.batch_size} is not divisible by the {acc.num_processes} processes")
    config = {"model": mcfg.to_dict(), "train": {"steps": tcfg.steps, "batch_size": tcfg.batch_size,
                                                 "window": tcfg.window, "seed": tcfg.seed, "lr": tcfg.lr,
                                                 "unroll_from": tcfg.unroll_from,
                                                 "starts": tcfg.starts, "start_steps": tcfg.start_steps,
                                                 "start_floor": tcfg.start_floor, "start_max": tcfg.start_max},
              "data": str(Path(args.data).resolve()), "clips": int(video.shape[0])}
    if tok_info is not None:
        config["tokenizer"] = tok_info
    main = acc is None or acc.is_main_process
    resumed = open_run(args.out, config) if main else True
    if acc is not None:
        acc.wait_for_everyone()
    if resumed and main:
        from icml26_shared.io import write_json

        write_json(args.out / "config.json", config, indent=2)  # --steps may change
    from .train import CHECKPOINT, Interrupted, rollout_metrics, train

    if resumed and main and (args.out / CHECKPOINT).is_file():
        print(f"resuming {args.out} from its checkpoint", file=sys.stderr)
    try:
        model = train(mcfg, tcfg, video, run_dir=args.out, every=args.checkpoint_every, accelerator=acc,
                      tokenizer=tok)
    except FloatingPointError as exc:  # diverged: one line (the RUN keeps its last checkpoint)
        raise UserError(f"{exc}; try a lower --lr") from None
    except Interrupted as exc:
        if not exc.saved:
            print(f"flam-wm: interrupted while the {tcfg.starts} best-of-R candidates ran, before any checkpoint "
                  "(run the same command to start again)", file=sys.stderr)
            return 128 + exc.signum
        print(f"flam-wm: interrupted at step {exc.step} of {tcfg.steps}; checkpoint written to {args.out} "
              "(run the same command to resume)", file=sys.stderr)
        return 128 + exc.signum
    if not main:
        return 0
    metrics = rollout_metrics(model, video, horizon=min(10, video.shape[1] - 1))
    metrics["steps"] = tcfg.steps
    metrics["start"] = model.train_info  # best-of-R starts: the candidate that continued, every candidate's score
    finish_run(args.out, model, config, metrics)
    h = metrics["horizon"]
    print(f"trained {args.model} for {args.steps} steps -> {args.out}; PSNR 1-step {metrics['psnr_1']:.2f} dB, "
          f"{h}-step {metrics[f'psnr_{h}']:.2f} dB (copy frame 0: {metrics[f'copy_{h}']:.2f} dB, training clips)")
    return 0


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _cmd_tokenizer(args: argparse.Namespace) -> int:
    """Fit the small convolutional autoencoder on every frame of --data, freeze it, save it."""
    from .io import read_dataset
    from .tokenizer import fit_tokenizer, save_tokenizer

    if args.out.exists():
        raise UserError(f"{args.out} already exists (choose a new --out)")
    if args.out.suffix != ".safetensors":
        raise UserError(f"--out must end in .safetensors, got {args.out.name!r}")
    video, _ = read_dataset(args.data, args.size, args.frames)
    try:
        import torch

        torch.set_num_threads(min(2, torch.get_num_threads()))
        tok = fit_tokenizer(video, grid=args.grid, channels=args.channels, steps=args.steps, seed=args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    from .evaluate import frame_metrics

    sample = video.reshape(-1, *video.shape[-3:])[:512]
    rec = tok.decode(tok.encode(torch.from_numpy(sample))).clamp(0, 1).numpy()
    m = frame_metrics(rec, sample.astype("float32") / 255.0)
    save_tokenizer(tok, args.out)
    print(f"wrote a frozen {args.grid}x{args.grid}x{args.channels} tokenizer -> {args.out}; reconstruction "
          f"PSNR {m['psnr']:.2f} dB on {len(sample)} of its training frames")
    return 0


def _cmd_bc(args: argparse.Namespace) -> int:
    """Pseudo-label BC on --controlled SpriteWorld data: a latent -> action decoder fit on --labels
    of the first 70% of clips' transitions (C chosen on the next 15%), pseudo-labels, behaviour
    cloning; reach-target success beside BC on the true actions and a random policy."""
    from .io import load_run, read_dataset

    meta_path = Path(args.data) / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = {}
    if not (meta.get("generator") == "sprites" and meta.get("controlled")):
        raise UserError(f"{args.data}: bc needs data written by 'flam-wm gen-data sprites --controlled' "
                        "(its meta.json says so)")
    model, _ = load_run(args.run)
    video, acts = read_dataset(args.data, model.cfg.size, args.frames)
    if acts is None or video.shape[0] < 4:
        raise UserError(f"{args.data}: bc needs true actions and at least 4 clips (train / dev / test)")
    import warnings

    from .bc import pseudo_label_bc, random_policy_success, true_action_bc
    from .experiments import _split
    from .train import latents

    sl = dict(zip(("train", "dev", "test"), _split(video.shape[0]), strict=True))
    size, ents, ident = model.cfg.size, acts.shape[-1], bool(meta.get("identifiable", False))
    lat = {k: latents(model, video[s]) for k, s in sl.items()}
    act = {k: acts[s][..., 0].reshape(-1) for k, s in sl.items()}
    frames = {k: video[s][:, :-1].reshape(-1, size, size, 3) for k, s in sl.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pseudo_label_bc(lat, act, frames, args.labels, ents, size, seed=args.seed, bc_steps=args.bc_steps,
                              identifiable=ident)
    out.update({"run": str(args.run), "data": str(args.data), "labels": args.labels,
                "true_action_success": true_action_bc(act, frames, ents, size, seed=args.seed, bc_steps=args.bc_steps,
                                                      identifiable=ident),
                "random_success": random_policy_success(ents, size, seed=args.seed, identifiable=ident)})
    if args.json:
        print_json(out, indent=2)
    else:
        view = "all factors" if out["decoder_factor"] < 0 else f"factor {out['decoder_factor']}"
        print(f"pseudo-label BC ({out['labelled']} labelled transitions, decoder C {out['decoder_c']} and "
              f"input {view} by 5-fold CV on the labelled transitions, "
              f"pseudo-label accuracy {out['pseudo_test_acc']:.3f} on test clips): reach-target success "
              f"{out['success']:.3f}; true-action BC {out['true_action_success']:.3f}; random {out['random_success']:.3f}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    """PSNR at 1 and --horizon autoregressive steps (latents inferred from the true frames) on
    every clip of --data, beside holding frame 0 (the copy baseline); the horizon is cut to the
    clips' length minus one (the JSON's ``horizon`` says which was used)."""
    from .io import load_run, read_dataset

    model, _ = load_run(args.run)
    video, _ = read_dataset(args.data, model.cfg.size, args.frames)
    from .evaluate import rollout_metrics

    m = rollout_metrics(model, video, args.horizon)
    h = m["horizon"]
    out = {"run": str(args.run), "data": str(args.data), "clips": int(video.shape[0]), **m}
    if args.json:
        print_json(out, indent=2)
    else:
        print(f"{video.shape[0]} clips: PSNR 1-step {m['psnr_1']:.2f} dB, {h}-step {m[f'psnr_{h}']:.2f} dB "
              f"(copy frame 0: {m['copy_1']:.2f} / {m[f'copy_{h}']:.2f} dB)")
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    """Factor-entity correspondence of a RUN's latents on --data's true actions: logistic probes fit
    on the first 70% of clips, their C chosen on the next 15% (dev), scored on the last 15% (test)."""
    from .io import load_run, read_dataset

    model, _ = load_run(args.run)
    video, acts = read_dataset(args.data, model.cfg.size, args.frames)
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
        print_json(out, indent=2)
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
    g.add_argument("--identifiable", action="store_true",
                   help="moves never hit a wall or another sprite: every action shows in the frames (ceiling 1)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, required=True, help="new folder to write")
    g.set_defaults(fn=_cmd_gen)
    k = sub.add_parser("fit-tokenizer", help="fit the frozen convolutional autoencoder tokenizer on a clip folder")
    k.add_argument("--data", type=Path, required=True)
    k.add_argument("--frames", type=positive_int, default=None,
                    help="cut every clip into windows of this many frames (default: clips must be equally long)")
    k.add_argument("--size", type=positive_int, default=32)
    k.add_argument("--grid", type=positive_int, default=8, help="tokens per side (size / 2^n)")
    k.add_argument("--channels", type=positive_int, default=8, help="values per token")
    k.add_argument("--steps", type=positive_int, default=300)
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--out", type=Path, required=True, help="new FILE.safetensors")
    k.set_defaults(fn=_cmd_tokenizer)
    t = sub.add_parser("train", help="train FLAM or a monolithic LAM on a clip folder (resumes its own RUN)")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--frames", type=positive_int, default=None,
                    help="cut every clip into windows of this many frames (default: clips must be equally long)")
    t.add_argument("--model", choices=["flam", "lam", "lam-vq", "lam-token"], default="flam")
    t.add_argument("--slots", type=positive_int, default=5, help="K (flam only)")
    t.add_argument("--latent-dim", type=positive_int, default=10, help="d; each slot gets d/K")
    t.add_argument("--beta", type=nonneg_float, default=0.01)
    t.add_argument("--size", type=positive_int, default=32)
    t.add_argument("--width", type=positive_int, default=48, help="slot / feature width D")
    t.add_argument("--steps", type=positive_int, default=400)
    t.add_argument("--batch-size", type=positive_int, default=16)
    t.add_argument("--lr", type=float_in(0, 1, low_open=True, high_open=True), default=2e-3)
    t.add_argument("--no-temporal", action="store_true", help="ablation: no causal temporal attention")
    t.add_argument("--unroll", type=positive_int, default=1,
                   help="FDM steps unrolled in the loss (1: one-step, the paper's; up to the window - 1)")
    t.add_argument("--unroll-from", type=nonneg_int, default=0, help="train one step ahead until this step")
    t.add_argument("--local-sigma", type=nonneg_float, default=0.0,
                   help="flam: object slots attend within ~sigma tokens of their position (0 = off)")
    t.add_argument("--idm-input", choices=("absolute", "delta"), default=None,
                   help="flam: what the IDM reads of a slot's position -- its change only (delta, the default: "
                        "a latent cannot encode where a sprite is) or both absolute positions "
                        "(absolute; a RUN trained before flam-wm 0.12.0 resumes with it)")
    t.add_argument("--token-idm", choices=("mean", "query", "query-delta"), default=None,
                   help="lam-token: its IDM reads (z_t, z_{t+1} - z_t) through a learned query token (query-delta, "
                        "the default), (z_t, z_{t+1}) through one (query) or their tokens' mean (mean; a RUN trained "
                        "before flam-wm 0.13.0 resumes with it)")
    t.add_argument("--free-bits", type=nonneg_float, default=0.0,
                   help="each slot's KL (nats) is priced only above this floor (free bits; 0 = off)")
    t.add_argument("--starts", type=positive_int, default=1,
                   help="best-of-R starts: R initialisations; after --start-steps the one whose latents remove the "
                        "largest share of its one-step error (frames only) goes on")
    t.add_argument("--start-steps", type=nonneg_int, default=0,
                   help="each best-of-R candidate's steps (0 < S < --steps when --starts > 1)")
    t.add_argument("--start-floor", type=float, default=0.0,
                   help="a best start whose latents remove less than this share of its one-step error is replaced "
                        "by one more candidate, up to --start-max (quick and long: 0.1)")
    t.add_argument("--start-max", type=nonneg_int, default=0,
                   help="the most candidates the --start-floor may run (0: --starts, no replacement)")
    t.add_argument("--tokenizer", type=Path, default=None,
                   help="a frozen tokenizer (flam-wm fit-tokenizer); default: the exact 4x4 patch tokenizer")
    t.add_argument("--checkpoint-every", type=positive_int, default=200, help="steps between checkpoints")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", type=Path, required=True, help="RUN folder: new, or one of the same config to resume")
    t.set_defaults(fn=_cmd_train)
    b = sub.add_parser("bc", help="pseudo-label behaviour cloning on --controlled SpriteWorld data")
    b.add_argument("run", type=Path)
    b.add_argument("--data", type=Path, required=True)
    b.add_argument("--frames", type=positive_int, default=None,
                    help="cut every clip into windows of this many frames (default: clips must be equally long)")
    b.add_argument("--labels", type=float_in(0, 1, low_open=True), default=0.01,
                   help="fraction of training transitions labelled")
    b.add_argument("--bc-steps", type=positive_int, default=400, help="optimiser steps of each cloned policy")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=_cmd_bc)
    e = sub.add_parser("eval", help="PSNR of a RUN's rollouts on a clip folder, beside copying frame 0")
    e.add_argument("run", type=Path)
    e.add_argument("--data", type=Path, required=True)
    e.add_argument("--frames", type=positive_int, default=None,
                    help="cut every clip into windows of this many frames (default: clips must be equally long)")
    e.add_argument("--horizon", type=positive_int, default=10)
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_eval)
    pr = sub.add_parser("probe", help="factor-entity correspondence of a RUN's latents (needs true actions)")
    pr.add_argument("run", type=Path)
    pr.add_argument("--data", type=Path, required=True)
    pr.add_argument("--frames", type=positive_int, default=None,
                    help="cut every clip into windows of this many frames (default: clips must be equally long)")
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
