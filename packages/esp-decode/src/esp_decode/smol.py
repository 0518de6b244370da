"""Model B of the reproduction: SmolLM2-135M-Instruct (fp32, CPU, one thread) on chat prompts from
Python's own text. Knobs are chosen on SmolLM2's own dev prompts (disjoint from test); on test every
drafter decodes each regime's prompts as one batch (per-sequence trees in one padded call per step),
timed side by side with ``icml26_shared.eval.compare`` (one round per batch, interleaved), and is
checked token for token against ``model.generate`` at batch 1 (the greedy reference).

Each prompt's prefill (all its tokens but the last) is computed at batch 1 and, stacked into one
padded cache (``decode.stack_caches``), shared by every batched arm (the reference continues its
own copy); each arm's first call (the last prompt token plus the first draft) still counts as its
prefill call.

The work is split in units that either process of the reproduction can run (``jobs``):
``dev_job`` (the dev choice, in the second process, first), ``arms_job`` (one regime's test batch
through every timed arm) and ``refs_job`` (that regime's batch-1 references); ``merge`` joins a
regime's arms and references into the lossless flags.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import replace

import numpy as np
import torch

from icml26_shared import Claim, ClaimCheck
from icml26_shared.eval import compare
from icml26_shared.io import dumps_json

from .baselines import make_drafter
from .config import ESPConfig, LADEConfig, PLDConfig
from .core import mean_accepted_length
from .decode import _cache_kwarg, generate, new_cache, stack_caches

#: An in-run dev grid for SmolLM2 [R] (used only when a config sets ``n_dev`` > 0; quick uses tune's
#: shipped choice instead): masks on the root and the tree's best path (``attach="top"``: about 69
#: items a call), the mask init and the first level's width chosen on dev. On one CPU core a call
#: costs about its item count, so the all-node layout (about 245 items a call) is left out here.
ESP_GRID = (
    ESPConfig(attach="top"),
    ESPConfig(attach="top", mask_init="context_mean"),
    ESPConfig(attach="top", mask_init="vocab_mean"),
    ESPConfig(attach="top", mask_init="vocab_mean", topk=(16, 4, 2, 2)),
)
LADE_GRID = (LADEConfig(ngram=5, window=7, guesses=7), LADEConfig(ngram=3, window=4, guesses=5))
ARMS = ("pld", "lade", "stand", "esp", "esp-nullmask", "esp+pld", "pld@budget")
TIMED = ("ar", *ARMS)   # "ar": our loop with an empty draft, batched like the others
#: batch-1 rows on the full prompt (no shared prefill), timed side by side per prompt: transformers'
#: greedy ``generate`` and prompt lookup (``prompt_lookup_num_tokens=10, max_matching_ngram_size=2``),
#: and our ``pld`` with transformers' settings (10, 2, 1 match), which must make exactly its calls
ANCHORS = ("hf-greedy", "hf-prompt-lookup", "pld-1")
TUNE_DEV = 4   # tune's dev prompts per regime: the last 4 of each ``tasks.full_split`` pool
_PROC: dict = {}        # per process: the loaded model, chat prompts and this process's dev choice


def prefill(model, prompt):
    """The KV cache of ``prompt[:-1]`` (one forward), to be copied into every arm's cache."""
    cache = new_cache(model)
    if len(prompt) > 1:
        with torch.no_grad():
            base = model.get_decoder()
            base(input_ids=torch.tensor([prompt[:-1]]), use_cache=True, **{_cache_kwarg(base): cache})
    return cache


def hf_greedy(model, prompt, tokens, eos, cache=None):
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    kw = {} if cache is None or cache.get_seq_length() == 0 else {_cache_kwarg(model): copy.deepcopy(cache)}
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                         eos_token_id=eos, pad_token_id=eos if eos is not None else 0, **kw)
    new = out[0, len(prompt):].tolist()
    if eos is not None and eos in new:
        new = new[: new.index(eos) + 1]
    return new


