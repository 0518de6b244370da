"""The ``full`` scale: Llama-3-8B-Instruct and Qwen3-8B on Spec-Bench from local paths, bf16 on a
CUDA device, batch 1 and 8. It checks its needs first and refuses within seconds."""

from __future__ import annotations

import json
import os
from pathlib import Path

from icml26_shared import Results, UserError

NEEDS = {"ESP_DECODE_LLAMA3": "a local Llama-3-8B-Instruct HF folder",
         "ESP_DECODE_QWEN3": "a local Qwen3-8B HF folder",
         "ESP_DECODE_SPECBENCH": "Spec-Bench's question.jsonl"}


def check_needs() -> dict[str, Path]:
    import torch

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
        raise UserError("the full scale needs " + ", ".join(missing) + "; EAGLE-2 (upper reference) is "
                        "not run by this package")
    return paths


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


def full_recipe(out_dir: Path, seed: int) -> Results:
    paths = check_needs()
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .baselines import make_drafter
    from .core import mean_accepted_length
    from .decode import generate
    from .registry import CLAIMS, DESCRIPTOR

    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
    prompts = specbench_prompts(paths["ESP_DECODE_SPECBENCH"])
    lossless = True
    for var in ("ESP_DECODE_LLAMA3", "ESP_DECODE_QWEN3"):
        tok = AutoTokenizer.from_pretrained(paths[var])
        model = AutoModelForCausalLM.from_pretrained(paths[var], dtype=torch.bfloat16,
                                                     attn_implementation="sdpa").cuda().eval()
        eos = tok.eos_token_id
        ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                       tokenize=True, return_dict=False) for _, p in prompts]
        ref, _ = generate(model, ids, make_drafter("ar"), 128, eos_token_id=eos)
        for batch in (1, 8):
            for name in ("pld", "lade", "stand", "esp", "esp+pld"):
                mal = []
                for i in range(0, len(ids), batch):
                    new, st = generate(model, ids[i: i + batch], make_drafter(name, eos_token_id=eos), 128,
                                       eos_token_id=eos)
                    lossless &= new == ref[i: i + batch]
                    mal += [mean_accepted_length(len(n), s["model_calls"]) for n, s in zip(new, st, strict=True)]
                res.add(f"{var.lower()}/b{batch}", name, "mean_accepted_length", float(np.mean(mal)))
        del model
        torch.cuda.empty_cache()
    from icml26_shared import ClaimCheck

    res.claims.append(ClaimCheck.compare(CLAIMS[0], 1.0 if lossless else 0.0, threshold=1.0,
                                         note="bf16: ties may flip argmax between batched and sequential calls"))
    return res
