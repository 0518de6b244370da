"""The device check for ``CI/gpu-check`` (≤ 3 minutes on one H200), and its CPU twin ``--tiny``.

``python -m esp_decode.gpu_check --out FILE.json [--tiny] [--accepted FILE.json]``

1. **Losslessness** on a random-init Llama-shaped model (GQA, SDPA), batch 1 and 8, unequal prompt
   lengths, every drafter (and ``eagle2`` with a random-init head: its code path) against ``model.generate`` (greedy, one prompt at a time): fp32 (TF32 off)
   must be token-identical; bf16 must be identical or diverge only at a *near tie* of the
   reference's own bf16 logits (top-2 gap ≤ ``TIE_ULPS`` bf16 ulps of the top logit) [R] — a batched
   or tree-shaped bf16 call rounds differently from a one-token step, so exact bf16 identity is not
   a property any speculative decoder has.
2. **Call cost**: one verification call of ``n`` items (forward + LM head over all ``n``) over one
   AR step (``n = 1``), timed side by side with ``icml26_shared.eval.compare``, at each drafter's
   mean items per call, plus ESP's full default layout (1 root + 48 nodes + 49 × 4 masks).
3. **Projection**: speed-up of drafter X over AR ≈ accepted length(X) ÷ call cost(X), with
   SmolLM2's accepted lengths and items per call (``--accepted``; default: the figures of the
   last quick reproduction, shipped as ``smollm2_accepted.json``). The drafting work on the host
   (Python) is measured separately in the loop timing (seconds per call inside ``generate``).

Exit status 1 when a losslessness check fails, 2 on a user error (no CUDA without ``--tiny``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser

from .core import TIE_ULPS, judge  # noqa: F401  (the shared near-tie rule; also used by ``full``)

DRAFTERS = ("ar", "pld", "lade", "stand", "esp", "esp+pld")
BASELINES = ("pld", "lade", "stand")
SHAPES = {
    # Llama-3-8B's layer shape (d 4096, 32 heads, 8 KV heads, FFN 14336), 4 layers, 32k vocabulary
    "full": dict(hidden=4096, layers=4, heads=32, kv=8, ffn=14336, vocab=32000, prompt_len=192,
                 tokens=32, warmup=3, repeats=15),
    "tiny": dict(hidden=64, layers=2, heads=4, kv=2, ffn=128, vocab=96, prompt_len=16, tokens=5,
                 warmup=1, repeats=2),
}
ESP_DEFAULT_ITEMS = 1 + 48 + 49 * 4
ACCEPTED_FILE = Path(__file__).with_name("smollm2_accepted.json")


def build_model(shape: dict, device: str, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                      intermediate_size=shape["ffn"], num_hidden_layers=shape["layers"],
                      num_attention_heads=shape["heads"], num_key_value_heads=shape["kv"],
                      max_position_embeddings=4096, pad_token_id=0, bos_token_id=None,
                      eos_token_id=None, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).to(device).eval()


def make_prompts(shape: dict, seed: int, n: int = 8) -> list[list[int]]:
    """Unequal lengths; each prompt repeats a random segment so n-gram drafters find matches."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = max(6, shape["prompt_len"] - 3 * i)
        seg = torch.randint(1, shape["vocab"], (max(3, length // 3),), generator=g).tolist()
        out.append((seg * 4)[:length])
    return out


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reference(model, prompts, tokens, eos=None):
    """Greedy ``model.generate`` one prompt at a time, and the reference's logits at each step
    (cut after ``eos`` when given)."""
    import torch

    outs, logits = [], []
    for p in prompts:
        dev = next(model.parameters()).device
        ids = torch.tensor([p], device=dev)
        r = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                           do_sample=False, eos_token_id=eos, pad_token_id=eos if eos is not None else 0,
                           output_scores=True, return_dict_in_generate=True)
        new = r.sequences[0, len(p):].tolist()
        if eos is not None and eos in new:
            new = new[: new.index(eos) + 1]
        outs.append(new)
        logits.append(torch.stack([s[0] for s in r.scores]).float().cpu()[: len(new)])
    return outs, logits


def check_lossless(model, prompts, tokens, dtype_name: str, device: str) -> tuple[dict, dict]:
    """Every drafter at batch 1 and 8 vs ``model.generate``. Returns (verdicts, loop timing at
    batch 1: seconds per call inside ``generate``, via ``compare`` with one round)."""
    from icml26_shared.eval import compare

    from .baselines import make_drafter
    from .decode import generate

    refs, ref_logits = reference(model, prompts, tokens)
    bf16 = dtype_name == "bfloat16"
    verdicts: dict = {}
    runs: dict = {}

    def batch1(name):
        def fn():
            runs[name] = [generate(model, [p], make_drafter(name), tokens) for p in prompts]
            _sync(device)
        return fn

    generate(model, prompts[:1], make_drafter("esp"), 2)   # warm the kernels up
    t = compare({name: batch1(name) for name in DRAFTERS}, warmup=0, repeats=1)
    loop = {}
    for name in DRAFTERS:
        calls = sum(st[0]["model_calls"] for _, st in runs[name])
        items = sum(sum(st[0]["tree_sizes"]) for _, st in runs[name])
        loop[name] = {"seconds_per_call": t[name].median / calls, "calls": calls,
                      "mean_tree_nodes": items / calls}
        verdicts[f"{name}@b1"] = [judge(new[0], r, lg, bf16)
                                  for (new, _), r, lg in zip(runs[name], refs, ref_logits, strict=True)]
        new8, _ = generate(model, prompts, make_drafter(name), tokens)
        verdicts[f"{name}@b{len(prompts)}"] = [judge(n, r, lg, bf16)
                                               for n, r, lg in zip(new8, refs, ref_logits, strict=True)]
    # EAGLE-2's code path (its head's own tree-masked calls, features from the verifier) in this
    # dtype and device: a random head, default knobs; its acceptance means nothing here
    from .eagle import new_head

    head = new_head(model, intermediate_size=model.config.hidden_size, seed=0)
    for batch in (1, len(prompts)):
        new = [n for lo in range(0, len(prompts), batch)
               for n in generate(model, prompts[lo: lo + batch], make_drafter("eagle2", eagle_head=head), tokens)[0]]
        verdicts[f"eagle2@b{batch}"] = [judge(n, r, lg, bf16) for n, r, lg in zip(new, refs, ref_logits, strict=True)]
    return verdicts, loop


def call_cost(model, prompt, items: list[int], warmup: int, repeats: int, device: str) -> dict:
    """Median seconds of one call of ``n`` items on a cached prompt (4-D mask, LM head on every
    item), timed side by side for every ``n``."""
    import torch

    from icml26_shared.eval import compare

    from .core import Tree, item_positions, item_visibility, tree_attention_mask
    from .decode import _cache_kwarg, new_cache

    base = model.get_decoder()
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    kw = _cache_kwarg(base)
    dtype = next(model.parameters()).dtype

    def fn_for(n):
        cache = new_cache(model)
        with torch.no_grad():
            base(input_ids=torch.tensor([prompt[:-1]], device=device), use_cache=True, **{kw: cache})
        tree = Tree()
        for i in range(n - 1):                     # a bushy tree of n - 1 nodes under the root
            tree.add(-1 if i < 8 else (i - 8) // 4, 1 + i)
        vis = item_visibility(0, tree, [])
        pos = torch.tensor([item_positions(len(prompt) - 1, 0, tree, [])], device=device)
        mask = tree_attention_mask([vis], [len(prompt) - 1], len(prompt) - 1, dtype).to(device)
        x = emb(torch.randint(1, emb.num_embeddings, (1, n), device=device))

        def run():
            with torch.no_grad():
                h = base(inputs_embeds=x, attention_mask=mask, position_ids=pos, use_cache=True,
                         **{kw: cache}).last_hidden_state
                head(h).float().softmax(-1)
            cache.crop(-n)
        return run

    t = compare({str(n): fn_for(n) for n in sorted(set(items))}, warmup=warmup, repeats=repeats)
    return {int(n): v.median for n, v in t.items()}


def project(accepted: dict, cost: dict) -> dict:
    """Speed-up over AR ≈ accepted length ÷ (call time at the drafter's items ÷ AR step time)."""
    out = {}
    for name, a in accepted.items():
        n = max(1, round(a["items_per_call"]))
        rel = cost[n] / cost[1]
        out[name] = {"mean_accepted_length": a["mean_accepted_length"], "items_per_call": n,
                     "call_over_ar_step": rel, "projected_speedup_vs_ar": a["mean_accepted_length"] / rel}
    have = [b for b in BASELINES if b in out]
    if have:
        best = max(have, key=lambda b: out[b]["projected_speedup_vs_ar"])
        out["best_baseline"] = best
        for arm in ("esp", "esp+pld"):
            if arm in out:
                out[f"{arm}_over_best_baseline"] = (out[arm]["projected_speedup_vs_ar"]
                                                    / out[best]["projected_speedup_vs_ar"])
    return out


def run_check(tiny: bool, accepted: dict, device: str | None = None, seed: int = 0) -> dict:
    import torch

    t0 = time.perf_counter()
    shape = SHAPES["tiny" if tiny else "full"]
    device = device or ("cpu" if tiny else "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("no CUDA device: run on the GPU machine, or pass --tiny for the CPU version")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if tiny:
        torch.set_num_threads(1)
    prompts = make_prompts(shape, seed)
    model = build_model(shape, device, seed)
    phases = {"build": time.perf_counter() - t0}
    result: dict = {"mode": "tiny" if tiny else "full", "device": device, "shape": shape,
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
                    "tie_ulps": TIE_ULPS, "lossless": {}, "loop": {}}
    for dtype_name in ("float32", "bfloat16"):
        m = model.to(getattr(torch, dtype_name))
        verdicts, loop = check_lossless(m, prompts, shape["tokens"], dtype_name, device)
        result["lossless"][dtype_name] = verdicts
        result["loop"][dtype_name] = loop
        phases[f"lossless_{dtype_name}"] = time.perf_counter() - t0 - sum(phases.values())
    result["lossless_ok"] = all(v["ok"] for d in result["lossless"].values() for vs in d.values() for v in vs)
    result["exact_fraction"] = {d: sum(v["exact"] for vs in res.values() for v in vs)
                                / sum(len(vs) for vs in res.values()) for d, res in result["lossless"].items()}
    items = [1, ESP_DEFAULT_ITEMS] + [max(1, round(a["items_per_call"])) for a in accepted.values()]
    cost = call_cost(model, prompts[0], items, shape["warmup"], shape["repeats"], device)
    result["call_seconds"] = {str(n): s for n, s in cost.items()}
    result["esp_default_call_over_ar_step"] = cost[ESP_DEFAULT_ITEMS] / cost[1]
    phases["call_cost"] = time.perf_counter() - t0 - sum(phases.values())
    result["phase_seconds"] = phases
    result["projection"] = project(accepted, cost)
    result["accepted_source"] = accepted.get("_source") if isinstance(accepted, dict) else None
    result["seconds"] = time.perf_counter() - t0
    return result


def load_accepted(path: Path | None) -> dict:
    path = ACCEPTED_FILE if path is None else Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg})") from None
    drafters = data.get("drafters") if isinstance(data, dict) else None
    if not isinstance(drafters, dict) or not all(
            isinstance(v, dict) and {"mean_accepted_length", "items_per_call"} <= set(v) for v in drafters.values()):
        raise UserError(f"{path}: needs {{'drafters': {{name: {{'mean_accepted_length', 'items_per_call'}}}}}}")
    return drafters


def summary(r: dict) -> str:
    lines = [f"esp-decode gpu_check ({r['mode']}, {r['device']}, {r['gpu'] or 'cpu'}): "
             f"lossless {'OK' if r['lossless_ok'] else 'FAILED'}; exact fraction "
             + ", ".join(f"{d} {f:.3f}" for d, f in r["exact_fraction"].items()),
             f"ESP default call ({ESP_DEFAULT_ITEMS} items) / AR step: {r['esp_default_call_over_ar_step']:.2f}"]
    p = r["projection"]
    for name in DRAFTERS:
        if name in p:
            q = p[name]
            lines.append(f"  {name:<8} accepted {q['mean_accepted_length']:.3f}  items {q['items_per_call']:>4}  "
                         f"call/AR {q['call_over_ar_step']:.2f}  projected speed-up {q['projected_speedup_vs_ar']:.2f}")
    for arm in ("esp", "esp+pld"):
        if f"{arm}_over_best_baseline" in p:
            lines.append(f"projected {arm} / best baseline ({p['best_baseline']}): {p[f'{arm}_over_best_baseline']:.3f}")
    lines.append(f"seconds: {r['seconds']:.1f}")
    return "\n".join(lines)


@cli_entry("esp-decode gpu_check")
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m esp_decode.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write (atomically)")
    parser.add_argument("--tiny", action="store_true", help="toy shapes on CPU (seconds)")
    parser.add_argument("--accepted", type=Path, default=None,
                        help="SmolLM2 accepted lengths and items per call (default: the shipped figures)")
    parser.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.out.parent.is_dir():
        raise UserError(f"{args.out.parent}: no such folder")
    accepted = load_accepted(args.accepted)
    import warnings

    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    result = run_check(args.tiny, accepted, args.device, args.seed)
    from icml26_shared.io import write_json

    write_json(args.out, result, indent=1)
    print(summary(result))
    return 0 if result["lossless_ok"] else 1


if __name__ == "__main__":
    import sys

    sys.exit(main())