def arm_spec(arm: str, esp_cfg: ESPConfig, lade_cfg: LADEConfig, seed: int = 0) -> tuple[str, dict]:
    """(drafter name, keyword arguments) of a timed arm. ``pld@budget`` is ``pld`` given the
    hybrid's node budget (``esp.max_nodes`` nodes, as many matches as fill them), so that
    ``esp+pld`` - ``pld@budget`` isolates what ESP's nodes add beyond more prompt matches."""
    kw = {"esp": esp_cfg, "lade": lade_cfg, "seed": seed}
    if arm == "pld@budget":
        pld = PLDConfig()
        return "pld", {**kw, "pld": replace(pld, max_nodes=esp_cfg.max_nodes,
                                            max_matches=-(-esp_cfg.max_nodes // pld.num_pred))}
    return arm, kw


def _decode(model, prompts, name, tokens, eos, kw, stacked=None):
    """One arm on a batch of prompts (``stacked``: ``stack_caches`` of their prefills, copied)."""
    dr = make_drafter(name, eos_token_id=eos, **kw)
    cache, lengths = (None, None) if stacked is None else (copy.deepcopy(stacked[0]), stacked[1])
    if lengths is not None and max(lengths) == 0:
        cache = lengths = None
    new, stats = generate(model, prompts, dr, tokens, eos_token_id=eos, cache=cache, cache_lengths=lengths)
    return new, stats, dr


def choose(model, prompts, tokens, eos, grid, name, key, seed):
    """The grid point with the best mean accepted length on ``prompts`` (dev, decoded as one batch;
    ties: the first)."""
    caches = [prefill(model, p) for p in prompts]
    refs = [hf_greedy(model, p, tokens, eos, c) for p, c in zip(prompts, caches, strict=True)]
    stacked = stack_caches(model, caches)
    scores = []
    for g in grid:
        new, stats, _ = _decode(model, prompts, name, tokens, eos, {key: g, "seed": seed}, stacked)
        if new != refs:
            raise RuntimeError(f"dev: {name} {g} is not lossless")   # never expected: a bug
        scores.append(float(np.mean([mean_accepted_length(len(n), st["model_calls"])
                                     for n, st in zip(new, stats, strict=True)])))
    return grid[int(np.argmax(scores))], scores


def _setup(c: dict):
    """This process's SmolLM2 (one torch thread) and chat prompts, loaded once."""
    if "model" not in _PROC:
        from transformers.utils import logging as hf_logging

        from icml26_shared.data import load_smollm2

        from .tasks import REGIMES, full_split

        hf_logging.disable_progress_bar()   # no "Loading weights" bar in the reproduction's log

        torch.set_num_threads(1)   # on a shared 2-core box a second thread mostly spins (5x the CPU time)
        model, tok = load_smollm2()
        model.eval()

        def chat(p):
            return list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False))

        dev, test = {}, {}
        for r in REGIMES:
            d, t = full_split(r, TUNE_DEV, c["n_test"])   # test: the pool's start; tune's dev: its end
            dev[r], test[r] = [chat(p) for p in d], [chat(p) for p in t]
        _PROC.update(model=model, eos=tok.eos_token_id, dev=dev, test=test, regimes=REGIMES)
    return _PROC


def dev_job(c: dict, seed: int) -> dict:
    """The settings of every arm: the defaults, i.e. ``tune``'s shipped SmolLM2 choice
    (``tuned_smollm2.json``, made on the dev prompts ``TUNE_DEV``); with ``c["n_dev"]`` > 0, the
    older in-run choice on ``ESP_GRID`` / ``LADE_GRID``."""
    p = _setup(c)
    if not c.get("n_dev"):
        return {"chosen": (ESPConfig(), LADEConfig()),
                "note": f"smollm2: every drafter at tune's shipped SmolLM2 choice (the defaults; tuned_smollm2.json, "
                        f"{TUNE_DEV} dev prompts per regime x 32 tokens, disjoint from test): ESP {ESPConfig()}, "
                        f"LADE {LADEConfig()}, PLD {PLDConfig()}."}
    dev_all = [q for r in p["regimes"] for q in p["dev"][r]]
    esp_cfg, esp_scores = choose(p["model"], dev_all, c["dev_tokens"], p["eos"], ESP_GRID, "esp", "esp", seed)
    lade_cfg, lade_scores = choose(p["model"], dev_all, c["dev_tokens"], p["eos"], LADE_GRID, "lade", "lade", seed)
    note = (f"smollm2: dev ({len(dev_all)} prompts, {c['dev_tokens']} tokens, one batch) chose ESP {esp_cfg} "
            f"(dev mean accepted lengths {np.round(esp_scores, 3).tolist()}) and LADE {lade_cfg} "
            f"({np.round(lade_scores, 3).tolist()}).")
    return {"chosen": (esp_cfg, lade_cfg), "note": note}


def regime_refs(model, prompts, tokens, eos) -> list[list[int]]:
    """The greedy reference of each prompt: ``model.generate`` at batch 1 (after its own prefill)."""
    return [hf_greedy(model, q, tokens, eos, prefill(model, q)) for q in prompts]


def regime_arms(model, prompts, regime, tokens, eos, seed, esp_cfg, lade_cfg, batch=4) -> dict:
    """Every arm in ``TIMED`` on batches of ``batch`` prompts, interleaved by ``compare`` (one round
    per batch); the outputs are kept for the lossless check against ``regime_refs`` (``merge``)."""
    specs = {a: arm_spec(a, esp_cfg, lade_cfg, seed) for a in TIMED}
    rows = {a: {k: [] for k in ("mal", "calls", "new", "tokens", "items")} for a in TIMED}
    timing = {a: {"seconds": [], "tokens": []} for a in TIMED}
    probes = []
    for lo in range(0, len(prompts), batch):
        chunk = prompts[lo: lo + batch]
        stacked = stack_caches(model, [prefill(model, q) for q in chunk])
        out: dict = {}
        fns = {a: lambda a=a, out=out, chunk=chunk, st=stacked: out.__setitem__(
            a, _decode(model, chunk, specs[a][0], tokens, eos, specs[a][1], st)) for a in TIMED}
        t = compare(fns, warmup=0, repeats=1)
        for a in TIMED:
            new, stats, dr = out[a]
            if a == "esp":
                probes.append(dr.probe_accuracy([q + n for q, n in zip(chunk, new, strict=True)]))
            for n, st in zip(new, stats, strict=True):
                rows[a]["mal"].append(mean_accepted_length(len(n), st["model_calls"]))
                rows[a]["calls"].append(st["model_calls"])
                rows[a]["new"].append(n)
                rows[a]["tokens"].append(len(n))
                rows[a]["items"].append(float(np.mean(st["items"][1:])) if len(st["items"]) > 1 else 1.0)
            timing[a]["seconds"].append(t[a].median)
            timing[a]["tokens"].append(sum(len(n) for n in new))
        print("esp-decode smollm2 " + dumps_json({"regime": regime, "batch": len(chunk), **{
            a: [round(float(np.mean(rows[a]["mal"][lo:])), 4), round(t[a].median, 3)] for a in TIMED}}, indent=None),
            file=sys.stderr, flush=True)
    return {"regime": regime, "rows": rows, "timing": timing, "probes": probes}


def _count_calls(model):
    """A counter of the decoder's forward calls (what ``model_calls`` counts), and its undo."""
    base, counter = model.get_decoder(), {"n": 0}
    orig = base.forward

    def counted(*a, **k):
        counter["n"] += 1
        return orig(*a, **k)

    base.forward = counted
    return counter, lambda: base.__dict__.pop("forward", None)


def regime_anchors(model, prompts, regime, tokens, eos) -> dict:
    """``ANCHORS`` on each prompt at batch 1 from the full prompt (no shared prefill: transformers'
    prompt lookup does not continue a prefilled cache correctly), timed side by side per prompt by
    ``compare``: model calls (forward calls of the decoder), mean accepted length, tokens/s."""
    rows = {a: {k: [] for k in ("mal", "calls", "new", "tokens", "seconds")} for a in ANCHORS}
    pad = eos if eos is not None else 0
    counter, undo = _count_calls(model)
    try:
        for q in prompts:
            ids = torch.tensor([q], device=next(model.parameters()).device)
            out: dict = {}

            def hf(a, extra, ids=ids, out=out):
                counter["n"] = 0
                o = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                                   eos_token_id=eos, pad_token_id=pad, **extra)
                new = o[0, ids.shape[1]:].tolist()
                if eos is not None and eos in new:
                    new = new[: new.index(eos) + 1]
                out[a] = (new, counter["n"])

            def ours(q=q, out=out):
                dr = make_drafter("pld", pld=PLDConfig(num_pred=10, max_ngram=2, max_matches=1), eos_token_id=eos)
                new, st = generate(model, [q], dr, tokens, eos_token_id=eos)
                out["pld-1"] = (new[0], st[0]["model_calls"])

            t = compare({"hf-greedy": lambda: hf("hf-greedy", {}),
                         "hf-prompt-lookup": lambda: hf("hf-prompt-lookup", {"prompt_lookup_num_tokens": 10,
                                                                             "max_matching_ngram_size": 2}),
                         "pld-1": ours}, warmup=0, repeats=1)
            for a in ANCHORS:
                new, calls = out[a]
                rows[a]["new"].append(new)
                rows[a]["tokens"].append(len(new))
                rows[a]["calls"].append(calls)
                rows[a]["mal"].append(mean_accepted_length(len(new), calls))
                rows[a]["seconds"].append(t[a].median)
    finally:
        undo()
    return {"regime": regime, "rows": rows}


