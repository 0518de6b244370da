"""``mc2-bench``: eval / steer / probe / build / toy / smol-vlm / digits-items / report / reproduce.

Heavy imports (torch, sklearn) live inside the commands so ``--help`` stays light. Every user
mistake is a ``UserError``: one line on stderr, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    finite_float,
    float_in,
    reproduce_from_args,
)
from icml26_shared.io import print_json

from .config import (  # one list each (config is light)
    ANSWER_MODES,
    DIRECTIONS,
    MODES,
    POSITIONS,
    TOY_ARCHS,
)


def _alphas(text: str) -> tuple[float, ...]:
    vals = tuple(finite_float(t) for t in text.split(",") if t.strip())
    if not vals:
        raise argparse.ArgumentTypeError("give at least one alpha, e.g. -1,0,1")
    return vals


def _layers(text: str) -> tuple[int, ...]:
    try:
        if "-" in text.strip("-"):
            a, b = (int(x) for x in text.split("-"))
            return tuple(range(a, b + 1))
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"layers look like 20-23 or 1,2, got {text!r}") from None


def _load_model(path: str, device: str | None = None, dtype: str | None = None, batch: int | None = None):
    """A model folder: one written by ``mc2-bench toy``, or a local Hugging Face VLM folder
    (``mc2-bench smol-vlm``, Qwen2-VL, LLaVA, Idefics3 / SmolVLM ...) read by the Auto classes."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"model {p} does not exist")
    if (p / "toy.pt").is_file():  # a toy folder: the offline subpackage, loaded only here
        from .offline.toy import load_toy
        from .offline.toy_adapter import ToyAdapter

        try:
            return ToyAdapter(load_toy(p), **({"batch": batch} if batch else {}))
        except Exception as exc:
            raise UserError(f"{p}/toy.pt is not a readable toy checkpoint ({type(exc).__name__})") from None
    if (p / "config.json").is_file():
        try:
            cfg = json.loads((p / "config.json").read_text())
        except json.JSONDecodeError:
            raise UserError(f"{p}/config.json: malformed JSON") from None
        if "vision_config" not in cfg:
            raise UserError(f"{p} is a text-only model ({cfg.get('model_type', '?')}): the MC2 modes need a vision model")
        from .hf import HFVisionChatAdapter

        try:
            return HFVisionChatAdapter.from_pretrained(p, device=device, dtype=dtype,
                                                       **({"batch": batch} if batch else {}))
        except UserError:
            raise
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise UserError(f"{p}: not loadable by AutoProcessor + AutoModelForImageTextToText "
                            f"({type(exc).__name__}: {msg})") from None
    raise UserError(f"{p} holds neither toy.pt nor config.json")


def _model(args):
    return _load_model(args.model, args.device, args.dtype, args.batch_size)


def _items(args):
    from .io import load_mc2

    return load_mc2(args.data, args.images)


def _check_items(adapter, items):
    for it in items:
        if adapter.kind == "toy":
            try:
                adapter.model.encode_item(it, None, "base_text", 0)
            except (ValueError, AssertionError) as exc:
                raise UserError(f"item {it.id}: not a digits conflict the toy can read ({exc})") from None
        if not Path(it.image).is_file():
            raise UserError(f"item {it.id}: image {it.image} not found")
        try:
            adapter.image_loader(it.image)
        except Exception:
            raise UserError(f"item {it.id}: image {it.image} is not a readable image") from None


def _fmt(value, n_valid=None) -> str:
    """A figure for the terminal: NaN (no valid answer) reads "n/a (0 valid answers)"."""
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a (0 valid answers)" if n_valid in (0, None) else "n/a"
        return f"{value:.4f}"
    return f"{value}"


def _emit(result: dict, as_json: bool, keys) -> None:
    if as_json:
        print_json(result, indent=1)  # NaN (e.g. no valid answer) -> null
    else:
        for k in keys:
            if k in result:
                print(f"{k:<24}{_fmt(result[k], result.get('n_valid'))}")


