"""The ``full`` scale, the GPU recipe (bf16 on a CUDA device, batch 1 and 8; not run yet):

1. **SmolLM2-135M-Instruct** on the chat prompts of ``tasks.full_split`` (50 reported prompts per
   regime × 128 tokens; ESP's tree and mask init and LADE's window chosen on 10 other dev prompts
   per regime, 64 tokens);
2. **Llama-3-8B-Instruct and Qwen3-8B** on Spec-Bench (local paths) with the SmolLM2 dev choice.

Every drafter (``ar`` included) is checked against transformers' greedy ``model.generate`` (batch 1,
per prompt) with the near-tie rule of ``core.judge`` — the one the GPU check uses: in bf16 an
output may leave the reference only where the token it chose is within ``TIE_ULPS`` bf16 ulps of
the reference's top logit. EAGLE-2, the issue's upper reference, joins the Llama-3 stage as the
drafter ``eagle2`` when ``ESP_DECODE_EAGLE2`` names a local EAGLE-1/2 head trained for
Llama-3-8B-Instruct (e.g. the public ``yuhuili/EAGLE-LLaMA3-Instruct-8B``, downloaded by the user);
a bad folder or a head of another shape is refused. The recipe checks its needs first and refuses
within seconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from icml26_shared import Results, UserError

NEEDS = {"ESP_DECODE_LLAMA3": "a local Llama-3-8B-Instruct HF folder",
         "ESP_DECODE_QWEN3": "a local Qwen3-8B HF folder",
         "ESP_DECODE_SPECBENCH": "Spec-Bench's question.jsonl"}
EAGLE_VAR = "ESP_DECODE_EAGLE2"
DRAFTERS = ("ar", "pld", "lade", "stand", "esp", "esp+pld")
BATCHES = (1, 8)
TOKENS, DEV_TOKENS = 128, 64


def check_eagle():
    """The EAGLE-2 head named by ``ESP_DECODE_EAGLE2`` (None when unset), checked as a checkpoint folder
    and against ``ESP_DECODE_LLAMA3``'s config.json (hidden size, vocabulary) when that is there."""
    val = os.environ.get(EAGLE_VAR)
    if not val:
        return None
    from .eagle import load_head

    try:
        head = load_head(val)
    except UserError as exc:
        raise UserError(f"{EAGLE_VAR}: {exc}") from None
    target = Path(os.environ.get("ESP_DECODE_LLAMA3", "")) / "config.json"
    if os.environ.get("ESP_DECODE_LLAMA3") and target.is_file():
        try:
            tc = json.loads(target.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UserError(f"{target}: malformed JSON") from None
        for key in ("hidden_size", "vocab_size"):
            if tc.get(key) != getattr(head.cfg, key):
                raise UserError(f"{EAGLE_VAR}: the head's {key} {getattr(head.cfg, key)} differs from "
                                f"ESP_DECODE_LLAMA3's {tc.get(key)}: the head must be trained for Llama-3-8B-Instruct")
    return head


def check_needs() -> tuple[dict[str, Path], object]:
    """``(paths, eagle_head or None)``; a ``UserError`` naming everything that is missing."""
    import torch

    head = check_eagle()
    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA device")
    paths = {}
    for var, what in NEEDS.items():
        val = os.environ.get(var)
        if not val or not Path(val).exists():
            missing.append(f"{var} ({what})")
        else:
            paths[var] = Path(val)
    if missing:
        raise UserError("the full scale needs " + ", ".join(missing) + f" (optional: {EAGLE_VAR}, an EAGLE-1/2 "
                        "head for Llama-3-8B-Instruct, the upper reference)")
    from icml26_shared.hf import check_model_dir

    for var in ("ESP_DECODE_LLAMA3", "ESP_DECODE_QWEN3"):  # a broken folder: one line, before hours of work
        check_model_dir(paths[var])
    return paths, head


def specbench_prompts(path: Path, limit: int | None = None) -> list[tuple[str, str]]:
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append((row.get("category", "all"), row["turns"][0]))
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise UserError(f"{path}:{i}: not a Spec-Bench question (needs 'turns')") from None
    return out[:limit] if limit else out


def decode_judged(model, prompts, name, tokens, eos, kw, batch, refs, ref_logits, bf16):
    """One drafter over ``prompts`` in batches of ``batch``: per prompt its mean accepted length and
    its ``core.judge`` verdict against the reference."""
    from .baselines import make_drafter
    from .core import judge, mean_accepted_length
    from .decode import generate

    mal, verdicts = [], []
    for lo in range(0, len(prompts), batch):
        new, stats = generate(model, prompts[lo: lo + batch], make_drafter(name, eos_token_id=eos, **kw), tokens,
                              eos_token_id=eos)
        for j, (n, st) in enumerate(zip(new, stats, strict=True)):
            mal.append(mean_accepted_length(len(n), st["model_calls"]))
            verdicts.append(judge(n, refs[lo + j], ref_logits[lo + j], bf16))
    return mal, verdicts


def choose_judged(model, prompts, tokens, eos, grid, name, key, seed, bf16, batch=8):
    """The grid point with the best dev mean accepted length (ties: the first), each point checked
    with the near-tie rule; a point that fails it is not chosen."""
    import numpy as np

    from .gpu_check import reference

    refs, logits = reference(model, prompts, tokens, eos)
    scores = []
    for g in grid:
        mal, verdicts = decode_judged(model, prompts, name, tokens, eos, {key: g, "seed": seed}, batch, refs,
                                      logits, bf16)
        scores.append(float(np.mean(mal)) if all(v["ok"] for v in verdicts) else float("-inf"))
    return grid[int(np.argmax(scores))], scores


def run_stage(res, label: str, model, prompt_sets: dict, tokens: int, eos, kw: dict, bf16: bool,
              batches=BATCHES, chunk: int = 48, drafters=DRAFTERS) -> dict:
    """Every drafter at every batch size on every prompt set (``{regime: [ids]}``, taken ``chunk``
    prompts at a time so that the reference logits stay small: 48 × 128 × 128k fp32 ≈ 3 GB): rows
    ``{label}/{regime}/b{batch}`` (mean accepted length per prompt, lossless and exact fractions),
    and, from the batch-1 runs, the per-regime data ``experiments._claims`` reads."""
    import numpy as np

    from .gpu_check import reference

    arms: dict = {a: {} for a in drafters}
    verdicts_all = []
    for regime, ids in prompt_sets.items():
        got = {(b, a): ([], []) for b in batches for a in drafters}
        for lo in range(0, len(ids), chunk):   # the reference logits of ``chunk`` prompts at a time
            part = ids[lo: lo + chunk]
            refs, logits = reference(model, part, tokens, eos)
            for batch in batches:
                for name in drafters:
                    mal, vs = decode_judged(model, part, name, tokens, eos, kw, batch, refs, logits, bf16)
                    got[batch, name][0].extend(mal)
                    got[batch, name][1].extend(vs)
            del logits
        for batch in batches:
            for name in drafters:
                mal, vs = got[batch, name]
                verdicts_all += vs
                group = f"{label}/{regime}/b{batch}"
                res.add(group, name, "mean_accepted_length", mal, unit="tokens/call")
                res.add(group, name, "lossless_fraction", float(np.mean([v["ok"] for v in vs])))
                res.add(group, name, "exact_fraction", float(np.mean([v["exact"] for v in vs])))
                if batch == batches[0]:
                    arms[name][regime] = {"mal": mal}
    ok = [v["ok"] for v in verdicts_all]
    return {"arms": arms, "regimes": list(prompt_sets), "lossless_all": all(ok), "throughput": None,
            "n_checked": len(ok), "n_ok": sum(ok), "n_exact": sum(v["exact"] for v in verdicts_all),
            "failures": [v for v in verdicts_all if not v["ok"]][:20]}


def lossless_note(label: str, data: dict, bf16: bool) -> str:
    return (f"{label}: every drafter at batch {' and '.join(map(str, BATCHES))} vs model.generate (greedy, "
            f"{'bf16' if bf16 else 'fp32'}, batch 1) on every prompt: {data['n_ok']}/{data['n_checked']} lossless "
            f"under core.judge's near-tie rule (<= TIE_ULPS bf16 ulps of the reference's top logit; fp32 exact), "
            f"{data['n_exact']} token-identical")


def smol_stage(res, seed: int, device: str = "cuda", dtype: str = "bfloat16") -> dict:
    """SmolLM2-135M-Instruct: dev choice on ``tasks.full_split``'s dev prompts, then every drafter on
    the 50 reported prompts per regime × ``TOKENS``."""
    import torch

    from icml26_shared.data import load_smollm2

    from .config import ESPConfig
    from .smol import ESP_GRID, LADE_GRID
    from .tasks import REGIMES, full_split

    model, tok = load_smollm2(dtype)
    model = model.to(device).eval()
    eos, bf16 = tok.eos_token_id, dtype == "bfloat16"

    def chat(p):
        return list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))

    dev, test = {}, {}
    for r in REGIMES:
        d, t = full_split(r)
        dev[r], test[r] = [chat(p) for p in d], [chat(p) for p in t]
    dev_all = [q for r in REGIMES for q in dev[r]]
    # the default (tune's SmolLM2 choice: masks on every node) and the paper's prompt-mean init on the
    # same layout, then the best-path-only points [R]
    grid = (ESPConfig(), ESPConfig(mask_init="prompt_mean"), *ESP_GRID)
    esp_cfg, esp_scores = choose_judged(model, dev_all, DEV_TOKENS, eos, grid, "esp", "esp", seed, bf16)
    lade_cfg, lade_scores = choose_judged(model, dev_all, DEV_TOKENS, eos, LADE_GRID, "lade", "lade", seed, bf16)
    res.notes.append(f"full/smollm2: dev ({len(dev_all)} prompts, {DEV_TOKENS} tokens) chose ESP {esp_cfg} "
                     f"(scores {[round(s, 3) for s in esp_scores]}) and LADE {lade_cfg} "
                     f"({[round(s, 3) for s in lade_scores]}); test: {len(test[REGIMES[0]])} prompts per regime "
                     f"x {TOKENS} tokens, {dtype} on {device}")
    kw = {"esp": esp_cfg, "lade": lade_cfg, "seed": seed}
    data = run_stage(res, "smollm2", model, test, TOKENS, eos, kw, bf16)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"data": data, "kw": kw}