def merge(arms: dict, refs) -> dict:
    """``regime_arms``' part with each arm's ``lossless`` flags (output == reference, per prompt);
    ``refs``: the references, or ``refs_job``'s part (references + anchors, also flagged)."""
    anchors = None
    if isinstance(refs, dict):
        refs, anchors = refs["refs"], refs.get("anchors")

    def flag(r):
        return {**{k: v for k, v in r.items() if k != "new"},
                "lossless": [n == ref for n, ref in zip(r["new"], refs, strict=True)]}

    out = {**arms, "rows": {a: flag(r) for a, r in arms["rows"].items()}}
    if anchors is not None:
        out["anchors"] = {a: flag(r) for a, r in anchors["rows"].items()}
    return out


def run_regime(model, prompts, regime, tokens, eos, seed, esp_cfg, lade_cfg, batch=4, anchors=False) -> dict:
    """One regime in one piece: the references (and the ``ANCHORS``), then every arm, merged."""
    refs = regime_refs(model, prompts, tokens, eos)
    if anchors:
        refs = {"refs": refs, "anchors": regime_anchors(model, prompts, regime, tokens, eos)}
    return merge(regime_arms(model, prompts, regime, tokens, eos, seed, esp_cfg, lade_cfg, batch), refs)


def arms_job(c: dict, seed: int, regime: str, chosen) -> dict:
    """One regime's test batch through every timed arm, with the dev choice ``chosen``."""
    p = _setup(c)
    esp_cfg, lade_cfg = chosen
    return regime_arms(p["model"], p["test"][regime], regime, c["tokens"], p["eos"], seed, esp_cfg, lade_cfg,
                       c.get("batch", 4))


