"""End to end: a causal LM patched per method; needle (passkey) accuracy, greedy next-token
agreement with dense over the document's second half and the perplexity ratio."""

from __future__ import annotations

import sys
import time

E2E_METHODS = ("unisparse", "xattention", "flexprefill", "minference", "ashape", "oracle")


def log(msg: str) -> None:
    print(f"[unisparse {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tiny_model(seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    return LlamaForCausalLM(cfg).eval(), None


def documents(tok, length: int, n: int, seed: int, offset: int = 0, haystack: str = "varied"):
    """``[(ids, key, (start, end))]``: needle documents at depths spread over [0.1, 0.9]
    (``haystack`` as in ``tasks.needle_prompt``); for the tiny random model (``tok`` None),
    random tokens with a planted span (never retrievable)."""
    import torch

    from .tasks import needle_prompt

    out = []
    for i in range(n):
        depth = 0.1 + 0.8 * (i + 0.5) / n
        if tok is None:
            g = torch.Generator().manual_seed(seed * 1000 + offset + i)
            ids = torch.randint(3, 256, (length,), generator=g).tolist()
            start = int(depth * (length - 16))
            out.append((ids, "00000", (start, start + 8)))
        else:
            out.append(needle_prompt(tok, length, seed * 1000 + offset + i, depth=depth,
                                     haystack=haystack, return_span=True))
    return out


def prefill_and_decode(model, ids, new_tokens: int, keep: int = 0):
    """One prefill (logits of the prompt; of its last ``keep`` positions only when ``keep`` > 0)
    and greedy decoding with the KV cache."""
    import torch

    x = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        out = model(x, use_cache=True, logits_to_keep=keep)
        logits = out.logits[0].float()
        past, nxt, gen = out.cache, logits[-1].argmax(), []
        for _ in range(new_tokens):
            gen.append(int(nxt))
            step = model(nxt.view(1, 1), cache=past, use_cache=True)   # transformers 5: `cache`
            past, nxt = step.cache, step.logits[0, -1].argmax()
    return logits, gen


def correct(tok, gen, key) -> bool:
    if tok is None:
        return False
    from .tasks import is_correct

    return is_correct(tok, gen, key)


def evaluate_model(model, tok, docs, methods, *, block: int, density, new_tokens: int,
                   seed: int = 0) -> dict:
    """Per document: a dense prefill and one patched prefill per method and density (``density``
    a float or a tuple). Returns ``{label: {correct, agree, ppl_ratio, density: [per doc]}}``
    keyed by method, or "method@density" past the first density."""
    import torch

    from .fidelity import arm_config
    from .io import patch, patch_state, unpatch

    densities = (density,) if isinstance(density, (int, float)) else tuple(density)
    runs = [(m, d, m if j == 0 else f"{m}@{d:g}") for j, d in enumerate(densities) for m in methods]
    e2e: dict = {m: {"correct": [], "agree": [], "ppl_ratio": [], "density": []}
                 for m in ("dense", *(r[2] for r in runs))}
    for n_doc, doc in enumerate(docs):
        ids, key = doc[0], doc[1]
        log(f"document {n_doc + 1}/{len(docs)} ({len(ids)} tokens): dense prefill")
        d_logits, d_gen = prefill_and_decode(model, ids, new_tokens)
        half = len(ids) // 2
        tgt = torch.tensor(ids[half + 1:], device=d_logits.device)
        d_nll = torch.nn.functional.cross_entropy(d_logits[half:-1], tgt)
        e2e["dense"]["correct"].append(float(correct(tok, d_gen, key)))
        for m, dens, label in runs:
            log(f"  {m} prefill at density {dens:g}")
            cfg = arm_config(m, block, dens, seed) if m in _ARMS() else None
            patch(model, method=cfg.method if cfg else m, cfg=cfg, density=dens,
                  min_seq_len=2 * block, **({} if cfg else {"block_size": block}))
            try:
                logits, gen = prefill_and_decode(model, ids, new_tokens)
                st = patch_state(model)
                dens_used = sum(st.densities) / max(len(st.densities), 1)
            finally:
                unpatch(model)
            cell = e2e[label]
            cell["density"].append(dens_used)
            cell["correct"].append(float(correct(tok, gen, key)))
            cell["agree"].append(float((logits[half:].argmax(-1) == d_logits[half:].argmax(-1))
                                       .float().mean()))
            nll = torch.nn.functional.cross_entropy(logits[half:-1], tgt)
            cell["ppl_ratio"].append(float(torch.exp(nll - d_nll)))
    return e2e


def _ARMS():  # noqa: N802
    from .fidelity import ARMS

    return ARMS
