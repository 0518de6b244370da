"""The reproduction: (a) a tiny character LM trained in-process on three regimes; (b) SmolLM2-135M-
Instruct on chat prompts from Python's own text. Every drafter decodes greedily, is checked token
for token against ``model.generate``, and is scored by mean accepted length on the same prompts.

Splits: knobs (ESP masks × top-K, LADE window) are chosen on dev prompts; claims use test prompts.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from icml26_shared import ClaimCheck, Results
from icml26_shared.eval import paired_interval
from icml26_shared.io import write_json
from icml26_shared.runner import check_scale

from .baselines import make_drafter
from .config import ESPConfig, LADEConfig
from .core import mean_accepted_length, ratio_interval
from .decode import generate
from .registry import CLAIMS, DESCRIPTOR

CFG = {
    "smoke": dict(tiny=dict(d=32, layers=2, seconds=5, steps=3, n_test=1, n_dev=1, tokens=6, dev_tokens=6,
                            mask_steps=2, grid=1, threads=1), smol=None),
    # tiny LM: a fixed 640 steps, the learned mask 160, on one thread (240 CPU-s is a reported budget, not a stop),
    # chosen on held-out loss (STEPS_CHOICE); 16 test prompts x 64 tokens per regime; SmolLM2: every drafter at tune's shipped choice (no dev run here), 10 test prompts per regime x 32
    # tokens from the start of tasks.full_split's pools (tune's dev prompts are their end), batches of 5.
    # Two one-thread processes share the work units (jobs.py).
    "quick": dict(tiny=dict(d=128, layers=4, seconds=240, steps=640, n_test=16, n_dev=4, tokens=64,
                            dev_tokens=32, mask_steps=160, grid=None, threads=1),
                  smol=dict(n_dev=0, n_test=10, tokens=32, batch=5)),
}
#: How quick's step counts were chosen (docs/experiments.md, "Step counts"): train for 160 steps, then
#: double until the held-out loss gains < 1 % over the last 20 % of the steps, capped at 640 (the dev
#: run's CPU budget); the learned mask the same, from 160, on the chosen tiny LM.
STEPS_CHOICE = ("step counts chosen on held-out loss by a dev run (rule: < 1 % gain over the last 20 % of the "
                "steps; from 160, doubling, cap 640): tiny LM 160 -> 6.75 %, 320 -> 7.40 %, 640 -> 5.76 %: "
                "the cap, 640, NOT converged by the rule (over the dev budget); learned mask 160 -> -0.48 %: 160.")
ESP_GRID = (ESPConfig(num_masks=4, topk=(8, 4, 2, 2)), ESPConfig(num_masks=3, topk=(4, 2, 2)),
            ESPConfig(num_masks=4, topk=(4, 2, 2, 2), max_nodes=24))
LADE_GRID = (LADEConfig(ngram=5, window=7, guesses=7), LADEConfig(ngram=3, window=5, guesses=7))
DRAFTERS = ("ar", "pld", "lade", "stand", "esp", "esp+pld")


def run_drafter(model, prompts, name, tokens, refs, batch, eos=None, **kw):
    """Decode ``prompts`` in batches; returns per-prompt mean accepted length, calls and a
    lossless flag (output == reference greedy decoding)."""
    mal, calls, same, probe = [], [], [], []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i: i + batch]
        dr = make_drafter(name, eos_token_id=eos, **kw)
        new, stats = generate(model, chunk, dr, tokens, eos_token_id=eos)
        for j, (n, st) in enumerate(zip(new, stats, strict=True)):
            mal.append(mean_accepted_length(len(n), st["model_calls"]))
            calls.append(st["model_calls"])
            same.append(n == refs[i + j])
        if hasattr(dr, "probe_log") or hasattr(getattr(dr, "esp", None), "probe_log"):
            esp = dr if hasattr(dr, "probe_log") else dr.esp
            probe.append(esp.probe_accuracy([c + n for c, n in zip(chunk, new, strict=True)]))
    return dict(mal=mal, calls=calls, lossless=same, probe=_merge_probe(probe))


def _merge_probe(parts):
    if not parts:
        return None
    keys = parts[0].keys()
    return {k: float(np.mean([p[k] for p in parts if not np.isnan(p[k])] or [np.nan])) for k in keys}


def greedy_refs(model, prompts, tokens, eos=None):
    out = []
    for p in prompts:
        ids = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             max_new_tokens=tokens, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos if eos is not None else 0)
        new = ids[0, len(p):].tolist()
        if eos is not None and eos in new:
            new = new[: new.index(eos) + 1]
        out.append(new)
    return out


def _choose(model, dev, tokens, refs, grid, name, batch, eos=None, key="esp"):
    """The grid point with the best dev mean accepted length (ties: the first)."""
    scores = [float(np.mean(run_drafter(model, dev, name, tokens, refs, batch, eos, **{key: g})["mal"]))
              for g in grid]
    return grid[int(np.argmax(scores))], scores


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    if scale == "full":
        from .gpu import full_recipe

        return full_recipe(Path(out_dir), seed)
    from . import jobs

    cfg = CFG[scale]
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    pool = mgr = tasks = None
    try:
        job = None
        if cfg["smol"]:   # a second process (one thread each: no OpenMP spinning), see jobs.py
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            from .tasks import REGIMES as SMOL_REGIMES

            ctx = multiprocessing.get_context("spawn")
            mgr = ctx.Manager()
            tasks, news = mgr.Queue(), mgr.Queue()
            for unit in jobs.smol_units(SMOL_REGIMES):
                tasks.put(unit)
            pool = ProcessPoolExecutor(1, mp_context=ctx)
            job = pool.submit(jobs.worker, cfg["smol"], seed, tasks, news)
        t0 = time.process_time()
        prep = _tiny_prep(res, cfg["tiny"], seed)
        log = [("tiny LM: train + learned mask + dev + references", round(time.process_time() - t0, 1))]
        units = jobs.tiny_units(prep)
        smol = None
        if job is None:
            parts = {u[:2]: jobs.run_unit(u, None, seed) for u in units}
        else:
            for unit in units:
                tasks.put(unit)
            for _ in range(2):
                tasks.put(jobs.STOP)
            dev = _dev_result(news, job)
            mine, more = jobs.drain(tasks, cfg["smol"], seed, dev["chosen"])
            theirs = job.result()
            parts = {**theirs["parts"], **mine}
            res.notes.append(dev["note"])
            res.notes.append(f"CPU time (user + sys, imports included): main process {jobs.cpu_seconds():.0f} CPU-s "
                             f"({log + more}); second process {theirs['cpu_s']:.0f} CPU-s ({theirs['log']}).")
        tiny = _strip(_tiny_collect(res, prep, {k[1]: v for k, v in parts.items() if k[0] == "tiny"}))
        if job is not None:
            smol = _smol_collect(res, parts, SMOL_REGIMES, dev["chosen"])
    except BaseException:
        if tasks is not None:   # leave the second process nothing more to start
            jobs.stop(tasks)
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if mgr is not None:
            mgr.shutdown()
        torch.set_num_threads(threads)
    _claims(res, smol or tiny, "smollm2" if smol else "tiny")
    for data, exp in ((tiny, "tiny"), (smol, "smollm2")):
        if data:
            _ratios(res, data, exp)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "per_prompt.json", {"tiny": tiny, "smollm2": smol}, indent=None, default=float)
    res.figures.append("per_prompt.json")
    if smol:
        write_json(out_dir / "smollm2_accepted.json",
                   {"_source": f"esp-decode {DESCRIPTOR.version} reproduce --scale quick --seed {seed} (SmolLM2 test prompts)",
                    "drafters": smol["accepted"]}, indent=1)
        res.figures.append("smollm2_accepted.json")
    res.notes += [
        "Mean accepted length = (new tokens - 1) / (model calls - 1), prefill included in the calls; "
        "every drafter shares one verifier and one fused call per step.",
        "ESP's loop (fused bonus/tree/mask call, tree pruning, mask attachment, defaults) is OUR "
        "RECONSTRUCTION [R] from the abstract; LADE is Lookahead's 2-D window after its jacobi_greedy_search_multilevel "
        "[C, our code]; STAND is our own re-implementation [R]; PLD "
        "follows transformers' prompt lookup [C].",
        "Splits: ESP knobs (num_masks x top-K x node budget) and the LADE window were chosen on dev "
        "prompts (disjoint from test) by mean accepted length; every figure and claim is on test.",
        "CPU tokens/s are not GPU throughput; `python -m esp_decode.gpu_check --accepted "
        "smollm2_accepted.json` projects the GPU ratio from these accepted lengths.",
    ]
    return res


def _smol_collect(res, parts, regimes, chosen):
    """SmolLM2's rows and claim data from the units' parts (each regime's arms and references)."""
    from .smol import collect, merge

    return collect(res, [merge(parts[("arms", r)], parts[("refs", r)]) for r in regimes], *chosen)


def _dev_result(news, job):
    """The second process's dev choice, or its error if it failed before making one."""
    import queue

    while True:
        try:
            return news.get(timeout=2.0)
        except queue.Empty:
            if job.done():
                job.result()   # raises the worker's error
                raise RuntimeError("the SmolLM2 process ended without a dev choice") from None


def _tiny_prep(res, c, seed) -> dict:
    """Train the tiny LM, learn the mask ablation's vector, choose ESP's and LADE's knobs on dev and
    compute the test references; the test arms are left as units (``jobs.tiny_units``)."""
    from .tiny import REGIMES, last_gain, learn_mask, tiny_prompts, train_tiny

    torch.set_num_threads(c["threads"])
    model, tok, info = train_tiny(seed, c["seconds"], c["steps"], d=c["d"], layers=c["layers"],
                                  eval_every=max(1, c["steps"] // 10))
    torch.set_num_threads(1)
    res.add("tiny", "train", "final_loss", info["final_loss"])
    res.add("tiny", "train", "steps", info["steps"])
    cv = info["curve"]
    res.add_curve("tiny", "tiny LM", "train loss", cv["steps"], cv["train"], "train", seed=seed,
                  direction="lower", budget=c["steps"])
    res.add_curve("tiny", "tiny LM", "held-out loss", cv["steps"], cv["heldout"], "dev", seed=seed,
                  direction="lower", budget=c["steps"])
    res.notes.append(f"tiny LM: {c['layers']} layers, d={c['d']}, trained a fixed {info['steps']} steps "
                     f"({info['seconds']:.0f} s wall, {info['cpu_seconds']:.0f} CPU-s on {c['threads']} threads), "
                     f"final loss {info['final_loss']:.3f}, held-out {cv['heldout'][-1]:.3f}"
                     + (f"; OVER the {c['seconds']} CPU-s budget (the model is unchanged: no time stop)."
                        if info["over_budget"] else "."))
    dev = {r: [tok.encode(p) for p in tiny_prompts(r, c["n_dev"], seed + 1000)] for r in REGIMES}
    test = {r: [tok.encode(p) for p in tiny_prompts(r, c["n_test"], seed)] for r in REGIMES}
    k = max(g.num_masks for g in ESP_GRID)
    minfo: dict = {}
    learned = learn_mask(model, tok, seed, c["mask_steps"], k, eval_every=max(1, c["mask_steps"] // 10), info=minfo)
    mv = minfo["curve"]
    res.add_curve("tiny", "learned mask", "train loss", mv["steps"], mv["train"], "train", seed=seed,
                  direction="lower", budget=c["mask_steps"])
    res.add_curve("tiny", "learned mask", "held-out loss", mv["steps"], mv["heldout"], "dev", seed=seed,
                  direction="lower", budget=c["mask_steps"])
    gains = {"tiny LM": last_gain(cv), "learned mask": last_gain(mv)}
    for what, g in gains.items():
        res.add("tiny", what, "heldout_gain_last_20pct", g)
    res.notes.append(f"tiny: {STEPS_CHOICE} This run's held-out loss gain over the last 20 % of the fixed steps: "
                     + ", ".join(f"{w} {g:.2%}" + ("" if g < 0.01 else " (NOT < 1 %: not converged by the criterion)")
                                 for w, g in gains.items()) + ".")
    batch = 8
    dev_all = [p for r in REGIMES for p in dev[r]]
    dev_refs = greedy_refs(model, dev_all, c["dev_tokens"])
    esp_cfg, esp_scores = _choose(model, dev_all, c["dev_tokens"], dev_refs, ESP_GRID[:c["grid"]], "esp", batch)
    lade_cfg, lade_scores = _choose(model, dev_all, c["dev_tokens"], dev_refs, LADE_GRID[:c["grid"]], "lade", batch,
                                    key="lade")
    res.notes.append(f"tiny: dev chose ESP {esp_cfg} (dev mean accepted lengths "
                     f"{np.round(esp_scores, 3).tolist()}) and LADE {lade_cfg} ({np.round(lade_scores, 3).tolist()}).")
    base = {"esp": esp_cfg, "lade": lade_cfg, "seed": seed}
    arms = {name: {"name": name, **base} for name in DRAFTERS}
    arms["esp-chain"] = {**base, "name": "esp", "esp": replace(esp_cfg, shape="chain")}
    arms["esp-vocab_mean"] = {**base, "name": "esp", "esp": replace(esp_cfg, mask_init="vocab_mean")}
    # the mechanism removed, same run: same tree, probes and items, mask slots at the pad embedding
    arms["esp-nullmask"] = {**base, "name": "esp", "esp": replace(esp_cfg, mask_init="pad")}
    arms["esp-learned"] = {**base, "name": "esp", "esp": replace(esp_cfg, mask_init="learned"),
                           "mask_embedding": learned}
    allp = [p for r in REGIMES for p in test[r]]       # all regimes in one batched run per arm
    return {"key": f"tiny-{seed}-{c['d']}-{c['layers']}", "state": model.state_dict(),
            "model_args": {"vocab": tok.vocab_size, "d": c["d"], "layers": c["layers"], "seed": seed},
            "prompts": allp, "refs": greedy_refs(model, allp, c["tokens"]), "tokens": c["tokens"], "batch": batch,
            "arms": arms, "regimes": list(REGIMES), "counts": [len(test[r]) for r in REGIMES],
            "_esp": esp_cfg, "_lade": lade_cfg}


def _tiny_collect(res, prep, outs: dict) -> dict:
    """Rows of every tiny-LM arm (``outs``: arm -> ``run_drafter`` output), per regime and overall."""
    regimes, exp = prep["regimes"], "tiny"
    bounds = np.cumsum([0, *prep["counts"]])
    data: dict = {}
    for arm in prep["arms"]:
        out = outs[arm]
        for i, regime in enumerate(regimes):
            lo, hi = bounds[i], bounds[i + 1]
            data.setdefault(arm, {})[regime] = dict(mal=out["mal"][lo:hi], calls=out["calls"][lo:hi],
                                                    lossless=out["lossless"][lo:hi], probe=out["probe"])
    for arm, by in data.items():
        allv = [v for r in regimes for v in by[r]["mal"]]
        for regime in (*regimes, "all"):
            vals = allv if regime == "all" else by[regime]["mal"]
            calls = [c for r in regimes for c in by[r]["calls"]] if regime == "all" else by[regime]["calls"]
            res.add(f"{exp}/{regime}", arm, "mean_accepted_length", vals, unit="tokens/call")
            res.add(f"{exp}/{regime}", arm, "model_calls", calls)
        lossless = [x for r in regimes for x in by[r]["lossless"]]
        res.add(f"{exp}/all", arm, "lossless_fraction", float(np.mean(lossless)))
        if by[regimes[0]]["probe"]:
            for k, v in by[regimes[0]]["probe"].items():
                res.add(f"{exp}/all", arm, f"probe_{k}", v)
    return {"esp_cfg": str(prep["_esp"]), "lade_cfg": str(prep["_lade"]), "arms": data, "regimes": list(regimes),
            "lossless_all": all(x for by in data.values() for r in regimes for x in by[r]["lossless"])}


def _ratios(res, data, exp) -> None:
    """ESP ÷ every other arm (and ``esp+pld`` ÷ ``pld@budget``, ``esp`` − ``esp-nullmask``), per
    regime and overall, with paired 95 % intervals over the prompts (rows ``{exp}/ratios``)."""
    arms, regimes = dict(data["arms"]), data["regimes"]
    arms.update(data.get("anchors") or {})

    def vals(arm, regime):
        return np.array([v for r in (regimes if regime == "all" else [regime]) for v in arms[arm][r]["mal"]])

    pairs = [("esp", a) for a in arms if a != "esp"]
    pairs += [("esp+pld", "pld@budget")] if "pld@budget" in arms else []
    for regime in (*regimes, "all"):
        for ours, theirs in pairs:
            a, b = vals(ours, regime), vals(theirs, regime)
            r, lo, hi = ratio_interval(a, b)
            d = paired_interval(a, b)
            res.add(f"{exp}/ratios/{regime}", f"{ours} / {theirs}", "ratio_mean_accepted_length", r,
                    interval=[lo, hi], difference=float(np.mean(a - b)), difference_interval=[d.low, d.high],
                    prompts=int(a.size))


def _strip(out):
    return {k: v for k, v in out.items() if not k.startswith("_")}


def _claims(res, data, exp, lossless_note=None):
    arms, regimes = data["arms"], data["regimes"]

    def vals(arm, regime):
        return np.array([v for r in regimes for v in arms[arm][r]["mal"]] if regime == "all" else arms[arm][regime]["mal"])

    claim = {c.id: c for c in CLAIMS}
    res.claims.append(ClaimCheck.compare(
        claim["lossless"], 1.0 if data["lossless_all"] else 0.0, threshold=1.0,
        note=lossless_note or f"{exp}: every drafter and ablation vs model.generate (greedy, fp32) on every test prompt"))
    open_regime = "open" if exp == "smollm2" else "grammar"

    def better(regime):
        return max(("pld", "lade"), key=lambda a: float(vals(a, regime).mean()))

    rows = (("esp_vs_best_ngram", "all", "esp", None, 1.1), ("esp_vs_pld", "all", "esp", "pld", 1.1),
            ("esp_vs_lade", "all", "esp", "lade", 1.1), ("esp_open_ended", open_regime, "esp", None, 1.1),
            ("esp_open_vs_pld", open_regime, "esp", "pld", 1.1), ("esp_open_vs_lade", open_regime, "esp", "lade", 1.1),
            ("hybrid_vs_best_ngram", "all", "esp+pld", None, 1.15))
    for cid, regime, arm, against, factor in rows:
        best = against or better(regime)
        ours, base = vals(arm, regime), vals(best, regime)
        iv = paired_interval(ours, factor * base)
        r, r_lo, r_hi = ratio_interval(ours, base)
        res.claims.append(ClaimCheck.compare(
            claim[cid], float(ours.mean()), float(factor * base.mean()), f"{factor} x {best}", interval=(iv.low, iv.high),
            note=f"{exp}/{regime}: {arm} {ours.mean():.3f} vs {best} {base.mean():.3f}: ratio {r:.3f} (paired 95% "
                 f"interval [{r_lo:.3f}, {r_hi:.3f}]); paired 95% interval of {arm} - {factor} x {best} over "
                 f"{len(ours)} prompts: [{iv.low:+.3f}, {iv.high:+.3f}]"
                 + ("" if against else f" ({best} is the better of pld {vals('pld', regime).mean():.3f} and lade "
                    f"{vals('lade', regime).mean():.3f})")
                 + "".join(f"; {a} {vals(a, regime).mean():.3f}" for a in ("esp-nullmask", "esp-chain", "esp-vocab_mean", "esp-learned")
                           if a in arms)))
    tps = data.get("throughput")
    if tps:
        base = ("pld", "lade", "stand")
        best = max(base, key=lambda a: float(np.mean(tps[a])))
        ours, theirs = np.array(tps["esp"]), np.array(tps[best])
        iv = paired_interval(ours, 1.15 * theirs)
        ratio = float(ours.mean() / theirs.mean())
        res.claims.append(ClaimCheck.compare(
            claim["throughput"], ratio, 1.15, f"1.15 x {best} (tokens/s ratio target)", interval=(iv.low / theirs.mean(),
                                                                                      iv.high / theirs.mean()),
            note=f"CPU tokens/s (1 torch thread, shared machine, compare one round per batch of a regime's prompts): "
                 f"esp {ours.mean():.2f}, "
                 f"best baseline {best} {theirs.mean():.2f}, " + ", ".join(f"{a} {np.mean(tps[a]):.2f}" for a in tps)
                 + f"; ratio esp/{best} {ratio:.3f}; paired 95% interval of esp - 1.15 x {best} over "
                 f"{len(ours)} batches [{iv.low:+.2f}, {iv.high:+.2f}] tokens/s. GPU: see gpu_check's projection."))
    else:
        res.claims.append(ClaimCheck.compare(claim["throughput"], None, note=f"{exp}: no timing at this scale"))