def refs_job(c: dict, regime: str) -> dict:
    """One regime's batch-1 ``model.generate`` references and its ``ANCHORS`` rows."""
    p = _setup(c)
    refs = regime_refs(p["model"], p["test"][regime], c["tokens"], p["eos"])
    return {"refs": refs, "anchors": regime_anchors(p["model"], p["test"][regime], regime, c["tokens"], p["eos"])}


def collect(res, parts: list[dict], esp_cfg, lade_cfg) -> dict:
    """Rows and the claims' data from the ``run_regime`` parts (one per regime, in order)."""
    regimes = [q["regime"] for q in parts]
    arms = {a: {q["regime"]: q["rows"][a] for q in parts} for a in TIMED}
    probes = [x for q in parts for x in q["probes"]]
    probe = {k: float(np.nanmean([x.get(k, np.nan) for x in probes])) for k in sorted({k for x in probes for k in x})}
    throughput = {a: [n / s for q in parts for n, s in zip(q["timing"][a]["tokens"], q["timing"][a]["seconds"],
                                                          strict=True)] for a in TIMED}
    for a, by in arms.items():
        for regime in (*regimes, "all"):
            sel = regimes if regime == "all" else [regime]
            res.add(f"smollm2/{regime}", a, "mean_accepted_length", [v for r in sel for v in by[r]["mal"]],
                    unit="tokens/call")
            res.add(f"smollm2/{regime}", a, "model_calls", [v for r in sel for v in by[r]["calls"]])
        res.add("smollm2/all", a, "lossless_fraction", float(np.mean([x for r in regimes for x in by[r]["lossless"]])))
        res.add("smollm2/timing", a, "throughput_tokens_per_s", throughput[a], unit="tokens/s")
        res.add("smollm2/timing", a, "items_per_call", [v for r in regimes for v in by[r]["items"]])
    for k, v in probe.items():
        res.add("smollm2/all", "esp", f"probe_{k}", v)
    accepted = {a: {"mean_accepted_length": float(np.mean([v for r in regimes for v in arms[a][r]["mal"]])),
                    "items_per_call": float(np.mean([v for r in regimes for v in arms[a][r]["items"]]))}
                for a in arms}
    res.notes.append("smollm2: tokens/s from icml26_shared.eval.compare, one round per test batch (a regime's "
                     "prompts in one padded call per step) with every arm interleaved (1 torch thread, shared "
                     "CPU; 'ar' = the same loop with an empty draft); losslessness against transformers' greedy "
                     "model.generate at batch 1.")
    anchors = {a: {q["regime"]: q["anchors"][a] for q in parts} for a in ANCHORS} if all(
        "anchors" in q for q in parts) else None
    if anchors:
        for a, by in anchors.items():
            for regime in (*regimes, "all"):
                sel = regimes if regime == "all" else [regime]
                res.add(f"smollm2/{regime}", a, "mean_accepted_length", [v for r in sel for v in by[r]["mal"]],
                        unit="tokens/call")
                res.add(f"smollm2/{regime}", a, "model_calls", [v for r in sel for v in by[r]["calls"]])
            res.add("smollm2/all", a, "lossless_fraction",
                    float(np.mean([x for r in regimes for x in by[r]["lossless"]])))
            res.add("smollm2/anchors-timing", a, "throughput_tokens_per_s",
                    [t / max(sec, 1e-9) for r in regimes for t, sec in zip(by[r]["tokens"], by[r]["seconds"],
                                                                           strict=True)], unit="tokens/s")
        ours, theirs = ([c for r in regimes for c in anchors[k][r]["calls"]] for k in ("pld-1", "hf-prompt-lookup"))
        res.claims.append(ClaimCheck.compare(
            Claim("pld_1_match_calls", "our pld at transformers' settings (10, 2, 1 match) makes exactly "
                  "transformers' prompt-lookup calls on every SmolLM2 test prompt", "fraction_equal", "higher",
                  kind="check", source="issue 46 item 6"),
            float(np.mean([a == b for a, b in zip(ours, theirs, strict=True)])), threshold=1.0,
            note=f"{sum(a == b for a, b in zip(ours, theirs, strict=True))} of {len(ours)} prompts equal; calls "
                 f"pld-1 {sum(ours)}, transformers' prompt lookup {sum(theirs)} (batch 1, full prompt)"))
        res.notes.append("smollm2 anchors (batch 1, each prompt decoded from its full prompt, no shared prefill, "
                         "timed side by side per prompt): hf-greedy = transformers' greedy generate, "
                         "hf-prompt-lookup = generate(prompt_lookup_num_tokens=10, max_matching_ngram_size=2), "
                         "pld-1 = our pld at the same settings (1 match); their tokens/s are not comparable with "
                         "the batched arms' (prefill included, batch 1).")
    return {"esp_cfg": str(esp_cfg), "lade_cfg": str(lade_cfg), "arms": arms, "regimes": regimes, "anchors": anchors,
            "lossless_all": all(x for a in TIMED for r in regimes for x in arms[a][r]["lossless"]),
            "throughput": throughput, "accepted": accepted, "probe": probe}
