"""``esp-decode``: generate / bench / probe / reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    nonneg_float,
    nonneg_int,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import dumps_json, print_json

DRAFTER_NAMES = ("ar", "pld", "lade", "stand", "esp", "esp-nullmask", "esp-chain", "esp+pld", "eagle2")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def _device(text: str) -> str:
    import re

    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda or cuda:N, got {text!r}")
    return text


def _placement(args) -> tuple[str, str]:
    """``(device, dtype)``: ``--device`` (default cuda when available, else cpu) and ``--dtype``
    (``auto`` = bf16 on CUDA, fp32 on CPU). A CUDA device that is not there is a user error."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        idx = int(device.split(":")[1]) if ":" in device else 0
        if not torch.cuda.is_available() or idx >= torch.cuda.device_count():
            raise UserError(f"--device {device}: no such CUDA device on this machine")
    dtype = args.dtype if args.dtype != "auto" else ("bf16" if device.startswith("cuda") else "fp32")
    return device, DTYPES[dtype]


def _top_p(text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0.0 < p <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return p


def _topk(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must look like 8,4,2,2, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"must be positive integers, got {text!r}")
    return ks


def _settings(args) -> dict:
    """Every drafter's config: defaults <- ``--config`` <- ``--set`` <- the shortcut flags given."""
    from . import settings

    layers = [settings.read_config(args.config)] if args.config is not None else []
    layers.append(settings.parse_sets(args.set))
    flags = {"esp": {"num_masks": args.num_masks, "topk": args.topk, "max_nodes": args.max_nodes,
                     "mask_init": args.mask_init, "attach": args.attach, "shape": args.shape},
             "eagle2": {"depth": args.eagle_depth, "top_k": args.eagle_top_k,
                        "max_nodes": None if args.eagle_total_tokens is None else args.eagle_total_tokens - 1}}
    if args.eagle_total_tokens is not None and args.eagle_total_tokens < 2:
        raise UserError(f"--eagle-total-tokens counts the root and must be >= 2, got {args.eagle_total_tokens}")
    layers.append({s: {k: v for k, v in f.items() if v is not None} for s, f in flags.items()})
    return settings.build(layers)


def _eagle_kw(args, names) -> dict:
    """``eagle2``'s head, loaded (and checked as a folder) once, before the target model."""
    if "eagle2" not in names:
        return {}
    if args.eagle_path is None:
        raise UserError("drafter 'eagle2' needs --eagle-path DIR (an EAGLE-1/2 checkpoint folder)")
    from .eagle import load_head

    return {"eagle_head": load_head(args.eagle_path)}


def _arm_config(cfgs: dict, name: str) -> dict | None:
    from .settings import OF_DRAFTER, as_json

    section = OF_DRAFTER.get(name)
    out = {section: as_json(cfgs[section])} if section else {}
    if name == "esp+pld":
        out["pld"] = as_json(cfgs["pld"])
    return out or None


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _load(args):
    from .io import encode, load_model, read_prompts

    device, dtype = _placement(args)
    prompts = read_prompts(args.prompt_file)   # before the model: a bad file fails in a second
    _quiet()
    model, tok = load_model(args.model, dtype, device)
    ids = [encode(tok, p, args.chat) for _, p in prompts]
    return model, tok, prompts, ids


def _cmd_generate(args) -> int:
    from .baselines import make_drafter
    from .core import mean_accepted_length
    from .decode import generate
    from .io import check_out, write_atomic

    if args.drafter not in DRAFTER_NAMES:
        raise UserError(f"unknown drafter {args.drafter!r} (choose from {', '.join(DRAFTER_NAMES)})")
    check_out(args.out, args.force)
    if (args.top_k or args.top_p < 1.0) and not args.temperature > 0:
        raise UserError("--top-k / --top-p warp the sampling distribution: give --temperature > 0 too")
    cfgs = _settings(args)
    kw = cfgs | _eagle_kw(args, [args.drafter])
    model, tok, prompts, ids = _load(args)
    if "eagle_head" in kw:
        kw["eagle_head"].check_target(model)
    eos = tok.eos_token_id
    lines = []
    for i in range(0, len(ids), args.batch_size):
        chunk = ids[i: i + args.batch_size]
        dr = make_drafter(args.drafter, eos_token_id=eos, seed=args.seed or 0, **kw)
        new, stats = generate(model, chunk, dr, args.max_new_tokens, temperature=args.temperature,
                              top_k=args.top_k, top_p=args.top_p, seed=args.seed, eos_token_id=eos)
        for j, (n, st) in enumerate(zip(new, stats, strict=True)):
            pid, prompt = prompts[i + j]
            lines.append({"id": pid, "prompt_ids": chunk[j], "output_ids": n,
                          "text": tok.decode(n, skip_special_tokens=True), "model_calls": st["model_calls"],
                          "accepted_lengths": st["accepted_lengths"],
                          "mean_accepted_length": mean_accepted_length(len(n), st["model_calls"]),
                          "drafter": args.drafter, "config": _arm_config(cfgs, args.drafter)})
    if args.json:
        body = "".join(dumps_json(x, indent=None) + "\n" for x in lines)
    else:
        body = "".join(f"[{x['id']}] {x['text']}\n  ({len(x['output_ids'])} tokens, {x['model_calls']} calls, "
                       f"mean accepted length {x['mean_accepted_length']:.3f})\n" for x in lines)
    if args.out is not None:
        write_atomic(args.out, body)
    sys.stdout.write(body)
    return 0


def _cmd_bench(args) -> int:
    import time

    import torch

    from .baselines import make_drafter
    from .core import mean_accepted_length
    from .decode import generate

    names = [d.strip() for d in args.drafters.split(",") if d.strip()]
    for d in names:
        if d not in DRAFTER_NAMES:
            raise UserError(f"unknown drafter {d!r} (choose from {', '.join(DRAFTER_NAMES)})")
    cfgs = _settings(args)
    kw = cfgs | _eagle_kw(args, names)
    model, tok, prompts, ids = _load(args)
    if "eagle_head" in kw:
        kw["eagle_head"].check_target(model)
    from accelerate import PartialState
    from accelerate.utils import gather_object

    state = PartialState()
    eos = tok.eos_token_id
    with state.split_between_processes(list(range(len(ids)))) as mine:
        rows = []
        if args.check_lossless:   # the reference: transformers' greedy model.generate, one prompt at a time
            from .gpu_check import reference

            for i in mine:
                (new,), (logits,) = reference(model, [ids[i]], args.max_new_tokens, eos)
                rows.append({"drafter": "_ref", "prompt": i, "new": new, "logits": logits})
        for name in ["ar", *[n for n in names if n != "ar"]]:
            for i in mine:
                t0 = time.perf_counter()
                new, st = generate(model, [ids[i]], make_drafter(name, eos_token_id=eos, **kw), args.max_new_tokens,
                                   eos_token_id=eos)
                rows.append({"drafter": name, "prompt": i, "new": new[0], "calls": st[0]["model_calls"],
                             "seconds": time.perf_counter() - t0})
    rows = gather_object(rows)
    if not state.is_main_process:
        return 0
    from .core import judge

    ref = {r["prompt"]: r for r in rows if r["drafter"] == "_ref"}
    bf16 = next(model.parameters()).dtype == torch.bfloat16   # bf16: core.judge's near-tie rule
    report = {}
    for name in ["ar", *[n for n in names if n != "ar"]]:
        rs = [r for r in rows if r["drafter"] == name]
        toks = sum(len(r["new"]) for r in rs)
        secs = sum(r["seconds"] for r in rs)
        report[name] = {"mean_accepted_length": sum(mean_accepted_length(len(r["new"]), r["calls"]) for r in rs) / len(rs),
                        "model_calls": sum(r["calls"] for r in rs), "tokens_per_s": toks / secs if secs else None,
                        "lossless": all(judge(r["new"], ref[r["prompt"]]["new"], ref[r["prompt"]]["logits"], bf16)["ok"]
                                        for r in rs) if args.check_lossless else None,
                        "exact": all(r["new"] == ref[r["prompt"]]["new"] for r in rs) if args.check_lossless else None,
                        "config": _arm_config(cfgs, name)}
    for r in report.values():
        r["ratio_tokens_per_s_to_ar"] = (r["tokens_per_s"] / report["ar"]["tokens_per_s"]) if r["tokens_per_s"] else None
    if args.json:
        print_json(report, indent=None)
    else:
        print(f"{'drafter':<9}{'accepted':>10}{'calls':>8}{'tok/s':>9}{'vs ar':>8}  lossless")
        for name, r in report.items():
            print(f"{name:<9}{r['mean_accepted_length']:>10.3f}{r['model_calls']:>8}{r['tokens_per_s']:>9.1f}"
                  f"{r['ratio_tokens_per_s_to_ar']:>8.2f}  {r['lossless']}")
    return 0


def _cmd_tune(args) -> int:
    import shlex

    from .io import check_out, write_atomic
    from .settings import as_json
    from .tune import TIE, tune

    names = [d.strip() for d in args.drafters.split(",") if d.strip()]
    for d in names:
        if d not in ("esp", "pld", "lade", "stand"):
            raise UserError(f"tune: no grid for drafter {d!r} (choose from esp, pld, lade, stand)")
    check_out(args.out, args.force)
    model, tok, prompts, ids = _load(args)
    res = tune(model, ids, names, args.max_new_tokens, tok.eos_token_id,
               log=(lambda s: None) if args.json else (lambda s: print(s, flush=True)), batch=args.batch_size)
    doc = {"_source": {"command": "esp-decode " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "esp-decode tune",
                       "prompt_file": str(args.prompt_file), "prompt_ids": [p for p, _ in prompts],
                       "prompts": [t for _, t in prompts],
                       "max_new_tokens": args.max_new_tokens, "chat": args.chat, "batch_size": args.batch_size,
                       "criterion": f"mean accepted length; within {TIE:.0%} of the best: fewer items per call",
                       "scores": {n: [{**as_json(r["config"]), "accepted": r["accepted"], "items": r["items"],
                                       "tokens_per_s": r["tokens_per_s"]} for r in v["rows"]]
                                  for n, v in res.items()}},
           **{n: as_json(v["chosen"]) for n, v in res.items()}}
    write_atomic(args.out, dumps_json(doc, indent=1) + "\n")
    if args.json:
        print_json(doc, indent=None)
    else:
        for n, v in res.items():
            print(f"chosen {n}: {v['chosen']}")
        print(f"wrote {args.out} (use: generate/bench --config {args.out})")
    return 0


def _cmd_probe(args) -> int:
    from .config import ESPConfig
    from .decode import generate
    from .esp import ESPDrafter

    if args.num_masks < 1:
        raise UserError(f"--num-masks must be >= 1, got {args.num_masks}")
    model, tok, prompts, ids = _load(args)
    accs = []
    for p in ids:
        dr = ESPDrafter(ESPConfig(num_masks=args.num_masks, topk=(1,) * args.num_masks, max_nodes=0))
        new, _ = generate(model, [p], dr, args.max_new_tokens, eos_token_id=tok.eos_token_id)
        accs.append(dr.probe_accuracy([p + new[0]]))
    keys = sorted({k for a in accs for k in a})
    mean = {k: sum(a[k] for a in accs if k in a) / max(1, sum(k in a for a in accs)) for k in keys}
    if args.json:
        print_json(mean, indent=None)
    else:
        for j in range(1, args.num_masks + 1):
            print(f"mask depth {j}: top-1 {mean.get(f'top1_depth{j}', float('nan')):.3f}  "
                  f"top-5 {mean.get(f'top5_depth{j}', float('nan')):.3f}")
    return 0


def _common(p, drafter_knobs: bool = True) -> None:
    p.add_argument("--model", required=True, help="a local Hugging Face folder, or smollm2")
    p.add_argument("--prompt-file", type=Path, required=True, help='JSONL {"id", "prompt"} or one prompt per line')
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--chat", action="store_true", help="wrap each prompt as one user message (chat template)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--dtype", choices=("auto", *DTYPES), default="auto",
                   help="model weights: auto = bf16 on CUDA, fp32 on CPU (default: auto)")
    p.add_argument("--device", type=_device, default=None, help="cpu, cuda or cuda:N (default: cuda if present)")


