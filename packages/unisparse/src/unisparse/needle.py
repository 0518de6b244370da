"""The end-to-end needle study: every layer of a causal LM patched per method, passkey accuracy
over many documents with 95% intervals and the paired interval of each method minus dense.

Per document one dense prefill (the control) and one patched prefill per method. Budgets are
matched *per layer and document*: UniSparse runs first at the nominal density and its measured
density of each layer becomes the budget of the threshold baselines (XAttention, FlexPrefill,
MInference) in that layer, so that none spends more blocks than UniSparse did. A-shape and the
oracle use the nominal row budget, as in the fidelity study. MInference's per-head patterns of
every layer are searched on a dev document (other seed) before any test document is read.
Documents are split over ``workers`` processes (spawned, one torch thread each).
"""

from __future__ import annotations

import time

#: the arms after dense, in run order (UniSparse first: its densities set the matched budgets);
#: then ablations (0.3.4): UniSparse without the answer-row pass (0.3.3's rule) and the
#: answer-row pass on A-shape's scores (no composite-token estimate); last (0.3.5) the estimator
#: baselines with the same answer rows (``baseline_answer_rows``)
NEEDLE_METHODS = ("unisparse", "xattention", "flexprefill", "minference", "ashape", "oracle",
                  "unisparse_no_answer", "ashape_answer", "xattention_answer",
                  "flexprefill_answer", "minference_answer")


def load(spec: str, dtype: str = "fp32", seed: int = 0):
    """``(model, tokenizer)``: ``"tiny"`` (random 2-layer Llama, no tokenizer), ``"smollm2"`` or
    a local Hugging Face folder."""
    if spec == "tiny":
        from .e2e import tiny_model

        return tiny_model(seed)
    from .io import load_model

    return load_model(spec, dtype)


def dev_patterns(model, tok, *, length: int, block: int, density: float, seed: int,
                 haystack: str = "varied") -> dict:
    """MInference's offline search [C] on one dev document: ``{layer: per-head patterns}``."""
    from .baselines import search_minference
    from .e2e import documents
    from .fidelity import arm_config, capture

    ids = documents(tok, length, 1, seed, offset=500, haystack=haystack)[0][0]
    layers = range(model.config.num_hidden_layers)
    caps = capture(model, ids, layers)
    cfg = arm_config("minference", block, density, seed)
    return {layer: search_minference([(q, k)], cfg) for layer, (q, k, _v) in caps.items()}


def prefill_decode(model, ids, new_tokens: int, keep: int = 64):
    """Greedy decoding after one prefill; the logits of the last ``keep`` prompt positions only
    (the lm-head over the whole prompt would cost a fifth of a 1k-token prefill)."""
    from .e2e import prefill_and_decode

    return prefill_and_decode(model, ids, new_tokens, keep=keep)


def run_documents(model, tok, docs, methods, *, block: int, density: float, new_tokens: int,
                  patterns: dict | None = None, seed: int = 0) -> list[dict]:
    """Per document ``{arm: {"correct", "density", "agree"}}`` with ``dense`` as the control
    (``agree``: top-1 agreement with dense over the last 64 prompt positions)."""
    from .e2e import correct
    from .fidelity import MATCHED, arm_config
    from .io import patch, patch_state, unpatch

    out = []
    for ids, key, _span in docs:
        d_logits, d_gen = prefill_decode(model, ids, new_tokens)
        row = {"dense": {"correct": float(correct(tok, d_gen, key)), "density": 1.0, "agree": 1.0}}
        ref: dict[int, float] = {}  # UniSparse's measured density per layer (matched budgets)
        for m in methods:
            cfg = arm_config(m, block, density, seed, allocation="row")
            layer_cfgs = None
            if m in MATCHED:
                if not ref:
                    raise ValueError(f"{m} needs 'unisparse' before it (matched budgets)")
                pats = patterns or {}
                layer_cfgs = {i: cfg.with_(density=d, **({"patterns": tuple(pats[i])}
                                                         if cfg.method == "minference" and i in pats
                                                         else {}))
                              for i, d in ref.items()}
            patch(model, method=cfg.method, cfg=cfg, density=cfg.density, min_seq_len=2 * block,
                  layer_cfgs=layer_cfgs)
            try:
                logits, gen = prefill_decode(model, ids, new_tokens)
                st = patch_state(model)
                dens = dict(st.layer_densities)
            finally:
                unpatch(model)
            if m == "unisparse":
                ref = dens
            agree = float((logits.argmax(-1) == d_logits.argmax(-1)).float().mean())
            row[m] = {"correct": float(correct(tok, gen, key)), "agree": agree,
                      "density": sum(dens.values()) / max(len(dens), 1), "layer_density": dens}
        out.append(row)
    return out