def _cmd_eval(args) -> int:
    from .commands import gather, shard
    from .io import refuse_existing, write_jsonl
    from .protocol import evaluate, evaluate_records

    refuse_existing(args.per_item)
    adapter = _model(args)
    items = _items(args)
    _check_items(adapter, items)
    mine, state = shard(items)  # under `accelerate launch`: this process's share of the items
    res = evaluate(adapter, mine, args.mode, args.answer_mode, per_item=True)
    if state is not None:
        res = evaluate_records(gather(res["records"], state), items, args.mode, args.answer_mode)
        if not state.is_main_process:
            return 0
    recs = res.pop("records", None)
    if args.per_item is not None:
        write_jsonl(args.per_item, recs)
    _emit(res, args.json, ("mode", "n_items", "n_valid", "vision_ratio", "text_ratio",
                           "order_consistency", "invalid_rate", "instruction_following"))
    return 0


def _cmd_steer(args) -> int:
    import numpy as np

    from . import __version__
    from .baselines import direction
    from .direction import SteeringDirection, config_hash
    from .protocol import alpha_sweep, amps_stats, hidden_pairs, split_fit_eval, state_position

    if args.save_direction is not None and args.save_direction.exists():
        raise UserError(f"{args.save_direction} already exists (choose another path; nothing was overwritten)")
    saved = SteeringDirection.load(args.load_direction) if args.load_direction is not None else None
    if saved is not None and args.fit_data is not None:
        raise UserError("--load-direction and --fit-data exclude each other (a loaded direction is not refitted)")
    if saved is None and args.layers is None:
        raise UserError("--layers is required (unless --load-direction gives them)")
    layers = tuple(args.layers) if args.layers is not None else tuple(saved.layers)
    if saved is not None and not set(layers) <= set(saved.layers):
        raise UserError(f"--layers {','.join(map(str, layers))}: the direction file has layers "
                        f"{','.join(map(str, saved.layers))}")
    positions = args.positions or (saved.positions if saved is not None else "all")
    contrast = saved.contrast if saved is not None else args.contrast
    method = saved.method if saved is not None else args.direction
    fit_at = "last" if args.fit_at == "last" else state_position(positions)
    if saved is None and contrast == "instruction" and fit_at in ("image_tokens", "context"):
        # every prompt puts the image, then the context, before the instruction: under causal
        # attention the follow-image and follow-text states there are the same (refused unloaded)
        raise UserError(f"--contrast instruction --positions {positions}: the instruction comes after "
                        f"the {fit_at.replace('_tokens', '')} in every prompt, so the two groups' states "
                        "are identical there (use --contrast answer, or --fit-at last)")
    adapter = _model(args)
    items = _items(args)
    _check_items(adapter, items)
    bad = [x for x in layers if not 0 <= x < adapter.n_layers]
    if bad:
        raise UserError(f"layer {bad[0]} out of range (the model has layers 0-{adapter.n_layers - 1})")
    in_sample = False
    if saved is not None:
        saved.check_model(adapter, where=str(args.load_direction))
        fit, evaluated = [], items
        overlap = sorted(set(saved.fit_ids) & {it.id for it in items})
        in_sample = bool(overlap)
    elif args.fit_data is not None:
        fit, evaluated = load_fit(args), items
        _check_items(adapter, fit)
    elif args.fit_on_eval:
        fit, evaluated, in_sample = items, items, True
    else:  # held-out by default: fit on a seeded, task-stratified share of --data, sweep the rest
        fit, evaluated = split_fit_eval(items, args.fit_fraction, args.seed)
        if not fit or not evaluated:
            raise UserError(f"--data holds {len(items)} item(s): too few to split into fit and evaluation "
                            "items (give --fit-data, or --fit-on-eval for an in-sample fit)")
    out = {"layers": list(layers), "positions": positions, "adaptive": args.adaptive,
           "direction": method, "contrast": contrast, "fit_at": fit_at, "in_sample": in_sample,
           "fit_ids": [it.id for it in fit] if saved is None else list(saved.fit_ids),
           "eval_ids": [it.id for it in evaluated],
           "direction_source": str(args.load_direction) if saved is not None else
           ("--fit-data" if args.fit_data is not None else "--fit-on-eval" if args.fit_on_eval
            else f"held-out split of --data (fit fraction {args.fit_fraction:g}, seed {args.seed})"),
           "sweeps": {}}
    if saved is not None:
        hv = ht = None
        vecs = {L: saved.vectors[L] for L in layers}
        stats = {L: saved.amps[L] for L in layers} if saved.amps else None
        if args.adaptive and stats is None:
            raise UserError(f"{args.load_direction} holds no AMPS statistics (fit with --adaptive amps)")
    else:
        try:
            hv, ht = hidden_pairs(adapter, fit, list(layers), contrast, args.answer_mode, fit_at)
        except ValueError as exc:  # the answer contrast needs both answers; a position set may be empty
            raise UserError(f"--contrast {contrast} --positions {positions}: {exc}") from None
        vecs, stats = {}, {}
        for k, L in enumerate(layers):
            try:
                vecs[L] = direction(method, hv[:, k], ht[:, k], args.seed)
            except ValueError as exc:  # e.g. instruction contrast at positions before the instruction
                raise UserError(f"--direction {method} at --positions {positions}: {exc} (the two "
                                "groups' states are identical there)") from None
            stats[L] = amps_stats(hv[:, k], ht[:, k], vecs[L])
        if args.save_direction is not None:
            SteeringDirection(vectors=vecs, positions=positions, contrast=contrast, method=method,
                              fit_at=fit_at, model_config_hash=config_hash(adapter),
                              n_layers=adapter.n_layers, amps=stats, fit_ids=out["fit_ids"],
                              version=__version__).save(args.save_direction)
            out["saved_direction"] = str(args.save_direction)
    controls = {"random": ["random"], "permuted": ["permuted"], "both": ["random", "permuted"],
                "none": []}[args.control]
    if "permuted" in controls and hv is None:
        raise UserError("--control permuted needs the fit's states: not available with --load-direction")
    for name in [method] + controls:
        if name == "random":
            d = next(iter(vecs.values())).shape[-1]
            v = direction("random", np.zeros((1, d)), np.zeros((1, d)), args.seed)
            vv, st = {L: v for L in layers}, {L: amps_stats(hv[:, k], ht[:, k], v) for k, L in
                                            enumerate(layers)} if hv is not None else None
        elif name == "permuted":
            vv = {L: direction("permuted", hv[:, k], ht[:, k], args.seed) for k, L in enumerate(layers)}
            st = {L: amps_stats(hv[:, k], ht[:, k], vv[L]) for k, L in enumerate(layers)}
        else:
            vv, st = vecs, stats
        if args.adaptive and st is None:
            raise UserError("--adaptive amps with a loaded direction needs no --control random")
        rows = alpha_sweep(adapter, evaluated, layers, vv, args.alpha_grid, args.answer_mode,
                           positions, args.adaptive, st if args.adaptive else None)
        out["sweeps"][name] = [{k: r[k] for k in ("alpha", "vision_ratio", "single_accuracy",
                                                  "invalid_rate", "hook")} for r in rows]
    if args.json:
        print_json(out, indent=1)
    else:
        print(f"fit on {len(out['fit_ids'])} item(s) ({out['direction_source']}), swept on "
              f"{len(evaluated)}{' (in sample)' if in_sample else ''}")
        for name, rows in out["sweeps"].items():
            for r in rows:
                print(f"{name:<10} alpha={r['alpha']:+.3g}  vision_ratio={_fmt(r['vision_ratio'])}  "
                      f"single_accuracy={_fmt(r['single_accuracy'])}")
    return 0


