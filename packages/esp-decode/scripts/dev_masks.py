"""Dev-only study of ESP's faithful knobs on SmolLM2 (mask init, top-K, node budget, masks), plus an
independent check of where the masks sit and which logits are read.

    uv run python packages/esp-decode/scripts/dev_masks.py --n-dev 2 --tokens 24 \
        --settings prompt_mean,context_mean,vocab_mean [--independent-probe]

Prompts: the last ``--n-dev`` prompts of each regime (``tasks.split``'s dev side; test prompts are
the first 4 and are never read here). Every setting decodes the dev prompts as one batch through
``generate`` (lossless-checked against ``model.generate``) and prints one JSON line: mean accepted
length (all, per regime), items per call, the root masks' top-1 / top-5 per depth, CPU seconds.

``--independent-probe`` recomputes mask accuracy without the fused loop: for every position t of the
greedy sequence, one plain causal forward of ``sequence[: t + 1] + [mask] * 3`` (default positions,
no tree, no cache), mask j's argmax against the greedy token at t + j + 2 — the loop's probe must
agree with it up to which positions are sampled.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from esp_decode import smol
from esp_decode.config import ESPConfig
from esp_decode.core import mean_accepted_length
from esp_decode.decode import stack_caches
from esp_decode.tasks import REGIMES, split

SETTINGS = {
    "prompt_mean": ESPConfig(attach="top"),
    "context_mean": ESPConfig(attach="top", mask_init="context_mean"),
    "vocab_mean": ESPConfig(attach="top", mask_init="vocab_mean"),
    "prompt_mean_wide": ESPConfig(attach="top", topk=(10, 5, 3, 2), max_nodes=64),
    "prompt_mean_3masks": ESPConfig(attach="top", num_masks=3, topk=(12, 4, 2)),
    "vocab_mean_wide": ESPConfig(attach="top", mask_init="vocab_mean", topk=(10, 5, 3, 2), max_nodes=64),
    "vocab_mean_3masks": ESPConfig(attach="top", mask_init="vocab_mean", num_masks=3, topk=(12, 4, 2)),
    "vocab_mean_all": ESPConfig(attach="all", mask_init="vocab_mean"),
}


def independent_probe(model, prompts, seqs, k=3):
    table = model.get_input_embeddings().weight
    hits: dict[str, list[bool]] = {}
    for p, seq in zip(prompts, seqs, strict=True):
        for init in ("prompt_mean", "vocab_mean"):
            m = table[torch.tensor(p)].mean(0) if init == "prompt_mean" else table.mean(0)
            for t in range(len(p) - 1, len(seq) - 2):
                emb = torch.cat([table[torch.tensor(seq[: t + 1])], m.expand(k, -1)], 0)[None]
                logits = model(inputs_embeds=emb).logits[0, t + 1:]
                for j in range(k):
                    if t + 2 + j >= len(seq):
                        break
                    top5 = logits[j].topk(5).indices.tolist()
                    hits.setdefault(f"{init} top1_depth{j + 1}", []).append(top5[0] == seq[t + 2 + j])
                    hits.setdefault(f"{init} top5_depth{j + 1}", []).append(seq[t + 2 + j] in top5)
    return {key: round(float(np.mean(v)), 3) for key, v in sorted(hits.items())}


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-dev", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--settings", default="prompt_mean,context_mean,vocab_mean")
    ap.add_argument("--independent-probe", action="store_true")
    args = ap.parse_args()
    from icml26_shared.data import load_smollm2

    torch.set_num_threads(1)
    model, tok = load_smollm2()
    model.eval()

    def chat(p):
        return list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))

    dev = [chat(p) for r in REGIMES for p in split(r, args.n_dev, 4)[0]]
    eos = tok.eos_token_id
    caches = [smol.prefill(model, p) for p in dev]
    refs = [smol.hf_greedy(model, p, args.tokens, eos, c) for p, c in zip(dev, caches, strict=True)]
    stacked = stack_caches(model, caches)
    for name in [s for s in args.settings.split(",") if s]:
        t0 = time.process_time()
        new, stats, dr = smol._decode(model, dev, "esp", args.tokens, eos, {"esp": SETTINGS[name], "seed": 0}, stacked)
        mal = [mean_accepted_length(len(n), s["model_calls"]) for n, s in zip(new, stats, strict=True)]
        probe = dr.probe_accuracy([q + n for q, n in zip(dev, new, strict=True)])
        print(json.dumps({
            "setting": name, "lossless": new == refs, "mean_accepted_length": round(float(np.mean(mal)), 3),
            "per_regime": {r: round(float(np.mean(mal[i * args.n_dev: (i + 1) * args.n_dev])), 3)
                           for i, r in enumerate(REGIMES)},
            "items_per_call": round(float(np.mean([np.mean(s["items"][1:]) for s in stats])), 1),
            "probe": {k: round(v, 3) for k, v in probe.items()}, "cpu_s": round(time.process_time() - t0, 1)}),
            flush=True)
    if args.independent_probe:
        t0 = time.process_time()
        out = independent_probe(model, dev, [p + r for p, r in zip(dev, refs, strict=True)])
        print(json.dumps({"independent_probe": out, "cpu_s": round(time.process_time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