def full_recipe(out_dir: Path, seed: int, device: str = "cuda", dtype: str = "bfloat16") -> Results:
    """The recipe (``device``/``dtype`` other than CUDA/bf16 only for smoke runs of the code)."""
    paths, eagle = check_needs()
    import numpy as np
    import torch
    from transformers.utils import logging as hf_logging

    from icml26_shared.hf import load_pretrained

    hf_logging.disable_progress_bar()   # no "Loading weights" bars in the reproduction's log (SmolLM2 too)

    from .experiments import _claims
    from .registry import DESCRIPTOR

    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
    bf16 = dtype == "bfloat16"
    smol = smol_stage(res, seed, device, dtype)
    prompts = specbench_prompts(paths["ESP_DECODE_SPECBENCH"])
    stages = {"smollm2": smol["data"]}
    for var in ("ESP_DECODE_LLAMA3", "ESP_DECODE_QWEN3"):
        model, tok = load_pretrained(paths[var], dtype=dtype, device=device, attn_implementation="sdpa")
        ids = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)) for _, p in prompts]
        label = var.removeprefix("ESP_DECODE_").lower()
        with_eagle = eagle is not None and label == "llama3"   # the upper reference: a head for Llama-3
        stages[label] = run_stage(res, label, model, {"specbench": ids}, TOKENS, tok.eos_token_id,
                                  smol["kw"] | ({"eagle_head": eagle} if with_eagle else {}), bf16,
                                  drafters=DRAFTERS + (("eagle2",) if with_eagle else ()))
        if with_eagle:
            mal = {a: float(np.mean(stages[label]["arms"][a]["specbench"]["mal"])) for a in ("eagle2", "esp", "lade")}
            res.notes.append(f"full/llama3 (batch 1): EAGLE-2 upper reference (trained head, Eagle2Config defaults) "
                             f"mean accepted length {mal['eagle2']:.3f} vs esp {mal['esp']:.3f}, lade {mal['lade']:.3f}")
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    data = dict(stages["smollm2"])
    data["lossless_all"] = all(s["lossless_all"] for s in stages.values())
    note = "; ".join(lossless_note(k, s, bf16) for k, s in stages.items())
    _claims(res, data, "smollm2", lossless_note=note)
    for k, s in stages.items():
        if s["failures"]:
            res.notes.append(f"full/{k}: first lossless failures {s['failures']}")
    return res