def load_fit(args):
    from .io import load_mc2

    return load_mc2(args.fit_data, args.fit_images or args.images)


def _cmd_probe(args) -> int:
    import numpy as np

    from .core import probe_accuracy
    from .io import refuse_existing
    from .protocol import hidden_pairs

    refuse_existing(args.plot)
    adapter = _model(args)
    items = _items(args)
    _check_items(adapter, items)
    half = len(items) // 2
    if half < 2:
        raise UserError("probe needs at least 4 items (half fit, half scored)")
    out = {}
    for L in range(adapter.n_layers):
        hv, ht = hidden_pairs(adapter, items[:half], L)
        tv, tt = hidden_pairs(adapter, items[half:], L)
        out[f"layer{L}"] = probe_accuracy(np.r_[hv, ht], np.r_[np.ones(len(hv)), np.zeros(len(ht))],
                                          np.r_[tv, tt], np.r_[np.ones(len(tv)), np.zeros(len(tt))])
    if args.plot is not None:
        from .plots import pca_plot

        L = args.plot_layer if args.plot_layer is not None else adapter.n_layers // 2
        if not 0 <= L < adapter.n_layers:
            raise UserError(f"--plot-layer {L} out of range (the model has layers 0-{adapter.n_layers - 1})")
        hv, ht = hidden_pairs(adapter, items, L)
        h0 = np.concatenate([adapter.hidden(items, "single", o)[:, L] for o in (0, 1)])
        pca_plot({"follow_image": hv, "follow_text": ht, "no_instruction": h0}, args.plot,
                 f"layer {L}: last prompt position, PCA")
    _emit(out, args.json, list(out))
    return 0


