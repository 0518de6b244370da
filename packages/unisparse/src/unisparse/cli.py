"""``unisparse`` CLI: bench, eval, reproduce. Heavy imports live inside the command functions."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser, add_reproduce_arguments, reproduce_from_args

from .io import load_model
from .tasks import HAYSTACKS

NAME = "unisparse"
METHOD_NAMES = ("unisparse", "dense", "xattention", "flexprefill", "minference",
                "ashape", "oracle", "random")
DTYPES = ("fp32", "bf16")
#: the needle command's default arms: the estimator baselines with UniSparse's answer-row rule and
#: A-shape with the same answer rows (issue 45); the published ones via --methods
NEEDLE_ARMS = ("unisparse", "xattention_answer", "flexprefill_answer", "minference_answer",
               "ashape_answer", "oracle")


def _check_out(path: Path | None, force: bool) -> None:
    if path is None:
        return
    if path.exists() and not force:
        raise UserError(f"{path} exists (pass --force to overwrite)")
    if not path.parent.exists():
        raise UserError(f"folder {path.parent} does not exist")


def _write_json(path: Path | None, data) -> None:
    if path is None:
        return
    from icml26_shared.io import write_json

    write_json(path, data, indent=2, mkdir=False)
    print(f"wrote {path}")


def _check_names(names, allowed, what: str = "method") -> None:
    bad = [m for m in names if m not in allowed]
    if bad:
        raise UserError(f"unknown {what} {bad[0]!r} (choose from {', '.join(allowed)})")


def _check_fraction(flag: str, value: float, *, one: bool = False) -> None:
    """``value`` in (0, 1) — or (0, 1] with ``one`` — and not NaN."""
    if not (math.isfinite(value) and 0 < value and (value <= 1 if one else value < 1)):
        raise UserError(f"{flag} must lie in (0, 1{']' if one else ')'}, got {value}")


def _check_range(flag: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise UserError(f"{flag} must lie in [{lo}, {hi}], got {value}")


def _check_study(args, max_docs: int = 1000) -> None:
    """The checks shared by ``needle``, ``sensitivity`` and ``tau-sweep``."""
    if args.length < 4 * args.block_size:
        raise UserError(f"--length must be at least 4 blocks ({4 * args.block_size}), "
                        f"got {args.length}")
    _check_range("--docs", args.docs, 1, max_docs)
    if hasattr(args, "density"):
        _check_fraction("--density", args.density)
    _check_out(args.out, args.force)


def _load_one_thread(args):
    """``(model, tokenizer)`` for a study, torch on one thread (the machine is shared)."""
    import torch

    from .needle import load

    torch.set_num_threads(1)
    return load(args.model, args.dtype, args.seed)


def _check_common(args) -> None:
    _check_names(args.methods, METHOD_NAMES)
    _check_fraction("--density", args.density, one=True)
    if any(n < 1 for n in args.lengths):
        raise UserError("--lengths must be positive")
    for name in ("heads", "kv_heads", "head_dim", "repeats", "docs"):
        if getattr(args, name, 1) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def cmd_bench(args) -> int:
    _check_common(args)
    _check_out(args.out, args.force)
    import torch

    from icml26_shared.eval import compare

    from .config import SparseConfig
    from .core import attention_recall, block_density, causal_block_valid, relative_error
    from .fast import run_blocks
    from .sparse import estimate_block_mask

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    print(f"{'length':>7} {'method':<14} {'density':>7} {'recall':>7} {'rel_err':>8} "
          f"{'time_s':>8} {'speedup':>8}")
    for n in args.lengths:
        g = torch.Generator().manual_seed(args.seed + n)
        q = torch.randn(1, args.heads, n, args.head_dim, generator=g)
        k = torch.randn(1, args.kv_heads, n, args.head_dim, generator=g)
        v = torch.randn(1, args.kv_heads, n, args.head_dim, generator=g)
        if args.heads % args.kv_heads:
            raise UserError(f"--heads ({args.heads}) must be a multiple of --kv-heads ({args.kv_heads})")
        if args.model:
            q, k, v = _capture(args, n)
        bs = args.block_size
        cfgs = {m: SparseConfig(method=m, block_size=bs, density=args.density) for m in args.methods}
        grp = q.shape[1] // k.shape[1]

        def dense_fn(q=q, k=k, v=v, grp=grp):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(grp, 1), v.repeat_interleave(grp, 1), is_causal=True)

        def sparse_fn(cfg, q=q, k=k, v=v):
            mask = estimate_block_mask(q, k, cfg)
            return run_blocks(q, k, v, mask, cfg.block_size, backend=args.backend)

        fns = {"dense_sdpa": dense_fn}
        fns.update({m: (lambda c=c: sparse_fn(c)) for m, c in cfgs.items()})
        tm = compare(fns, warmup=1, repeats=args.repeats)
        exact = dense_fn()
        full = causal_block_valid(n, n, bs)
        for m, cfg in cfgs.items():
            mask = estimate_block_mask(q, k, cfg)
            out = run_blocks(q, k, v, mask, bs, backend=args.backend)
            row = {"length": n, "method": m, "density": float(block_density(mask, n, n, bs).mean()),
                   "recall": float(attention_recall(q, k, mask, bs).mean()),
                   "rel_error": float(relative_error(out, exact).mean()),
                   "time_s": tm[m].median, "dense_time_s": tm["dense_sdpa"].median,
                   "speedup": tm["dense_sdpa"].median / tm[m].median,
                   "source": args.model or "random"}
            rows.append(row)
            print(f"{n:>7} {m:<14} {row['density']:>7.3f} {row['recall']:>7.4f} "
                  f"{row['rel_error']:>8.4f} {row['time_s']:>8.3f} {row['speedup']:>7.2f}x")
        del full
    if not args.model:
        print("note: random Q/K (no --model): recall ~ density; use --model for real attention")
    _write_json(args.out, rows)
    return 0


def _capture(args, n: int):
    from .io import patch, patch_state, unpatch
    from .tasks import needle_prompt

    model, tok = load_model(args.model)
    ids, _ = needle_prompt(tok, n, args.seed)
    n_layers = model.config.num_hidden_layers
    layer = args.layer if args.layer is not None else n_layers // 2
    if not 0 <= layer < n_layers:
        raise UserError(f"--layer must lie in [0, {n_layers})")
    import torch

    patch(model, method="dense", density=1.0, min_seq_len=10**9)
    st = patch_state(model)
    st.capture, st.capture_layers = {}, {layer}
    with torch.no_grad():
        model(torch.tensor([ids[:n]]))
    q, k, v = st.capture[layer]
    unpatch(model)
    return q.float(), k.float(), v.float()


def cmd_eval(args) -> int:
    _check_common(args)
    _check_out(args.out, args.force)
    from .e2e import evaluate_model
    from .experiments import _mean
    from .tasks import needle_prompt

    model, tok = load_model(args.model, args.dtype)
    methods = [m for m in args.methods if m != "dense"]
    report = []
    print(f"{'length':>7} {'method':<14} {'needle':>7} {'agree':>7} {'ppl_ratio':>9} {'density':>8}")
    for n in args.lengths:
        docs = [needle_prompt(tok, n, args.seed * 1000 + i) for i in range(args.docs)]
        e2e = evaluate_model(model, tok, docs, methods, block=args.block_size,
                             density=args.density, new_tokens=8, seed=args.seed)
        for m, vals in e2e.items():
            row = {"length": n, "method": m, "needle_accuracy": _mean(vals["correct"]),
                   "next_token_agreement": _mean(vals["agree"]) if vals["agree"] else 1.0,
                   "ppl_ratio": _mean(vals["ppl_ratio"]) if vals["ppl_ratio"] else 1.0,
                   "density": _mean(vals["density"]) if vals["density"] else 1.0}
            report.append(row)
            print(f"{n:>7} {m:<14} {row['needle_accuracy']:>7.2f} {row['next_token_agreement']:>7.3f} "
                  f"{row['ppl_ratio']:>9.4f} {row['density']:>8.3f}")
    _write_json(args.out, report)
    return 0


def cmd_needle(args) -> int:
    from .needle import NEEDLE_METHODS, needle_study

    _check_names(args.methods, NEEDLE_METHODS)
    from .fidelity import MATCHED

    if any(m in MATCHED for m in args.methods) and \
            "unisparse" not in args.methods:
        raise UserError("xattention / flexprefill / minference (and *_answer) are matched to UniSparse's "
                        "per-layer density: include 'unisparse' in --methods")
    _check_range("--workers", args.workers, 1, 16)
    _check_study(args, max_docs=10_000)
    if args.model != "tiny":
        load_model(args.model, args.dtype)  # refuse a bad folder before any work

    from .e2e import log

    methods = [m for m in NEEDLE_METHODS if m in args.methods]  # UniSparse first
    res = needle_study(args.model, length=args.length, n_docs=args.docs, density=args.density,
                       block=args.block_size, methods=methods, workers=args.workers,
                       new_tokens=args.new_tokens, dtype=args.dtype, seed=args.seed,
                       haystack=args.haystack, log=log)
    print(f"{'method':<18} {'accuracy':>8} {'95% CI':>15} {'density':>8} {'agree':>6} "
          f"{'minus dense [95% CI]':>26}")
    for m, c in res["summary"].items():
        md = c.get("minus_dense")
        diff = f"{md[0]:+.3f} [{md[1]:+.3f}, {md[2]:+.3f}]" if md else ""
        print(f"{m:<18} {c['accuracy']:>8.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] "
              f"{c['density']:>8.3f} {c['agree']:>6.3f} {diff:>26}")
    _write_json(args.out, res)
    return 0


def cmd_sensitivity(args) -> int:
    from .needle import NEEDLE_METHODS, layer_sensitivity

    _check_names([args.method], NEEDLE_METHODS)
    _check_study(args)
    from .e2e import documents, log

    model, tok = _load_one_thread(args)
    docs = documents(tok, args.length, args.docs, args.seed, offset=900)
    res = layer_sensitivity(model, tok, docs, method=args.method, block=args.block_size,
                            density=args.density, seed=args.seed, log=log)
    print(f"{'layer':>5} {'delta log p(key)':>17} {'worst':>8} {'density':>8}")
    for i, d in res["delta"].items():
        print(f"{i:>5} {sum(d) / len(d):>17.3f} {min(d):>8.3f} "
              f"{sum(res['density'][i]) / len(d):>8.3f}")
    _write_json(args.out, res)
    return 0


def cmd_tau_sweep(args) -> int:
    from .sweep import SWEEP_ARMS, tau_sweep_study

    _check_names(args.methods, SWEEP_ARMS)
    for t in args.targets:
        _check_fraction("--targets", t)
    _check_study(args)
    from .e2e import log

    model, tok = _load_one_thread(args)
    layers = tuple(args.layers)
    n_layers = model.config.num_hidden_layers
    if not all(0 <= li < n_layers for li in layers):
        raise UserError(f"--layers must lie in [0, {n_layers - 1}], got {list(layers)}")
    res = tau_sweep_study(model, tok, length=args.length, block=args.block_size, layers=layers,
                          test_docs=args.docs, seed=args.seed, targets=tuple(args.targets),
                          arms=tuple(args.methods), log=log)
    print(f"{'method':<14} {'target':>6} {'density':>8} {'95% CI (docs)':>16}  per layer")
    for arm, by in res["summary"].items():
        for tgt, c in by.items():
            ci = f"[{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]" if c["ci95"] else "-"
            lay = " ".join(f"{li}:{v:.3f}" for li, v in c["per_layer"].items())
            print(f"{arm:<14} {tgt:>6} {c['mean']:>8.3f} {ci:>16}  {lay}")
    _write_json(args.out, res)
    return 0


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog=NAME, description="UniSparse: training-free sparse prefill "
                                "attention from multi-granularity composite tokens (ICML 2026).")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp, lengths, block):
        sp.add_argument("--methods", nargs="+", default=["unisparse", "xattention", "flexprefill",
                                                         "minference", "ashape"],
                        help=f"estimators ({', '.join(METHOD_NAMES)})")
        sp.add_argument("--lengths", type=int, nargs="+", default=lengths, help="sequence lengths")
        sp.add_argument("--density", type=float, default=0.25,
                        help="kept fraction of causal blocks (default: %(default)s)")
        sp.add_argument("--block-size", type=int, default=block, help="default: %(default)s")
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
        sp.add_argument("--force", action="store_true", help="overwrite --out")

    b = sub.add_parser("bench", help="speed vs dense SDPA and attention recall per method")
    common(b, [4096, 8192], 64)
    b.add_argument("--heads", type=int, default=4)
    b.add_argument("--kv-heads", type=int, default=4)
    b.add_argument("--head-dim", type=int, default=64)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: steadier timings; 0 leaves torch's default)")
    b.add_argument("--backend", choices=("auto", "fused", "kernel", "flex"), default="auto",
                   help="block-sparse execution (default: %(default)s = fused on CPU, the "
                        "Triton kernel on CUDA)")
    b.add_argument("--model", default=None,
                   help="capture real Q/K/V from this HF folder (or 'smollm2') instead of random")
    b.add_argument("--layer", type=int, default=None, help="layer to capture (default: middle)")
    b.set_defaults(fn=cmd_bench)

    e = sub.add_parser("eval", help="passkey retrieval / next-token agreement on a causal LM")
    common(e, [1024], 32)
    e.add_argument("--model", required=True, help="local HF model folder, or 'smollm2'")
    e.add_argument("--docs", type=int, default=3, help="documents per length")
    e.add_argument("--dtype", choices=DTYPES, default="fp32",
                   help="model weights dtype (default: %(default)s; bf16 for large models)")
    e.set_defaults(fn=cmd_eval)

    def study(name, help, *, length, docs, block, density="kept fraction of causal blocks"):
        """A study subcommand with the options ``needle``, ``sensitivity``, ``tau-sweep`` share."""
        sp = sub.add_parser(name, help=help)
        sp.add_argument("--model", default="smollm2", help="local HF folder, 'smollm2' or 'tiny'")
        sp.add_argument("--length", type=int, default=length, help="tokens per document")
        sp.add_argument("--docs", type=int, default=docs, help="test documents")
        if density:
            sp.add_argument("--density", type=float, default=0.25, help=density)
        sp.add_argument("--block-size", type=int, default=block)
        sp.add_argument("--dtype", choices=DTYPES, default="fp32")
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
        sp.add_argument("--force", action="store_true", help="overwrite --out")
        return sp

    n = study("needle", "end-to-end needle study: every layer sparse, accuracy per method with "
              "95%% intervals and the paired interval against dense", length=1024, docs=20,
              block=32, density="UniSparse's nominal row budget; baselines get its measured density")
    n.add_argument("--methods", nargs="+", default=list(NEEDLE_ARMS), help="arms besides dense")
    n.add_argument("--workers", type=int, default=2, help="processes, one torch thread each")
    n.add_argument("--new-tokens", type=int, default=6)
    n.add_argument("--haystack", choices=HAYSTACKS, default="zen",
                   help="filler (default %(default)s: the Zen of Python's aphorisms, reshuffled; "
                        "chosen on dev documents, where dense SmolLM2-135M retrieves the key), "
                        "repeat (the classic periodic passkey filler), varied (templated "
                        "sentences) or prose (Python's reference manual; dense fails at 1k)")
    n.set_defaults(fn=cmd_needle)

    sv = study("sensitivity", "one layer at a time sparse, the rest dense: change of the pass "
               "key's log-probability per layer", length=1024, docs=2, block=32)
    sv.add_argument("--method", default="unisparse", help="the arm run in the sparse layer")
    sv.set_defaults(fn=cmd_sensitivity)

    ts = study("tau-sweep", "density each method needs (its own knob swept) to reach last-row "
               "recall targets on captured Q/K/V", length=4096, docs=2, block=64, density=None)
    ts.add_argument("--layers", type=int, nargs="+", default=[2, 8, 14])
    ts.add_argument("--targets", type=float, nargs="+", default=[0.8, 0.9, 0.95])
    ts.add_argument("--methods", nargs="+", default=["unisparse", "unisparse_tau", "xattention",
                                                     "flexprefill", "minference", "ashape",
                                                     "oracle", "oracle_tau"])
    ts.set_defaults(fn=cmd_tau_sweep)

    r = sub.add_parser("reproduce", help="the paper's claims at smoke/quick/full scale")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args([NAME], a))
    return p


@cli_entry(NAME)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "block_size", 64) not in (16, 32, 64, 128, 256):
        raise UserError(f"--block-size must be a power of two in 16..256, got {args.block_size}")
    model = getattr(args, "model", None)
    if model and model not in ("tiny", "smollm2"):  # a bad folder: one line, before torch loads
        from icml26_shared.hf import check_model_dir

        check_model_dir(model)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
