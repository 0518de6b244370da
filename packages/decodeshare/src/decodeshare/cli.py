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

    return load_model(args.model, device_map=getattr(args, "device_map", None))


def _cmd_collect(args) -> int:
    from .hooks import collect_decode_states, get_layer
    from .io import read_tasks, refuse_existing, save_states
    from .readout import CUE, chat_body
    from .tasks import by_task

    refuse_existing(args.out)
    items = by_task(read_tasks(args.tasks))
    import torch
    from accelerate import PartialState

    # `accelerate launch [--cpu]` (or torchrun) sets the rank variables; on CPU the processes
    # talk over gloo. One process: no distributed state at all.
    state = PartialState(cpu=not torch.cuda.is_available())
    model, tok = _model(args)
    if args.device_map is None and state.device.type != "cpu":
        model.to(state.device)
    get_layer(model, args.layer)
    import random

    rng = random.Random(args.seed)
    prompts = {}
    for t, its in items.items():
        its = rng.sample(its, args.per_task) if args.per_task and args.per_task < len(its) else its
        prompts[t] = [chat_body(tok, it["prompt"]) + (CUE if "options" in it else "") for it in its]
    with state.split_between_processes(sorted(prompts)) as mine:
        part = collect_decode_states(model, tok, {t: prompts[t] for t in mine}, args.layer,
                                     args.max_new_tokens, phase=args.phase)
    if state.num_processes > 1:  # each process saved its tasks' shard; the main one writes all
        from accelerate.utils import gather_object

        part = dict(kv for d in gather_object([part]) for kv in d.items())
    if state.is_main_process:
        save_states(args.out, part, {"model": args.model, "layer": args.layer, "phase": args.phase,
                                     "max_new_tokens": args.max_new_tokens, "tasks_file": str(args.tasks)})
        print(f"wrote {sum(len(x) for x in part.values())} {args.phase} states of {len(part)} tasks -> {args.out}")
    return 0


def _cmd_fit(args) -> int:
    from .core import fit_shared
    from .io import load_states, refuse_existing, save_basis

    refuse_existing(args.out)
    states, manifest = load_states(args.states)
    try:
        fit = fit_shared(states, args.var, args.tau, args.m)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    save_basis(args.out, fit, {"states": str(Path(args.states).resolve()), "var": args.var,
                               "layer": manifest.get("layer"), "model": manifest.get("model"),
                               "phase": manifest.get("phase", "decode")})
    print(f"k = {fit.k}, |S| = {len(fit.shared_idx)}, tau*k = {fit.tau * fit.k:.3g} -> {args.out}")
    return 0


def _cmd_null(args) -> int:
    from .core import null_perm, null_scramble
    from .io import load_basis, load_states

    states, _ = load_states(args.states)
    _, meta = load_basis(args.basis, next(iter(states.values())).shape[1])
    if args.null == "perm":
        from .core import fit_shared

        fit = fit_shared(states, meta.get("var", 0.95), meta["tau"], meta["m"])
        p, obs, _ = null_perm(fit.relvar, fit.tau, fit.m, args.trials, args.seed)
    else:
        p, obs, _ = null_scramble(states, meta.get("var", 0.95), meta["tau"], meta["m"], args.trials, args.seed)
    _print({"null": args.null, "p": p, "observed": obs, "trials": args.trials}, args.json)
    return 0


def _protocol(args, need_prefill: bool, forced_only: bool = False):
    import numpy as np

    from .io import forced_choice_only, load_basis, load_states, read_tasks
    from .protocol import Protocol
    from .tasks import by_task

    items = read_tasks(args.tasks)
    if forced_only:
        items = forced_choice_only(items, str(args.tasks))
    model, tok = _model(args)
    tensors, meta = load_basis(args.basis, model.config.hidden_size)
    layer = meta.get("layer") if args.layer is None else args.layer
    if layer is None:
        raise UserError("the basis does not name its layer: give --layer")
    src = Path(meta.get("states", ""))
    if not src.is_dir():
        raise UserError(f"the basis names states {src} that do not exist (refit with decodeshare fit)")
    dec, _ = load_states(src)
    pre = {}
    if need_prefill:
        from .hooks import collect_decode_states
        from .readout import CUE, chat_body

        prompts = {t: [chat_body(tok, it["prompt"]) + (CUE if "options" in it else "") for it in its]
                   for t, its in by_task(items).items()}
        pre = {t: x.numpy().astype(np.float64)
               for t, x in collect_decode_states(model, tok, prompts, layer, 2, phase="prefill").items()}
        pre = {t: pre[t] for t in dec if t in pre}
    try:
        return Protocol(model, tok, int(layer), dec, pre or None, by_task(items), args.seed,
                        gen_tokens=getattr(args, "max_new_tokens", 16))
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


def _model_args(p) -> None:
    p.add_argument("--model", required=True, help="local HF folder, smollm2, tiny-llama or tiny-qwen2")
    p.add_argument("--tasks", required=True, type=Path, help="JSONL tasks or a local datasets folder")
    p.add_argument("--device-map", default=None, help="e.g. auto (beyond one GPU)")
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="decodeshare", description="DecodeShare: the shared subspace of LLM "
                                                            "decode-time decisions")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("collect", help="record decode (or prefill) states of each task")
    _model_args(p)
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
    p.add_argument("--tau", type=_fraction, default=1e-3)
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