#: in a spawned worker: the queue on which the parent sends MInference's dev patterns
_CHANNEL = None


def _init_worker(channel) -> None:
    global _CHANNEL
    _CHANNEL = channel


def _worker(job: dict, loaded=None) -> list[dict]:
    """One shard of test documents; ``job["patterns"]`` absent: wait for them on the channel
    (the worker loads the model while the parent searches them)."""
    import torch

    torch.set_num_threads(1)
    model, tok = loaded or load(job["spec"], job["dtype"], job["seed"])
    model = model.to(job.get("device", "cpu"))
    from .e2e import documents

    docs = documents(tok, job["length"], job["n_docs"], job["seed"], offset=900,
                     haystack=job.get("haystack", "varied"))
    mine = [docs[i] for i in job["indices"]]
    patterns = job["patterns"] if "patterns" in job else _CHANNEL.get()
    if patterns == "failed":  # the parent's search raised; it re-raises
        return []
    return run_documents(model, tok, mine, job["methods"], block=job["block"],
                         density=job["density"], new_tokens=job["new_tokens"],
                         patterns=patterns, seed=job["seed"])


def needle_study(spec: str = "smollm2", *, length: int = 1024, n_docs: int = 20,
                 density: float = 0.25, block: int = 32, methods=NEEDLE_METHODS,
                 workers: int = 2, new_tokens: int = 6, dtype: str = "fp32", seed: int = 0,
                 device: str = "cpu", haystack: str = "varied", log=None) -> dict:
    """Run the study; returns ``{"per_doc": [...], "summary": {...}, "patterns": {...}, ...}``.
    Test documents: ``e2e.documents(..., offset=900)``, depths spread evenly over [0.1, 0.9],
    ``haystack`` as in ``tasks.needle_prompt``. The answer is decoded densely after the (sparse)
    prefill: the patch keeps one-query decoding steps on the model's SDPA path.
    ``device="cuda"`` runs the model there (use ``workers=1``). With several workers they start
    (and load the model) while this process searches MInference's patterns (0.3.8)."""
    import torch

    log = log or (lambda _m: None)
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    search = any(m in ("minference", "minference_answer") for m in methods)
    job = dict(spec=spec, dtype=dtype, seed=seed, length=length, n_docs=n_docs,
               methods=tuple(methods), block=block, density=density,
               new_tokens=new_tokens, device=device, haystack=haystack)
    shards = [list(range(n_docs))[w::workers] for w in range(workers)]
    shards = [s for s in shards if s]

    def search_patterns():
        model, tok = load(spec, dtype, seed)
        model = model.to(device)
        patterns = None
        if search:
            patterns = dev_patterns(model, tok, length=length, block=block, density=density,
                                    seed=seed, haystack=haystack)
            log(f"MInference patterns searched on the dev document ({len(patterns)} layers)")
        return model, tok, patterns

    try:
        if len(shards) == 1:
            model, tok, patterns = search_patterns()
            per = [_worker({**job, "patterns": patterns, "indices": shards[0]}, (model, tok))]
        else:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            ctx = mp.get_context("spawn")
            chan = ctx.SimpleQueue()
            with ProcessPoolExecutor(len(shards), mp_context=ctx, initializer=_init_worker,
                                     initargs=(chan,)) as ex:
                futs = [ex.submit(_worker, {**job, "indices": s}) for s in shards]
                patterns = "failed"
                try:
                    patterns = search_patterns()[2]
                finally:
                    for _ in shards:
                        chan.put(patterns)
                per = [f.result() for f in futs]
        rows: list = [None] * n_docs
        for s, res in zip(shards, per):
            for i, r in zip(s, res):
                rows[i] = r
    finally:
        torch.set_num_threads(threads)
    return {"per_doc": rows, "summary": summarize(rows), "patterns": patterns,
            "settings": job,
            "wall_s": time.perf_counter() - t0}


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (``scipy.stats.binomtest``)."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return float(ci.low), float(ci.high)