def _cmd_toy(args) -> int:


    from .config import ToyConfig
    from .io import refuse_existing
    from .offline.experiments import _split
    from .offline.toy import load_digits, save_toy, train_toy

    refuse_existing(args.out)
    X, y = load_digits()
    tr, _, _ = _split(len(y))
    model = train_toy(ToyConfig(vision_preference=args.vision_preference, steps=args.steps,
                                arch=args.arch), X[tr], y[tr], seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_toy(model, args.out)
    print(f"toy VLM (P={args.vision_preference:g}) written to {args.out}")
    return 0


def _cmd_digits_items(args) -> int:


    from .io import refuse_existing
    from .offline.digits import digits_items, write_digits_items
    from .offline.experiments import _split
    from .offline.toy import load_digits

    refuse_existing(args.out)
    X, y = load_digits()
    _, dv, te = _split(len(y))
    idx = (te if args.split == "test" else dv)[: args.n]
    path = write_digits_items(digits_items(X, y, idx, args.seed,
                                           prefix=args.split), args.out)
    print(f"{len(idx)} conflicts written to {path}")
    return 0


def _cmd_report(args) -> int:
    from .protocol import metrics_from_records

    p = Path(args.per_item)
    if not p.is_file():
        raise UserError(f"{p} does not exist")
    try:
        recs = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError:
        raise UserError(f"{p}: malformed JSONL") from None
    need = ("id", "modality_order0", "modality_order1")
    if not recs or any(not isinstance(r, dict) or any(k not in r for k in need) for r in recs):
        raise UserError(f"{p}: not an eval --per-item file (each line needs {', '.join(need)})")
    _emit(metrics_from_records(recs), args.json, ("mode", "n_items", "n_valid", "vision_ratio",
                                                   "text_ratio", "order_consistency", "invalid_rate",
                                                   "instruction_following"))
    return 0


def _data_args(p) -> None:
    p.add_argument("--model", required=True, help="model folder (`mc2-bench toy`, `smol-vlm`, or a local HF VLM)")
    p.add_argument("--data", required=True, type=Path, help="items JSON in the MC2 format")
    p.add_argument("--images", required=True, type=Path, help="image folder")
    p.add_argument("--answer-mode", choices=ANSWER_MODES, default="letter")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: auto)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="weights' dtype (default: auto, float32 on CPU, bfloat16 on a GPU that has it)")
    p.add_argument("--batch-size", type=int, default=None, help="prompts per forward pass "
                   "(default: 8 for a Hugging Face model, 256 for a toy)")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="mc2-bench", description="MC2: evaluate and steer modality preference")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("eval", help="vision/text ratios of one mode, both option orders")
    _data_args(p)
    p.add_argument("--mode", choices=MODES, default="single")
    p.add_argument("--per-item", type=Path, default=None, help="write per-item records (JSONL)")
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("steer", help="alpha sweep of a preference direction (single mode)")
    _data_args(p)
    p.add_argument("--layers", type=_layers, default=None, help="e.g. 20-23 (default with "
                   "--load-direction: the file's)")
    p.add_argument("--alpha-grid", type=_alphas, required=True, help="e.g. -1,-0.5,0,0.5,1")
    p.add_argument("--direction", choices=DIRECTIONS, default="diffmean")
    p.add_argument("--contrast", choices=("instruction", "answer"), default="instruction",
                   help="states the direction separates: icc follow-image vs follow-text prompts "
                        "(the authors'), or no-instruction prompts grouped by the model's own answer")
    p.add_argument("--positions", choices=POSITIONS, default=None,
                   help="positions the hook adds to (context = the text-context tokens); the "
                        "direction is fitted on the same positions (all/generated: the last one); "
                        "default all, or the loaded direction's")
    p.add_argument("--fit-at", choices=("same", "last"), default="same",
                   help="fit the direction on the positions it steers (same) or at the last prompt "
                        "position (last), applying it at --positions either way")
    p.add_argument("--adaptive", choices=("amps",), default=None)
    p.add_argument("--control", choices=("random", "permuted", "both", "none"), default="none",
                   help="null directions swept beside the fitted one: a random unit direction, "
                        "diffmean with the group labels permuted, or both")
    p.add_argument("--fit-data", type=Path, default=None, help="dev items to fit the direction on "
                   "(default: a held-out share of --data, see --fit-fraction)")
    p.add_argument("--fit-images", type=Path, default=None, help="image folder of --fit-data "
                   "(default: --images)")
    p.add_argument("--fit-fraction", type=float_in(0, 1), default=0.5,
                   help="without --fit-data: the share of --data (per task, seeded) that fits the "
                        "direction; the rest is swept")
    p.add_argument("--fit-on-eval", action="store_true",
                   help="fit on the swept items themselves (in sample; marked in_sample: true)")
    p.add_argument("--save-direction", type=Path, default=None,
                   help="write the fitted direction (safetensors, one vector per layer, with metadata)")
    p.add_argument("--load-direction", type=Path, default=None,
                   help="sweep a saved direction without refitting (refuses another model)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=_cmd_steer)
    p = sub.add_parser("probe", help="per-layer linear-probe accuracy (follow image vs text)")
    _data_args(p)
    p.add_argument("--plot", type=Path, default=None, help="write the PCA plot (PNG) of one layer")
    p.add_argument("--plot-layer", type=int, default=None, help="layer of the PCA plot (default: middle)")
    p.set_defaults(fn=_cmd_probe)
    p = sub.add_parser("build", help="MC2 conflicts from VQA items, kept where each modality alone answers")
    p.add_argument("--vqa", type=Path, required=True, help="VQA items (JSON/JSONL: id, image_id, question, answer, task)")
    p.add_argument("--images", type=Path, required=True, help="image folder")
    p.add_argument("--model", required=True, help="model that runs the single-modality checks")
    p.add_argument("--generator", default="digits", help="'digits' or module:function -> (answer_text, context)")
    p.add_argument("--answer-mode", choices=ANSWER_MODES, default="letter")
    p.add_argument("--out", type=Path, required=True, help="items JSON to write (MC2 format)")
    p.set_defaults(fn=lambda a: __import__("mc2_bench.commands", fromlist=["x"]).cmd_build(a, _load_model))
    p = sub.add_parser("smol-vlm", help="LLaVA around a frozen SmolLM2-135M-Instruct, tower trained on digits")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=lambda a: __import__("mc2_bench.commands", fromlist=["x"]).cmd_smol_vlm(a))
    p = sub.add_parser("toy", help="train the in-process toy VLM with a set vision preference")
    p.add_argument("--vision-preference", type=float_in(0, 1), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--arch", choices=TOY_ARCHS, default="early",
                   help="early: full causal attention in every layer; late: segment-local layers, a "
                        "content-blind gather, the answer source chosen at the answer position last")
    p.set_defaults(fn=_cmd_toy)
    p = sub.add_parser("digits-items", help="conflicts on held-out digits, in the MC2 format")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--split", choices=("dev", "test"), default="test")
    p.set_defaults(fn=_cmd_digits_items)
    p = sub.add_parser("report", help="recompute the ratios from an eval --per-item file")
    p.add_argument("per_item")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_report)
    p = sub.add_parser("reproduce", help="reproduce the claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["mc2-bench"], a))
    return parser


@cli_entry("mc2-bench")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "steps", 1) < 1 or getattr(args, "n", 1) < 1:
        raise UserError("--steps and --n must be positive")
    if (getattr(args, "batch_size", None) or 1) < 1:
        raise UserError("--batch-size must be positive")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
