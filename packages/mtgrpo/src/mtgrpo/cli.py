"""``mtgrpo`` CLI: train / eval / simulate / reproduce. Heavy imports stay inside the commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import add_to_manifest, check_replaceable, dumps_json, write_json

METHOD_NAMES = ("grpo", "dapo", "sec", "sec_dapo", "mtgrpo", "iwu_only", "rps_only", "minimax",
                "regularized")


def _tasks(args) -> list:
    from .io import load_task

    specs = [s for s in args.tasks.split(",") if s.strip()]
    if not specs:
        raise UserError("--tasks is empty")
    return [load_task(s.strip(), verifier=args.verifier, seed=args.data_seed) for s in specs]


def _policy(args, tasks):
    from .config import TinyPolicyConfig
    from .io import build_tiny, load_hf_policy, sft_warmstart

    if args.model == "tiny":
        tiny = TinyPolicyConfig(sft_steps=args.sft_steps)
        pol = build_tiny(args.seed, tiny)
        if args.sft_steps:
            sft_warmstart(pol, tasks, tiny, seed=args.seed)
        return pol
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except (ImportError, AttributeError):
        pass
    return load_hf_policy(args.model, lora_r=args.lora_r, target_modules=args.lora_targets,
                          chat_template=args.chat_template,
                          dtype=args.dtype,
                          gradient_checkpointing=getattr(args, "gradient_checkpointing", False))


def _accelerator():
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import Accelerator

        return Accelerator(cpu=os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true"))
    return None


def cmd_train(args) -> int:
    from .config import TrainConfig

    cfg = TrainConfig(method=args.method, steps=args.steps, lam=args.lam, seed=args.seed,
                      batch_prompts=args.batch_prompts, group_size=args.group_size, lr=args.lr,
                      filter=args.filter, max_new_tokens=args.max_new_tokens, N_rs=args.n_rs,
                      eval_every=max(1, args.steps), inflate=args.inflate,
                      acc_ema_init=args.acc_ema_init, temperature=args.temperature,
                      micro_batch=args.micro_batch, grad_accum=args.grad_accum,
                      acc_source=args.acc_source, unfilled_warn_steps=args.warn_unfilled)
    out = Path(args.out)
    ckpt = out / "checkpoint.pt"
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    if args.resume and args.overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    if args.resume and not ckpt.is_file():
        raise UserError(f"--resume: {ckpt} does not exist (nothing to resume)")
    if not args.resume and not args.overwrite and out.is_dir() and any(out.iterdir()):
        what = "pass --resume to continue it or " if ckpt.exists() else ""
        raise UserError(f"--out {out} exists and is not empty: {what}pass --overwrite to replace it")
    if args.resume or args.overwrite:  # the run is swapped in at the end: refuse before any work
        check_replaceable(out)
    tasks = _tasks(args)
    from .trainer import MTGRPOTrainer

    pol = _policy(args, tasks)
    tr = MTGRPOTrainer(pol, tasks, cfg, accelerator=_accelerator(), device=args.device)
    if args.resume:
        tr.load(ckpt)
    from icml26_shared.report import progress

    start = tr.step_idx
    if start >= cfg.steps:
        raise UserError(f"{ckpt} is at step {start} already: pass a larger --steps to continue")
    for _ in progress(range(start, cfg.steps), total=cfg.steps - start, description="mtgrpo train"):
        rec = tr.step()
        if args.save_every and tr.step_idx % args.save_every == 0:
            out.mkdir(parents=True, exist_ok=True)
            tr.save(ckpt)
            if tr.dist.rank == 0:  # the run's own file: the final swap may replace it
                add_to_manifest(out, ckpt.name)
        if args.log_every and tr.step_idx % args.log_every == 0 and tr.dist.rank == 0:
            print(f"step {rec['step']:4d} acc {_fmt(rec['acc'])} z {_fmt(rec['z'])} "
                  f"share {_fmt(rec['share'])} rounds {rec['rounds']}", flush=True)
    acc = tr.evaluate(n_prompts=args.eval_prompts)
    if tr.dist.rank == 0:
        _write_run(out, tr, pol, tasks, acc, cfg,
                   replace=bool(args.overwrite or args.resume or args.save_every))
        _print_acc(acc)
        print(f"wrote {out}/checkpoint.pt, model/, history.jsonl, summary.json, z_vs_share.png, "
              "train_acc.png")
    return 0


def _write_run(out: Path, tr, pol, tasks, acc: dict, cfg, replace: bool) -> None:
    """Everything into a sibling temp folder, then renamed into place: an error leaves neither
    a partial run nor a half-replaced old one."""
    from icml26_shared.io import atomic_dir

    from .io import save_policy

    with atomic_dir(out, replace=replace,
                    exists_error="--out {path} appeared while training; pass --overwrite") as tmp:
        tr.save(tmp / "checkpoint.pt")
        save_policy(pol, tmp / "model")
        with open(tmp / "history.jsonl", "w") as f:
            for h in tr.history:  # a task absent from a step has no accuracy: NaN, written null
                f.write(dumps_json(h, indent=None) + "\n")
        summary = {"method": cfg.method, "tasks": [t.name for t in tasks], "held_out_acc": acc,
                   "worst_task_acc": min(acc.values()), "avg_acc": sum(acc.values()) / len(acc),
                   "final_z": list(map(float, tr.z)), "steps": tr.step_idx,
                   "config": cfg.to_dict()}
        write_json(tmp / "summary.json", summary, indent=2)
        _plots(tr.history, [t.name for t in tasks], tmp)


def _plots(history: list[dict], names: list[str], out: Path) -> None:
    """Per step: task weight z against realised batch share, and training-batch accuracy."""
    from icml26_shared.report import line_plot

    steps = [h["step"] for h in history]
    ser = {}
    for k, n in enumerate(names):
        ser[f"z {n}"] = (steps, [h["z"][k] for h in history])
        ser[f"share {n}"] = (steps, [h["share"][k] for h in history])
    line_plot(out / "z_vs_share.png", ser, xlabel="step", ylabel="fraction",
              title="task weight z vs realised batch share")
    acc = {n: (steps, [h["acc"][k] for h in history]) for k, n in enumerate(names)}
    line_plot(out / "train_acc.png", acc, xlabel="step", ylabel="accuracy (rollouts of the step)",
              title="per-task training accuracy")


def cmd_eval(args) -> int:
    from .config import TrainConfig
    from .trainer import MTGRPOTrainer

    if args.json and Path(args.json).exists() and not args.overwrite:
        raise UserError(f"{args.json} exists (pass --overwrite to replace it)")
    tasks = _tasks(args)
    pol = _policy(args, tasks)
    tr = MTGRPOTrainer(pol, tasks, TrainConfig(max_new_tokens=args.max_new_tokens, seed=args.seed,
                                               temperature=args.temperature), device=args.device)
    if args.checkpoint:
        tr.load(args.checkpoint, check_method=False)
    acc = tr.evaluate(n_prompts=args.eval_prompts, n_val=args.n_val)
    _print_acc(acc)
    if args.json:
        write_json(args.json, {"held_out_acc": acc}, indent=2)
    return 0


def _floats(text: str, flag: str, lo: float | None = None, hi: float | None = None) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} must be comma-separated numbers (got {text!r})") from None
    if not vals:
        raise UserError(f"{flag} is empty")
    for v in vals:
        if v != v or v in (float("inf"), float("-inf")) or (lo is not None and v < lo) or \
                (hi is not None and v > hi):
            raise UserError(f"{flag} values must be finite numbers in [{lo}, {hi}] (got {v})")
    return vals


def cmd_simulate(args) -> int:
    from .simulate import simulate

    J0 = _floats(args.acc, "--acc", 0.0, 1.0)
    rates = _floats(args.rates, "--rates", 0.0, None)
    if len(J0) != len(rates):
        raise UserError("--acc and --rates need one value per task")
    tr = simulate(J0, rates, mode=args.mode, lam=args.lam, steps=args.steps, learn=not args.frozen,
                  improvement_scale=args.improvement_scale)
    for t in range(0, args.steps, max(1, args.steps // 10)):
        print(f"step {t:5d} z {_fmt(tr.z[t])} J {_fmt(tr.J[t])}")
    print(f"final   z {_fmt(tr.z[-1])} J {_fmt(tr.J[-1])}")
    return 0


def cmd_data(args) -> int:
    from .gym import write_reasoning_gym

    opts = {}
    for o in args.option or []:
        k, sep, v = o.partition("=")
        if not sep or not k:
            raise UserError(f"--option needs KEY=VALUE (got {o!r})")
        try:
            opts[k] = json.loads(v)
        except json.JSONDecodeError:
            opts[k] = v
    out = write_reasoning_gym(args.task, args.n, args.seed, Path(args.out), n_test=args.test,
                              n_dev=args.dev, options=opts, overwrite=args.overwrite)
    print(f"wrote {out}: {args.n} train, {args.dev} dev, {args.test} test rows of {args.task}")
    return 0


def _fmt(v) -> str:
    return "[" + " ".join("  nan" if x != x else f"{x:.2f}" for x in v) + "]"


def _print_acc(acc: dict) -> None:
    for n, a in acc.items():
        print(f"{n:>20s}  {a:.3f}")
    print(f"{'worst':>20s}  {min(acc.values()):.3f}\n{'average':>20s}  {sum(acc.values()) / len(acc):.3f}")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", default="copy,sort,add",
                   help="comma list: synthetic tasks (copy, add, sort, rev, mul, optionally :easy/:medium/"
                        ":hard) or NAME=PATH[@VERIFIER] to a local JSONL/CSV/Parquet with prompt, answer "
                        "columns")
    p.add_argument("--verifier", default="exact",
                   help="default verifier for file tasks: exact|number|contains|digits|reasoning-gym "
                        "or module:function (NAME=PATH@VERIFIER overrides it per task; files from "
                        "`mtgrpo data reasoning-gym` default to reasoning-gym)")
    p.add_argument("--model", default="tiny", help="'tiny' (built here) or a local Hugging Face folder")
    p.add_argument("--dtype", default="fp32", choices=("bf16", "fp16", "fp32"),
                   help="weights of a Hugging Face model (default: %(default)s)")
    p.add_argument("--device", default=None,
                   help="cpu | cuda | cuda:N (default: CUDA when present; under accelerate, its device)")
    p.add_argument("--temperature", type=positive_float, default=1.0,
                   help="sampling temperature, also applied when scoring the ratio (paper 1.0)")
    p.add_argument("--lora-r", type=nonneg_int, default=0, help="LoRA rank (0 = full fine-tuning)")
    p.add_argument("--lora-targets", default="auto",
                   help="modules LoRA adapts: auto (peft's table for known architectures, e.g. "
                        "q_proj,v_proj for Llama or query_key_value for GPT-NeoX; all-linear "
                        "otherwise), all-linear, or a comma list of module names")
    p.add_argument("--chat-template", action="store_true", help="wrap prompts in the chat template")
    p.add_argument("--sft-steps", type=nonneg_int, default=150, help="warm-start steps of the tiny policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic task data")
    p.add_argument("--max-new-tokens", type=positive_int, default=8)
    p.add_argument("--eval-prompts", type=positive_int, default=200)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="mtgrpo", description="Multi-Task GRPO (ICML 2026): "
                                     "worst-task-aware RL post-training with IWU task weights and RPS.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a policy with GRPO / DAPO / SEC / MT-GRPO / ablations")
    p.add_argument("--method", default="mtgrpo", choices=METHOD_NAMES)
    _model_args(p)
    p.add_argument("--lam", type=nonneg_float, default=0.2, help="λ of IWU (default: %(default)s, paper Exp-1)")
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--batch-prompts", type=positive_int, default=16)
    p.add_argument("--group-size", type=positive_int, default=8)
    p.add_argument("--lr", type=positive_float, default=3e-4)
    p.add_argument("--filter", default="strict", choices=("strict", "lenient", "constant"),
                   help="zero-gradient filter: strict (Exp-1), lenient (Exp-2: all-0 / all-1 groups), "
                        "constant (any constant group)")
    p.add_argument("--max-rounds", "--n-rs", dest="n_rs", type=positive_int, default=10,
                   help="N_rs: generation rounds of RPS / DAPO per step in all, the first included "
                        "(the authors' max_num_gen_batches; default %(default)s): caps the cost of "
                        "a task whose quota cannot be filled")
    p.add_argument("--acc-source", default="round", choices=("round", "generated", "accepted"),
                   help="what J_k's EMA observes: round = each generation round's accuracy before "
                        "the zero-advantage filter (authors' code), generated = all rollouts of "
                        "the step, accepted = the batch's groups that pass the filter")
    p.add_argument("--warn-unfilled", type=positive_int, default=3,
                   help="warn once per task when its RPS quota stays unfilled this many steps running")
    p.add_argument("--inflate", action="store_true",
                   help="acceptance-aware inflation m_k (Algorithm 2; off in the authors' 3-task runs)")
    p.add_argument("--acc-ema-init", default="zero", choices=("zero", "first"),
                   help="J_k EMA starts at 0 (authors' code) or at the first observation")
    p.add_argument("--micro-batch", type=nonneg_int, default=0,
                   help="sequences per forward/backward (0: a whole PPO mini-batch)")
    p.add_argument("--grad-accum", type=positive_int, default=1,
                   help="micro-batches per PPO mini-batch (gradient accumulation)")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass (Hugging Face models)")
    p.add_argument("--out", required=True, help="output folder (checkpoint, model, history, summary)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT folder")
    p.add_argument("--save-every", type=nonneg_int, default=0, help="checkpoint every N steps (0: at the end)")
    p.add_argument("--log-every", type=nonneg_int, default=10)
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("eval", help="held-out per-task, worst-task and average accuracy")
    _model_args(p)
    p.add_argument("--checkpoint", type=Path, default=None, help="a checkpoint.pt written by train")
    p.add_argument("--n-val", type=nonneg_int, default=4, help="samples per prompt at T=1 (0: greedy)")
    p.add_argument("--json", type=Path, default=None, help="write the accuracies here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("simulate", help="task-weight dynamics in the tabular simulator")
    p.add_argument("--acc", default="0.8,0.5,0.2", help="initial accuracy per task")
    p.add_argument("--rates", default="0.05,0.02,0.01", help="learning rate per task")
    p.add_argument("--mode", default="iwu", choices=("iwu", "minimax", "regularized"))
    p.add_argument("--lam", type=nonneg_float, default=0.2)
    p.add_argument("--steps", type=positive_int, default=1000)
    p.add_argument("--improvement-scale", type=nonneg_float, default=20.0)
    p.add_argument("--frozen", action="store_true", help="keep accuracies fixed")
    p.set_defaults(fn=cmd_simulate)
    p = sub.add_parser("data", help="write the paper's tasks as JSONL (offline generators)")
    dsub = p.add_subparsers(dest="source", required=True)
    q = dsub.add_parser("reasoning-gym", help="a reasoning-gym task: countdown, zebra_puzzles, "
                        "arc_1d or any other by name")
    q.add_argument("task")
    q.add_argument("--n", type=positive_int, default=1000, help="train rows (paper: 1000)")
    q.add_argument("--test", type=nonneg_int, default=200, help="test rows (paper: 200)")
    q.add_argument("--dev", type=nonneg_int, default=100, help="dev rows for choices made on numbers")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--option", action="append", help="KEY=VALUE passed to the generator's config")
    q.add_argument("--out", required=True, help="FILE.jsonl")
    q.add_argument("--overwrite", action="store_true")
    q.set_defaults(fn=cmd_data)
    p = sub.add_parser("reproduce", help="the paper's headline claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["mtgrpo"], a))
    return parser


@cli_entry("mtgrpo")
def main(argv: list[str] | None = None) -> int:
    import warnings

    args = build_parser().parse_args(argv)
    show = warnings.showwarning

    def one_line(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith("mtgrpo: "):  # ours: one line, no source excerpt
            print(f"mtgrpo: warning: {str(message)[len('mtgrpo: '):]}", file=sys.stderr, flush=True)
        else:
            show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():  # libraries' deprecation notes are not the user's business
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.showwarning = one_line
        return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