def summarize(rows: list[dict]) -> dict:
    """Per arm: accuracy with its Wilson 95% interval, mean measured density, top-1 agreement with
    dense over the prompt, and (sparse arms) the paired 95% interval of arm minus dense."""
    from icml26_shared.eval import paired_interval

    dense = [r["dense"]["correct"] for r in rows]
    out = {}
    for arm in rows[0]:
        acc = [r[arm]["correct"] for r in rows]
        k, n = int(round(sum(acc))), len(acc)
        cell = {"accuracy": k / n, "n": n, "ci95": wilson(k, n),
                "density": sum(r[arm]["density"] for r in rows) / n,
                "agree": sum(r[arm]["agree"] for r in rows) / n}
        if arm != "dense":
            iv = paired_interval(acc, dense)
            cell["minus_dense"] = (iv.mean, iv.low, iv.high)
            cell["ratio_to_dense"] = (k / n) / (sum(dense) / n) if sum(dense) else float("nan")
        out[arm] = cell
    return out


def answer_logprob(model, ids, answer) -> float:
    """Teacher-forced ``log p(answer | prompt)`` (sum over the answer's tokens), one forward."""
    import torch

    x = torch.tensor([list(ids) + list(answer)], device=model.device)
    with torch.no_grad():
        logits = model(x, use_cache=False, logits_to_keep=len(answer) + 1).logits[0, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(answer)[:, None])
    return float(lp.sum())


def layer_sensitivity(model, tok, docs, *, method: str = "unisparse", block: int = 32,
                      density: float = 0.25, seed: int = 0, log=None) -> dict:
    """One layer at a time: only layer ``i`` runs ``method`` at ``density``, every other layer is
    dense; per layer the change of the teacher-forced log-probability of the pass key (sparse
    minus dense, per document). ``{"dense": [...], "delta": {layer: [...]}, "density": {...}}``."""
    from .config import SparseConfig
    from .fidelity import arm_config
    from .io import patch, patch_state, unpatch

    log = log or (lambda _m: None)
    cfg = arm_config(method, block, density, seed)
    base = SparseConfig(method="dense", block_size=block)
    out: dict = {"dense": [], "delta": {}, "density": {}}
    for n, (ids, key, _span) in enumerate(docs):
        ans = [5, 6, 7] if tok is None else tok(" " + key, add_special_tokens=False)["input_ids"]
        ref = answer_logprob(model, ids, ans)
        out["dense"].append(ref)
        for i in range(model.config.num_hidden_layers):
            patch(model, method="dense", cfg=base, density=None, min_seq_len=2 * block,
                  layer_cfgs={i: cfg})
            try:
                lp = answer_logprob(model, ids, ans)
                dens = patch_state(model).layer_densities[i]
            finally:
                unpatch(model)
            out["delta"].setdefault(i, []).append(lp - ref)
            out["density"].setdefault(i, []).append(dens)
        log(f"sensitivity: document {n + 1}/{len(docs)} done")
    return out
