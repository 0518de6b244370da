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


def gpu_check(device: str = "cuda", hidden: int = 4096, layers: int = 2, vocab: int = 32000,
              prompt_len: int = 256, tokens: int = 32, seed: int = 0) -> dict:
    """The ≤ 3-minute device check meant for ``CI/gpu-check`` (not wired there by this package):
    bf16 losslessness of every drafter at batch 1 and 8 against our own ``ar`` on a random-init
    Llama-shaped model, and the time of one ESP tree call (default knobs: 1 + 48 nodes + 49 × 4
    masks) over one AR step, measured side by side with ``icml26_shared.eval.compare``. Combined with
    SmolLM2's accepted lengths it projects the throughput ratio: speed-up ≈ accepted length ÷ time ratio."""
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from icml26_shared.eval import compare

    from .baselines import make_drafter
    from .core import Tree, item_positions, item_visibility, tree_attention_mask
    from .decode import generate

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=int(hidden * 3.5),
                      num_hidden_layers=layers, num_attention_heads=hidden // 128,
                      num_key_value_heads=max(1, hidden // 512), max_position_embeddings=4096)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16).eval()
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, vocab, (max(8, prompt_len - 7 * i),), generator=g).tolist() for i in range(8)]
    out: dict = {"lossless": {}}
    for batch in (1, 8):
        ref, _ = generate(model, prompts[:batch], make_drafter("ar"), tokens)
        for name in ("pld", "lade", "stand", "esp", "esp+pld"):
            new, _ = generate(model, prompts[:batch], make_drafter(name), tokens)
            out["lossless"][f"{name}@b{batch}"] = new == ref
    base = model.get_decoder()
    emb = model.get_input_embeddings()

    def step(n_items_tree: bool):
        cache = DynamicCache(config=cfg)
        with torch.no_grad():
            base(input_ids=torch.tensor([prompts[0]], device=device), cache=cache, use_cache=True)
        tree = Tree()
        if n_items_tree:
            for i in range(48):
                tree.add(-1 if i < 8 else (i - 8) // 5, 100 + i)
        hosts = [h for h in [-1, *range(len(tree))] for _ in range(4)] if n_items_tree else []
        vis = item_visibility(0, tree, hosts)
        pos = torch.tensor([item_positions(len(prompts[0]), 0, tree, hosts)], device=device)
        mask = tree_attention_mask([vis], [len(prompts[0])], len(prompts[0]), torch.bfloat16).to(device)
        x = emb(torch.randint(0, vocab, (1, vis.shape[0]), device=device))

        def run():
            with torch.no_grad():
                base(inputs_embeds=x, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
            cache.crop(-vis.shape[0])
        return run

    t = compare({"ar_step": step(False), "esp_tree_call": step(True)}, warmup=3, repeats=20)
    out["tree_call_over_ar_step"] = t["esp_tree_call"].median / t["ar_step"].median
    return out


if __name__ == "__main__":
    import sys

    print(json.dumps(gpu_check(*(sys.argv[1:2] or ["cuda"]))))
