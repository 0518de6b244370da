"""The reproduction's sweep: every method at every budget for every seed.

Each ``(seed, budget)`` pair is an independent task (its own residual k-means initialisation,
shared by the CrossQ family, every codec fitted with that seed, "CrossQ + light fine-tuning" where
it runs), so the tasks can run in ``workers`` forked processes (the reproduction is single-threaded
per process: two processes use two cores). Results do not depend on ``workers``: every random
choice inside a task is seeded by the task's seed, and results are merged in seed order.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from .codecs import Codec
from .config import ReproConfig
from .core import residual_kmeans

_CTX: dict = {}  # what every task reads (set before the workers are forked)


def _record(m: dict[str, np.ndarray], n_dev: int, **extra) -> dict:
    return {"dev": {k: v[:n_dev] for k, v in m.items()}, "test": {k: v[n_dev:] for k, v in m.items()},
            **extra}


def flip_diagnostics(method: str, codec: Codec, codes: np.ndarray, init: np.ndarray,
                     Xhat: torch.Tensor) -> dict[str, float]:
    """``crossq.metrics`` for one fitted codec: winner-token flips vs full precision on the test
    queries' teacher top-10 documents (every method); for the CrossQ family, the share of codes
    (any byte, and of all codes) that differ from the greedy-RQ start (same initial codebooks);
    with a context, the share the context alone changes."""
    from .experiments import CROSSQ_FAMILY
    from .metrics import code_flip_rate, context_flip_rate, greedy_start_codes, winner_flip_rate

    c = _CTX
    X, off = c["X"], c["off"]
    out = {"winner_flip_rate": winner_flip_rate(c["win_queries"], c["Xt"], Xhat, off, c["win_docs"])}
    if method in CROSSQ_FAMILY:
        r = code_flip_rate(codes, greedy_start_codes(codec.model, X, off, init))
        out["code_flip_rate"], out["code_flip_rate (any byte)"] = r["code"], r["any_byte"]
        if codec.model.use_context and method != "rq-greedy":  # u = 0: no context effect
            r = context_flip_rate(codec.model, X, off)
            out["context_flip_rate"], out["context_flip_rate (any byte)"] = r["code"], r["any_byte"]
    return out


#: trained members of the CrossQ family, whose learning curves the first seed records
CURVED = ("tokenwise", "crossq-recon", "crossq")


def _curve_hook(curve: dict, start_codes: np.ndarray):
    """A ``fit_crossq`` checkpoint that appends dev MRR@10 (the reproduction's pool re-ranking of
    the dev queries), dev listwise KL, the code flip rate vs the greedy start and the training
    loss to ``curve``; its own time goes to ``curve["seconds"]`` (kept out of index_time_s)."""
    from .metrics import code_flip_rate
    from .train import ranking_kl

    c = _CTX

    def checkpoint(step, model, loss):
        t0 = time.perf_counter()
        with torch.no_grad():
            codes, x_hat = model.encode(c["Xt"], torch.from_numpy(c["off"]))
        curve["step"].append(step)
        curve["train loss"].append(loss)
        curve["dev mrr@10"].append(float(c["evaluate_dev"](x_hat)["mrr@10"].mean()))
        curve["dev listwise KL"].append(ranking_kl(model, c["Xt"], c["off"], c["dev_set"]))
        curve["code flip rate"].append(code_flip_rate(codes.numpy(), start_codes)["code"])
        model.train()
        curve["seconds"] += time.perf_counter() - t0

    return checkpoint


def run_task(task: tuple[int, int]) -> tuple[int, int, dict, tuple[Codec, np.ndarray] | None]:
    """Every method of ``methods_at(B)`` fitted with seed ``s``: ``(s, B, {method: record},
    (crossq codec, codes) for the last seed, else None)``."""
    from .experiments import CROSSQ_FAMILY, make_codec, methods_at, query_finetune

    s, B = task
    c = _CTX
    rc: ReproConfig = c["rc"]
    X, off, Xt, n_dev, evaluate = c["X"], c["off"], c["Xt"], c["n_dev"], c["evaluate"]
    S, sample_hash = c["sample"]  # one fixed sample trains every quantizer (faiss's default size)
    per_centroid = -(-len(S) // 256)  # residual k-means uses the whole sample at each stage
    init = residual_kmeans(S, B, 256, 20, s, points_per_centroid=per_centroid)
    out, keep, start = {}, None, None
    for method in methods_at(B, rc, c["seeds"].index(s)):
        codec = make_codec(method, X.shape[1], B, rc)
        curve, hook = None, {}
        if rc.curve_every and s == c["seeds"][0] and method in CURVED:
            if start is None:
                from .metrics import greedy_start_codes
                from .train import init_quantizer

                start = greedy_start_codes(init_quantizer(X, codec.cfg, s, init), X, off, init)
            curve = {"step": [], "train loss": [], "dev mrr@10": [], "dev listwise KL": [],
                     "code flip rate": [], "seconds": 0.0}
            hook = {"every": rc.curve_every, "checkpoint": _curve_hook(curve, start)}
        t0 = time.perf_counter()
        if method in CROSSQ_FAMILY:
            codec.params_init = init
            codec.fit(X, off, seed=s, training=c["training"], **hook)  # start: k-means on the sample
        else:
            codec.fit(S, np.array([0, len(S)]), seed=s)
        codes = codec.encode(X, off)
        t_index = time.perf_counter() - t0 - (curve["seconds"] if curve else 0.0)
        Xhat = torch.from_numpy(codec.decode(codes))
        m = evaluate(Xhat)
        mse = float(((Xhat - Xt) ** 2).sum(1).mean())
        out[method] = _record(m, n_dev, index_time_s=t_index, recon_mse=mse,
                              flips=flip_diagnostics(method, codec, codes, init, Xhat),
                              train_sample=sample_hash, **({"curve": curve} if curve else {}))
        if rc.log:
            print(f"  seed {s} {B} B/token {method:<12} fit+encode {t_index:6.1f} s  dev "
                  f"MRR@10 {m['mrr@10'][:n_dev].mean():.4f}  test {m['mrr@10'][n_dev:].mean():.4f}",
                  file=sys.stderr, flush=True)
        if method != "crossq":
            continue
        if s == c["last_seed"]:
            codec.__dict__.pop("_books_cache", None)
            keep = (codec, codes)
        if B in rc.ft_budgets:
            step, mf = query_finetune(c["Hq"], c["split"], c["positives"], c["training"], Xhat, off,
                                      c["projection"], c["ev"], evaluate, n_dev, rc, s, m0=m)
            out["crossq+ft"] = _record(mf, n_dev, index_time_s=t_index, recon_mse=mse, ft_steps=step)
            if rc.log:
                print(f"  seed {s} {B} B/token {'crossq+ft':<12} query head {step:>3} steps "
                      f"(dev)  dev MRR@10 {mf['mrr@10'][:n_dev].mean():.4f}  test "
                      f"{mf['mrr@10'][n_dev:].mean():.4f}", file=sys.stderr, flush=True)
    return s, B, out, keep


def _cost(B: int, rc: ReproConfig, seed_index: int = 0) -> int:
    from .experiments import methods_at

    methods = methods_at(B, rc, seed_index)
    slow = sum(m in rc.first_seed_only for m in methods)  # faiss at its defaults: ~3x a CrossQ fit
    return B * (len(methods) + 2 * slow + 2 * (B in rc.ft_budgets))


def sweep(ctx: dict, seeds: list[int], rc: ReproConfig, workers: int = 1):
    """``(per, last)``: ``per[(B, method)]`` lists of per-seed records (keys ``dev``, ``test``,
    ``index_time_s``, ``recon_mse``, ``flips``, ``ft_steps``) in seed order; ``last[(B, "crossq")]`` the
    last seed's CrossQ codec and codes. Tasks are dispatched costliest first."""
    _CTX.clear()
    _CTX.update(ctx, rc=rc, last_seed=seeds[-1], seeds=list(seeds))
    tasks = sorted(((s, B) for s in seeds for B in rc.budgets), key=lambda t: -_cost(t[1], rc, seeds.index(t[0])))
    done = {}
    try:
        if workers <= 1:
            for t in tasks:
                s, B, out, keep = run_task(t)
                done[(s, B)] = (out, keep)
        else:
            import multiprocessing

            pool = multiprocessing.get_context("fork").Pool(workers)
            try:
                for s, B, out, keep in pool.imap_unordered(run_task, tasks):
                    done[(s, B)] = (out, keep)
            finally:
                pool.close()
                pool.join()
    finally:
        _CTX.clear()
    per: dict[tuple[int, str], dict[str, list]] = {}
    last: dict[tuple[int, str], tuple[Codec, np.ndarray]] = {}
    for s in seeds:
        for B in rc.budgets:
            out, keep = done[(s, B)]
            for method, r in out.items():
                rec = per.setdefault((B, method), {})
                for k, v in r.items():
                    rec.setdefault(k, []).append(v)
            if keep is not None:
                last[(B, "crossq")] = keep
    return per, last
