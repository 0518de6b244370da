"""``decodeshare``: collect / fit / null-test / ablate / patchback / steer-audit / report /
reproduce. Heavy imports (torch, transformers) live inside the commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    finite_float,
    nonneg_int,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import print_json


def _fraction(text: str) -> float:
    v = finite_float(text)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text}")
    return v


def positive_float(text: str) -> float:
    v = finite_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return v


def _m(text: str) -> int | str:
    return "all" if text == "all" else positive_int(text)


def _print(obj, as_json: bool) -> None:
    if as_json:
        print_json(obj, indent=2)
        return
    for k, v in obj.items():
        print(f"{k:<14} {v}")


def _model(args):
    from .io import load_model

    return load_model(args.model, dtype=args.dtype, device=args.device,
                      device_map=getattr(args, "device_map", None))


def _prompt_key(it: dict) -> str:
    """A calibration item's fingerprint (its task and prompt text), kept in the states' manifest
    so that evaluation items can be checked against it without the calibration file."""
    import hashlib

    return hashlib.sha1(f"{it['task']}\n{it['prompt']}".encode()).hexdigest()[:16]


def _cmd_collect(args) -> int:
    from .hooks import collect_decode_states, get_layer
    from .io import read_tasks, refuse_existing, save_states
    from .readout import CUE, chat_body
    from .tasks import by_task

    refuse_existing(args.out)
    items = by_task(read_tasks(args.calib))
    import torch
    from accelerate import PartialState

    # `accelerate launch [--cpu]` (or torchrun) sets the rank variables; on CPU the processes
    # talk over gloo. One process: no distributed state at all.
    state = PartialState(cpu=not torch.cuda.is_available())
    model, tok = _model(args)
    if args.device_map is None and args.device == "auto" and state.device.type != "cpu":
        model.to(state.device)
    get_layer(model, args.layer)
    import random

    rng = random.Random(args.seed)
    prompts, used = {}, []
    for t, its in items.items():
        its = rng.sample(its, args.per_task) if args.per_task and args.per_task < len(its) else its
        used += its
        prompts[t] = [chat_body(tok, it["prompt"]) + (CUE if "options" in it else "") for it in its]
    with state.split_between_processes(sorted(prompts)) as mine:
        part = collect_decode_states(model, tok, {t: prompts[t] for t in mine}, args.layer,
                                     args.max_new_tokens, phase=args.phase)
    if state.num_processes > 1:  # each process saved its tasks' shard; the main one writes all
        from accelerate.utils import gather_object

        part = dict(kv for d in gather_object([part]) for kv in d.items())
    if state.is_main_process:
        save_states(args.out, part, {"model": args.model, "layer": args.layer, "phase": args.phase,
                                     "max_new_tokens": args.max_new_tokens,
                                     "calib_file": str(Path(args.calib).resolve()),
                                     "calib_prompts": sorted({_prompt_key(it) for it in used})})
        print(f"wrote {sum(len(x) for x in part.values())} {args.phase} states of {len(part)} tasks -> {args.out}")
    return 0


def _cmd_fit(args) -> int:
    from .core import fit_shared
    from .io import load_states, refuse_existing, save_basis

    refuse_existing(args.out)
    states, manifest = load_states(args.states)
    try:
        fit = fit_shared(states, args.var, args.tau, args.m, tau_k=args.tau_k)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    save_basis(args.out, fit, {"states": str(Path(args.states).resolve()), "var": args.var,
                               "layer": manifest.get("layer"), "model": manifest.get("model"),
                               "phase": manifest.get("phase", "decode"), "m_rule": args.m,
                               "tau_k_rule": args.tau_k})
    print(f"k = {fit.k}, |S| = {len(fit.shared_idx)}, tau*k = {fit.tau * fit.k:.3g} -> {args.out}")
    return 0


def _cmd_null(args) -> int:
    from .core import null_perm, null_scramble
    from .io import load_basis, load_states

    states, _ = load_states(args.states)
    _, meta = load_basis(args.basis, next(iter(states.values())).shape[1])
    if args.null == "perm":
        from .core import fit_shared

        fit = fit_shared(states, meta.get("var", 0.95), meta["tau"], meta["m"], tau_k=meta.get("tau_k_rule"))
        p, obs, _ = null_perm(fit.relvar, fit.tau, fit.m, args.trials, args.seed)
    else:
        p, obs, _ = null_scramble(states, meta.get("var", 0.95), meta["tau"], meta["m"], args.trials, args.seed,
                                  tau_k=meta.get("tau_k_rule"))
    _print({"null": args.null, "p": p, "observed": obs, "trials": args.trials}, args.json)
    return 0


def _split_items(args, manifest: dict) -> tuple[list[dict], list[dict] | None]:
    """``(evaluation items, calibration items or None)``. Evaluation items that are calibration
    prompts (those the states were collected on, recorded in their manifest, or those of
    ``--calib``) are refused unless ``--allow-overlap``: the basis was fit on them."""
    from .io import read_tasks

    items = read_tasks(args.eval)
    calib_path = args.calib or (Path(manifest["calib_file"]) if manifest.get("calib_file") else None)
    if (args.calib is not None and Path(args.calib).resolve() == Path(args.eval).resolve()
            and not args.allow_overlap):
        raise UserError(f"--eval {args.eval} is the --calib file: evaluate on items the basis was not "
                        "fit on (or pass --allow-overlap)")
    calib = read_tasks(calib_path) if calib_path is not None and Path(calib_path).exists() else None
    if args.calib is not None and calib is None:
        raise UserError(f"{args.calib} does not exist")
    seen = set(manifest.get("calib_prompts", ()))
    if calib is not None:
        seen |= {_prompt_key(it) for it in calib}
    overlap = [it for it in items if _prompt_key(it) in seen]
    if overlap and not args.allow_overlap:
        raise UserError(f"{len(overlap)} of {len(items)} evaluation items are calibration prompts (e.g. "
                        f"id {overlap[0]['id']!r}): the basis was fit on them; give disjoint --calib/--eval "
                        "files (or pass --allow-overlap)")
    return items, calib


def _protocol(args, need_prefill: bool, forced_only: bool = False):
    import numpy as np

    from .hooks import hidden_size
    from .io import forced_choice_only, load_basis, load_states
    from .protocol import Protocol
    from .tasks import by_task

    _, meta = load_basis(args.basis)
    src = Path(meta.get("states", ""))
    if not src.is_dir():
        raise UserError(f"the basis names states {src} that do not exist (refit with decodeshare fit)")
    dec, manifest = load_states(src)
    items, calib = _split_items(args, manifest)
    if forced_only:
        items = forced_choice_only(items, str(args.eval))
    if need_prefill and calib is None:
        raise UserError("the prefill control needs the calibration items: give --calib (the file the "
                        "states were collected on)")
    model, tok = _model(args)
    tensors, meta = load_basis(args.basis, hidden_size(model))
    layer = meta.get("layer") if args.layer is None else args.layer
    if layer is None:
        raise UserError("the basis does not name its layer: give --layer")
    pre = {}
    if need_prefill:  # the prefill basis from the calibration prompts' last token, never evaluation's
        from .hooks import collect_decode_states
        from .readout import CUE, chat_body

        prompts = {t: [chat_body(tok, it["prompt"]) + (CUE if "options" in it else "") for it in its]
                   for t, its in by_task(calib).items()}
        pre = {t: x.numpy().astype(np.float64)
               for t, x in collect_decode_states(model, tok, prompts, layer, 2, phase="prefill").items()}
        pre = {t: pre[t] for t in dec if t in pre}
    fit_kw = {"tau": meta.get("tau", 1e-3), "m": meta.get("m_rule", "all"), "var": meta.get("var", 0.95),
              "tau_k": meta.get("tau_k_rule")}  # every LOTO refit applies the basis's own rule
    try:
        return Protocol(model, tok, int(layer), dec, pre or None, by_task(items), args.seed,
                        gen_tokens=getattr(args, "max_new_tokens", 16), **fit_kw)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _cmd_ablate(args) -> int:
    from icml26_shared.eval import paired_interval

    from .baselines import CONTROLS

    controls = [c for c in args.controls.split(",") if c]
    bad = [c for c in controls if c not in CONTROLS or c == "shared"]
    if bad:
        raise UserError(f"unknown control {', '.join(bad)} (choose from alpha, k, random, prefill, pooled_top)")
    proto = _protocol(args, "prefill" in controls)
    h2 = proto.ablation(["shared", *controls], loto=args.loto)
    base = h2["baseline"]
    out = {"baseline": {"accuracy": float(base.mean())}}
    for c, info in h2["conditions"].items():
        iv = paired_interval(base, info["correct"])
        out[c] = {"accuracy": float(info["correct"].mean()), "drop": iv.mean, "ci_low": iv.low,
                  "ci_high": iv.high, "dim": info["dim"], "alpha": info["alpha"],
                  "energy_ratio": info["energy_ratio"]}
    out["calls"] = proto.all_calls
    if args.json:
        print_json(out, indent=2)
    else:
        for c, v in out.items():
            if c != "calls":
                print(f"{c:<12} " + "  ".join(f"{k} {x:.4g}" for k, x in v.items()))
    return 0


def _cmd_patchback(args) -> int:
    proto = _protocol(args, False)
    pb = proto.patchback()
    rates = pb["rescue"] if args.window == "full" else {k: v for k, v in pb["rescue"].items() if k != "full"}
    _print({"flips": pb["flips"], "rescue_rate": rates, "max_logit_diff": pb["diff"]}, args.json)
    return 0


def _cmd_steer(args) -> int:
    import numpy as np

    from .core import repair, steering_overlap
    from .io import load_basis, load_vectors

    proto = _protocol(args, False, forced_only=True)
    tensors, _ = load_basis(args.basis)
    S = tensors["shared"]
    vecs = load_vectors(args.vectors, S.shape[0])
    out = {n: {"sh": steering_overlap(v, S), "sh_repaired": float(np.linalg.norm(S.T @ repair(v, S))
                                                                    / np.linalg.norm(v))}
           for n, v in vecs.items()}
    import torch

    from .protocol import choice_logprob

    for n, v in vecs.items():
        util = []
        for t in proto.tasks:
            s = proto.run(t, torch.as_tensor(v, dtype=torch.float32), 1.0, "add")
            b = proto.batches[t]
            util.append(float(choice_logprob(s, b.answers).mean() - choice_logprob(proto.clean[t], b.answers).mean()))
        out[n]["decode_utility"] = float(np.mean(util))
    _print(out, args.json)
    return 0


def _cmd_report(args) -> int:
    from icml26_shared.report import print_summary
    from icml26_shared.runner import load_results_dir

    print_summary(load_results_dir(args.dir))
    return 0


def _cmd_train_tiny(args) -> int:
    from . import train
    from .io import refuse_existing

    refuse_existing(args.out)
    curve = train.train_tiny(args.out, steps=args.steps or train.MAX_STEPS, seed=args.seed,
                             eval_every=args.eval_every, rule=not args.fixed_steps,
                             lr=train.LR if args.lr is None else args.lr,
                             warmup=train.WARMUP if args.warmup is None else args.warmup,
                             clip=train.CLIP if args.clip is None else args.clip,
                             log=None if args.json else print)
    _print({"model": curve["path"], "steps": curve["steps"], "stopped_by_rule": curve["stopped_at"] is not None,
            "dev_em_teacher_forced": curve["dev_em"][-1],
            "curve": str(Path(curve["path"]) / "train_curve.json")}, args.json)
    return 0


def _model_args(p) -> None:
    p.add_argument("--model", required=True, help="local HF folder, smollm2, tiny-llama or tiny-qwen2")
    p.add_argument("--dtype", default="auto",
                   help="auto (float32 on the CPU, bfloat16 on a GPU that has it), float32, bfloat16, float16")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    p.add_argument("--device-map", default=None, help="e.g. auto (across several GPUs; overrides --device)")
    p.add_argument("--seed", type=int, default=0)


def _split_args(p) -> None:
    p.add_argument("--eval", "--tasks", dest="eval", required=True, type=Path,
                   help="evaluation items (JSONL or a local datasets folder)")
    p.add_argument("--calib", type=Path, default=None,
                   help="calibration items (default: the file the basis's states were collected on)")
    p.add_argument("--allow-overlap", action="store_true",
                   help="evaluate even on calibration items (the basis was fit on them)")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="decodeshare", description="DecodeShare: the shared subspace of LLM "
                                                            "decode-time decisions")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("collect", help="record decode (or prefill) states of each task")
    _model_args(p)
    p.add_argument("--calib", "--tasks", dest="calib", required=True, type=Path,
                   help="calibration items (JSONL or a local datasets folder)")
    p.add_argument("--layer", type=nonneg_int, required=True)
    p.add_argument("--max-new-tokens", type=positive_int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    p.add_argument("--per-task", type=positive_int, default=None)
    p.set_defaults(fn=_cmd_collect)
    p = sub.add_parser("fit", help="pooled PCA and the shared set S(tau, m)")
    p.add_argument("states", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--var", type=_fraction, default=0.95)
    tau = p.add_mutually_exclusive_group()
    tau.add_argument("--tau", type=_fraction, default=1e-3, help="usage threshold (the paper's 1e-3)")
    tau.add_argument("--tau-k", type=positive_float, default=None,
                     help="threshold on the stringency scale: tau = TAU_K / k (the paper's 1e-3 at k = "
                          "2,600-3,000 is 2.6-3.0; give 2.8 to match it at a small model's k)")
    p.add_argument("--m", type=_m, default="all")
    p.set_defaults(fn=_cmd_fit)
    p = sub.add_parser("null-test", help="permutation or orthogonal-scramble null of |S|")
    p.add_argument("states", type=Path)
    p.add_argument("--basis", type=Path, required=True)
    p.add_argument("--null", choices=("perm", "scramble"), required=True)
    p.add_argument("--trials", type=positive_int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_null)
    for name, fn, help_ in (("ablate", _cmd_ablate, "decode-only removal of S against its controls"),
                            ("patchback", _cmd_patchback, "patch the clean shared component back"),
                            ("steer-audit", _cmd_steer, "overlap, repair and decode-time utility of vectors")):
        p = sub.add_parser(name, help=help_)
        _model_args(p)
        _split_args(p)
        p.add_argument("--basis", type=Path, required=True)
        p.add_argument("--layer", type=nonneg_int, default=None, help="default: the basis's layer")
        p.add_argument("--json", action="store_true")
        if name != "steer-audit":
            p.add_argument("--max-new-tokens", type=positive_int, default=16,
                           help="new tokens generated per generation item (exact match; default 16)")
        if name == "ablate":
            p.add_argument("--controls", default="alpha,k,random,prefill")
            p.add_argument("--loto", action="store_true")
        if name == "patchback":
            p.add_argument("--window", choices=("full", "step0"), default="full")
        if name == "steer-audit":
            p.add_argument("--vectors", type=Path, required=True)
        p.set_defaults(fn=fn)
    p = sub.add_parser("train-tiny", help="train the char-level Llama on the five generation tasks "
                                          "and save it as a model folder")
    p.add_argument("--out", type=Path, required=True, help="new model folder (refused if it exists)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="the cap: at most this many steps (default train.MAX_STEPS); training stops "
                        "earlier when the dev step rule fires")
    p.add_argument("--fixed-steps", action="store_true", help="no step rule: train exactly --steps steps")
    p.add_argument("--eval-every", type=positive_int, default=250, help="dev-curve interval in steps")
    p.add_argument("--lr", type=positive_float, default=None, help="AdamW learning rate (default train.LR)")
    p.add_argument("--warmup", type=nonneg_int, default=None, help="linear warmup steps (default train.WARMUP)")
    p.add_argument("--clip", type=positive_float, default=None, help="gradient-norm clip (default train.CLIP)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_train_tiny)
    p = sub.add_parser("report", help="summarise a reproduce output folder")
    p.add_argument("dir", type=Path)
    p.set_defaults(fn=_cmd_report)
    p = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["decodeshare"], a))
    return parser


@cli_entry("decodeshare")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "model"):
        import warnings

        warnings.filterwarnings("ignore")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