def _eagle_args(p) -> None:
    p.add_argument("--eagle-path", type=Path, default=None,
                   help="drafter eagle2: a local EAGLE-1/2 checkpoint folder (config.json + weights) for this model")
    p.add_argument("--eagle-depth", type=positive_int, default=None, help="eagle2: draft tree levels (default 6)")
    p.add_argument("--eagle-top-k", type=positive_int, default=None, help="eagle2: nodes expanded per level (default 10)")
    p.add_argument("--eagle-total-tokens", type=positive_int, default=None,
                   help="eagle2: tokens verified per call, the root included (default 60)")


def _config_args(p) -> None:
    """Every drafter's settings: ``--config`` / ``--set`` reach every field; shortcuts for ESP."""
    from .config import MASK_INITS

    p.add_argument("--config", type=Path, default=None,
                   help="a JSON config {section: {field: value}} (sections esp, pld, lade, stand, eagle2; "
                        "e.g. written by `esp-decode tune`)")
    p.add_argument("--set", action="append", default=None, metavar="SECTION.FIELD=VALUE",
                   help="override one field, e.g. --set lade.window=4 --set esp.topk=16,4,2,2 (repeatable)")
    p.add_argument("--num-masks", type=nonneg_int, default=None, help="esp.num_masks")
    p.add_argument("--topk", type=_topk, default=None, help="esp.topk, e.g. 8,4,2,2")
    p.add_argument("--max-nodes", type=nonneg_int, default=None, help="esp.max_nodes")
    p.add_argument("--mask-init", choices=MASK_INITS[:3] + MASK_INITS[4:], default=None, help="esp.mask_init")
    p.add_argument("--attach", choices=("all", "top", "root"), default=None, help="esp.attach")
    p.add_argument("--shape", choices=("tree", "chain"), default=None, help="esp.shape")
    _eagle_args(p)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="esp-decode", description="Lossless, training-free multi-token decoding: "
                            "ESP (embedding-space probing, loop reconstructed) and the training-free drafters.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode prompts with one drafter")
    _common(g)
    g.add_argument("--drafter", default="esp", help=f"one of {', '.join(DRAFTER_NAMES)} (default: esp)")
    _config_args(g)
    g.add_argument("--temperature", type=nonneg_float, default=0.0)
    g.add_argument("--top-k", type=nonneg_int, default=0,
                   help="sampling: keep the k most likely tokens of the target (0 = off; needs --temperature > 0)")
    g.add_argument("--top-p", type=_top_p, default=1.0,
                   help="sampling: keep the smallest set of tokens with mass >= p (1 = off; needs --temperature > 0)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--batch-size", type=positive_int, default=1)
    g.add_argument("--out", type=Path, default=None, help="also write the output here (must not exist)")
    g.add_argument("--force", action="store_true", help="replace --out if it exists")
    g.set_defaults(fn=_cmd_generate)
    b = sub.add_parser("bench", help="mean accepted length, calls, tokens/s and losslessness per drafter")
    _common(b)
    b.add_argument("--drafters", default="ar,pld,lade,esp")
    b.add_argument("--check-lossless", action="store_true")
    _config_args(b)
    b.set_defaults(fn=_cmd_bench)
    t = sub.add_parser("tune", help="choose each drafter's settings on your own dev prompts; writes a --config JSON")
    _common(t)
    t.set_defaults(max_new_tokens=32)
    t.add_argument("--drafters", default="esp,pld,lade,stand", help="which drafters to tune (default: all four)")
    t.add_argument("--batch-size", type=positive_int, default=1,
                   help="dev prompts decoded together (same accepted lengths; cheaper on a CPU)")
    t.add_argument("--out", type=Path, required=True, help="the config JSON to write (must not exist)")
    t.add_argument("--force", action="store_true", help="replace --out if it exists")
    t.set_defaults(fn=_cmd_tune)
    p = sub.add_parser("probe", help="top-1/top-5 accuracy of each mask depth vs the model's own greedy tokens")
    _common(p)
    p.add_argument("--num-masks", type=int, default=4)
    p.set_defaults(fn=_cmd_probe)
    r = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args(["esp-decode"], a))
    return parser


@cli_entry("esp-decode")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
