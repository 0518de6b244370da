"""Model B of the reproduction: SmolLM2-135M-Instruct (fp32, CPU) on chat prompts from Python's own
text. Knobs are chosen on SmolLM2's own dev prompts (disjoint from test); on test every drafter
decodes every prompt, timed side by side with ``icml26_shared.eval.compare`` (one round per prompt,
interleaved), and is checked token for token against ``model.generate`` (which is also the timed
``ar`` arm).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from icml26_shared.eval import compare

from .baselines import make_drafter
from .config import ESPConfig, LADEConfig
from .core import mean_accepted_length
from .decode import generate

#: SmolLM2's dev grid [R]: on 2 CPU cores a call costs about its item count, so every point keeps
#: the call small (masks on the root and the best path, or on every node of a 16-node tree); the
#: default layout (245 items a call) is measured on the tiny LM and in the GPU check instead.
ESP_GRID = (
    ESPConfig(num_masks=3, topk=(4, 2, 2), max_nodes=16, attach="top"),
    ESPConfig(num_masks=4, topk=(8, 4, 2, 2), max_nodes=32, attach="top"),
    ESPConfig(num_masks=3, topk=(4, 2, 2), max_nodes=16, attach="top", mask_init="context_mean"),
    ESPConfig(num_masks=2, topk=(8, 2), max_nodes=16, attach="all"),
)
LADE_GRID = (LADEConfig(ngram=5, window=7, guesses=7), LADEConfig(ngram=3, window=4, guesses=5))
ARMS = ("pld", "lade", "stand", "esp", "esp+pld")


def hf_greedy(model, prompt, tokens, eos):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                         eos_token_id=eos, pad_token_id=eos if eos is not None else 0)
    new = out[0, len(prompt):].tolist()
    if eos is not None and eos in new:
        new = new[: new.index(eos) + 1]
    return new


def _decode(model, prompt, name, tokens, eos, kw):
    dr = make_drafter(name, eos_token_id=eos, **kw)
    new, stats = generate(model, [prompt], dr, tokens, eos_token_id=eos)
    return new[0], stats[0], dr


def choose(model, prompts, tokens, eos, grid, name, key, seed):
    """The grid point with the best mean accepted length on ``prompts`` (dev; ties: the first)."""
    refs = [hf_greedy(model, p, tokens, eos) for p in prompts]
    scores = []
    for g in grid:
        vals = []
        for p, ref in zip(prompts, refs, strict=True):
            new, st, _ = _decode(model, p, name, tokens, eos, {key: g, "seed": seed})
            if new != ref:
                raise RuntimeError(f"dev: {name} {g} is not lossless")   # never expected: a bug
            vals.append(mean_accepted_length(len(new), st["model_calls"]))
        scores.append(float(np.mean(vals)))
    return grid[int(np.argmax(scores))], scores


def run_smollm2(res, c: dict, seed: int) -> dict:
    from icml26_shared.data import load_smollm2

    from .tasks import REGIMES, split

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    try:
        model, tok = load_smollm2()
        model.eval()
        eos = tok.eos_token_id

        def chat(p):
            return list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False))

        dev, test = {}, {}
        for r in REGIMES:
            d, t = split(r, c["n_dev"], c["n_test"])
            dev[r], test[r] = [chat(p) for p in d], [chat(p) for p in t]
        dev_all = [p for r in REGIMES for p in dev[r]]
        esp_cfg, esp_scores = choose(model, dev_all, c["dev_tokens"], eos, ESP_GRID, "esp", "esp", seed)
        lade_cfg, lade_scores = choose(model, dev_all, c["dev_tokens"], eos, LADE_GRID, "lade", "lade", seed)
        res.notes.append(f"smollm2: dev ({len(dev_all)} prompts, {c['dev_tokens']} tokens) chose ESP {esp_cfg} "
                         f"(dev mean accepted lengths {np.round(esp_scores, 3).tolist()}) and LADE {lade_cfg} "
                         f"({np.round(lade_scores, 3).tolist()}).")
        return _test(res, model, test, REGIMES, c["tokens"], eos, seed, esp_cfg, lade_cfg)
    finally:
        torch.set_num_threads(threads)


def _test(res, model, test, regimes, tokens, eos, seed, esp_cfg, lade_cfg):
    kw = {"esp": esp_cfg, "lade": lade_cfg, "seed": seed}
    arms: dict = {a: {r: {k: [] for k in ("mal", "calls", "lossless", "seconds", "tokens", "items")}
                      for r in regimes} for a in ("ar", *ARMS)}
    probes = []
    for regime in regimes:
        for p in test[regime]:
            out: dict = {}
            fns = {"ar": lambda p=p, out=out: out.__setitem__("ar", hf_greedy(model, p, tokens, eos))}
            for a in ARMS:
                fns[a] = lambda a=a, p=p, out=out: out.__setitem__(a, _decode(model, p, a, tokens, eos, kw))
            t = compare(fns, warmup=0, repeats=1)
            ref = out["ar"]
            for a in ("ar", *ARMS):
                row = arms[a][regime]
                if a == "ar":
                    new, calls, items = ref, len(ref), [1] * len(ref)
                else:
                    new, st, dr = out[a]
                    calls, items = st["model_calls"], st["items"]
                    if a == "esp":
                        probes.append(dr.probe_accuracy([p + new]))
                row["mal"].append(mean_accepted_length(len(new), calls))
                row["calls"].append(calls)
                row["lossless"].append(new == ref)
                row["seconds"].append(t[a].median)
                row["tokens"].append(len(new))
                row["items"].append(float(np.mean(items[1:])) if len(items) > 1 else 1.0)
    probe = {k: float(np.nanmean([q.get(k, np.nan) for q in probes])) for k in sorted({k for q in probes for k in q})}
    for a, by in arms.items():
        for regime in (*regimes, "all"):
            sel = list(regimes) if regime == "all" else [regime]
            vals = [v for r in sel for v in by[r]["mal"]]
            res.add(f"smollm2/{regime}", a, "mean_accepted_length", vals, unit="tokens/call")
            res.add(f"smollm2/{regime}", a, "model_calls", [v for r in sel for v in by[r]["calls"]])
        res.add("smollm2/all", a, "lossless_fraction", float(np.mean([x for r in regimes for x in by[r]["lossless"]])))
        tps = [n / s for r in regimes for n, s in zip(by[r]["tokens"], by[r]["seconds"], strict=True)]
        res.add("smollm2/timing", a, "throughput_tokens_per_s", tps, unit="tokens/s")
        res.add("smollm2/timing", a, "items_per_call", [v for r in regimes for v in by[r]["items"]])
    for k, v in probe.items():
        res.add("smollm2/all", "esp", f"probe_{k}", v)
    throughput = {a: [n / s for r in regimes for n, s in zip(arms[a][r]["tokens"], arms[a][r]["seconds"], strict=True)]
                  for a in arms}
    accepted = {a: {"mean_accepted_length": float(np.mean([v for r in regimes for v in arms[a][r]["mal"]])),
                    "items_per_call": float(np.mean([v for r in regimes for v in arms[a][r]["items"]]))}
                for a in arms}
    res.notes.append("smollm2: tokens/s from icml26_shared.eval.compare, one round per test prompt with every "
                     "drafter interleaved (2 torch threads, shared CPU); 'ar' is transformers' greedy "
                     "model.generate, which is also the losslessness reference.")
    return {"esp_cfg": str(esp_cfg), "lade_cfg": str(lade_cfg), "arms": arms, "regimes": list(regimes),
            "lossless_all": all(x for a in ARMS for r in regimes for x in arms[a][r]["lossless"]),
            "throughput": throughput, "accepted": accepted, "probe": probe}
