"""The laptop-scale reproduction: every codec at 2 / 4 / 8 bytes per token on an offline
retrieval task (stdlib docstrings, see ``corpus.py``), against the full-precision model.

Same embeddings, training queries, budgets and seeds for CrossQ and every baseline. Fixed query
splits (``ReproConfig``): the strongest baseline of each budget is chosen on **dev**; every claim
is computed on **test** (queries nothing was chosen on), with paired bootstrap 95% intervals over
test queries (each query's metric averaged over seeds). Ranking uses each codec's decoded vectors
(identical to its lookup-table scores, tested); latency and bytes are measured in ``bench.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

from icml26_shared import Results, UserError
from icml26_shared.registry import package_version

from .codecs import Codec, get_codec
from .config import SCALES, EncoderConfig, ReproConfig
from .core import maxsim_many
from .corpus import build_task
from .indexer import offsets_of
from .projection import project
from .sweep import sweep
from .train import build_training_set

#: footprint-matched baselines the claim is against (the strongest on dev wins the row)
BASELINES = ("pq", "opq", "residual", "rq-greedy", "rq", "lsq", "tokenwise")
#: the paper's baselines: the paper-style claim is against the strongest of these on dev
PAPER_BASELINES = ("pq", "opq", "residual", "rq", "lsq", "tokenwise")
#: CrossQ without its ranking-aligned losses (reconstruction only); tokenwise = without context
ABLATIONS = ("crossq-recon",)
METHODS = (*BASELINES, *ABLATIONS, "crossq")
CROSSQ_FAMILY = ("rq-greedy", "tokenwise", "crossq-recon", "crossq")  # share the k-means init


def methods_at(B: int, rc: ReproConfig, seed_index: int = 0) -> tuple[str, ...]:
    """Every method at ``all_methods_budgets`` (the ranking-loss ablation at ``ablation_budgets``
    only); CrossQ alone elsewhere (8 B/token: the retention claim) [R: compute]; the methods of
    ``rc.first_seed_only`` (faiss's slow defaults) on the first seed only."""
    if B not in rc.all_methods_budgets:
        return ("crossq",)
    return tuple(m for m in METHODS if (m not in ABLATIONS or B in rc.ablation_budgets)
                 and (seed_index == 0 or m not in rc.first_seed_only))
FULL_RECIPE = (
    "the full scale needs a ColBERTv2 / PyLate checkpoint and MS MARCO or BEIR on local disk "
    "(none ships offline): run `crossq train CORPUS --model CKPT --queries Q --qrels QRELS "
    "--bytes-per-token B --out CODEC`, `crossq index CORPUS --model CKPT --codec crossq "
    "--codec-model CODEC --out IDX`, `crossq search IDX DEV_QUERIES --out RUN`, `crossq eval RUN "
    "DEV_QRELS` (see the README)")


def training_settings(method: str, rc: ReproConfig) -> dict:
    """Steps, lr and queries per step of a trained CrossQ-family method (``rc.tuned`` first)."""
    for m, steps, lr, qps in rc.tuned:
        if m == method:
            return {"steps": steps, "lr": lr, "queries_per_step": qps}
    return {"steps": rc.steps, "lr": rc.lr, "queries_per_step": rc.queries_per_step}


def make_codec(method: str, dim: int, budget: int, rc: ReproConfig) -> Codec:
    """Each method at ``budget`` bytes/token with the reproduction's settings."""
    crossq = training_settings(method, rc)
    if method == "rq-greedy":  # CrossQ's initialisation: residual k-means, greedy codes
        return get_codec("crossq")(dim, budget, steps=0)
    if method == "crossq-recon":
        return get_codec("crossq")(dim, budget, **crossq, w_kl=0.0, w_margin=0.0)
    if method in ("tokenwise", "crossq"):
        return get_codec(method)(dim, budget, **crossq)
    n = rc.train_sample_tokens  # every quantizer is fitted on the same sample (train_sample)
    if method == "opq":
        return get_codec("opq")(dim, budget, niter=rc.opq_niter, train_tokens=n)
    if method == "rq":
        return get_codec("rq")(dim, budget, beam=rc.rq_beam, train_tokens=n)
    if method == "lsq":
        return get_codec("lsq")(dim, budget, train_iters=rc.lsq_train_iters,
                                encode_ils_iters=rc.lsq_encode_ils_iters, train_tokens=n)
    return get_codec(method)(dim, budget)


def train_sample(X: np.ndarray, rc: ReproConfig) -> tuple[np.ndarray, str]:
    """The one training sample of every quantizer: ``rc.train_sample_tokens`` token rows drawn
    once (``rc.sample_seed``, sorted; every row when the corpus is smaller), and its SHA-256."""
    n = len(X)
    rows = np.arange(n) if n <= rc.train_sample_tokens else np.sort(
        np.random.default_rng(rc.sample_seed).choice(n, rc.train_sample_tokens, replace=False))
    S = np.ascontiguousarray(X[rows], np.float32)
    return S, hashlib.sha256(S.tobytes()).hexdigest()


def toy_embed(texts: list[str], dim: int = 32, maxlen: int = 48) -> list[np.ndarray]:
    """Smoke-scale stand-in for an encoder (no transformers import): each word gets a fixed random
    vector (seeded by its CRC32), mixed with its neighbours' for a little context, unit-norm."""
    out = []
    for t in texts:
        words = re.findall(r"\w+", t.lower())[:maxlen] or ["_"]
        E = np.stack([np.random.default_rng(zlib.crc32(w.encode())).standard_normal(dim) for w in words])
        E = E + 0.3 * (np.roll(E, 1, 0) + np.roll(E, -1, 0))
        out.append((E / np.linalg.norm(E, axis=1, keepdims=True)).astype(np.float32))
    return out


def _embed(task, rc: ReproConfig):
    """Encoder token states (before the projection head) of documents and queries and the PCA
    head ``[H, 128]``, cached (``$ICML26_CACHE/crossq``, keyed by the texts and the encoder
    settings, stored in fp16) so that a rerun skips the MiniLM encoding."""
    if rc.tiny_encoder:
        return toy_embed(task.doc_texts), toy_embed(task.query_texts), np.eye(32, dtype=np.float32), 0.0
    from icml26_shared.data import cache_dir

    from .encoder import LateInteractionEncoder

    cfg = EncoderConfig(model="minilm", dim=128, doc_maxlen=rc.doc_maxlen)
    key = hashlib.sha256(json.dumps([task.doc_texts, task.query_texts, repr(cfg), "hidden"]).encode()).hexdigest()
    cache = cache_dir("crossq") / f"hidden-{key[:16]}.npz"
    if cache.is_file():
        with np.load(cache, allow_pickle=False) as z:
            if str(z["key"]) == key:
                return (np.split(z["H"].astype(np.float32), z["offsets"][1:-1]),
                        np.split(z["Hq"].astype(np.float32), z["q_offsets"][1:-1]), z["pca"], 0.0)
    enc = LateInteractionEncoder.load(cfg)
    t0 = time.perf_counter()
    if rc.log:
        print(f"  encoding {len(task.doc_texts)} documents and {len(task.query_texts)} queries",
              file=sys.stderr, flush=True)
    hidden = enc.hidden_states(task.doc_texts, is_query=False)
    enc.fit_projection_from(hidden, seed=0)
    qhidden = enc.hidden(task.query_texts, is_query=True)
    seconds = time.perf_counter() - t0
    tmp = cache.with_name(cache.name + ".tmp.npz")
    np.savez(tmp, key=key, H=np.concatenate(hidden).astype(np.float16), offsets=offsets_of(hidden),
             Hq=np.concatenate(qhidden).astype(np.float16), q_offsets=offsets_of(qhidden),
             pca=enc.projection)
    tmp.replace(cache)
    return ([h.astype(np.float16).astype(np.float32) for h in hidden],
            [h.astype(np.float16).astype(np.float32) for h in qhidden], enc.projection, seconds)


def choose_projection(res: Results, Hd, Hq, W_pca, split, positives, rc: ReproConfig):
    """The PCA head or the MaxSim-trained one (contrastive, in-batch negatives, on the training
    queries, initialised by PCA), whichever has the higher full-precision MRR@10 on **dev**;
    both are reported on dev and test. Returns ``(head, its name, its full-precision MaxSim of
    the dev + test queries [n_dev + n_test, n_docs])`` (one pass per head, reused downstream)."""
    from .projection import train_projection

    tr = split["train"]
    W_ms = train_projection(Hd, [Hq[i] for i in tr], positives[tr].tolist(), W_pca,
                            steps=rc.proj_steps, batch=rc.proj_batch, lr=rc.proj_lr, seed=0)
    dev, scores = {}, {}
    ev, n_dev = np.r_[split["dev"], split["test"]], len(split["dev"])
    for name, W in (("pca", W_pca), ("maxsim", W_ms)):
        docs = project(Hd, W)
        X, off = torch.from_numpy(np.concatenate(docs)), torch.from_numpy(offsets_of(docs))
        qs = [torch.from_numpy(q) for q in project([Hq[i] for i in ev], W)]
        scores[name] = maxsim_many(qs, X, off)
        m = per_query(scores[name], positives[ev].tolist(), None)["mrr@10"]
        for sp, part in (("dev", m[:n_dev]), ("test", m[n_dev:])):
            res.add("encoder head (full precision, fp32)", name, f"{sp} mrr@10", float(part.mean()), split=sp)
        dev[name] = float(m[:n_dev].mean())
    best = max(dev, key=dev.get)
    res.add("encoder head (full precision, fp32)", best, "chosen on dev", 1.0, dev_mrr=dev)
    return (W_ms if best == "maxsim" else W_pca), best, scores[best]


def query_finetune(Hq, split, positives, training, Xhat, off, projection, ev, evaluate, n_dev,
                   rc: ReproConfig, seed: int, m0: dict[str, np.ndarray] | None = None):
    """"CrossQ + light fine-tuning" [P]: the query head fine-tuned on the training queries
    against the compressed documents; the number of steps (0 included) chosen on dev MRR@10.
    ``m0``: the untouched head's metrics (step 0), already computed by the caller."""
    from .projection import finetune_query_projection

    tr = split["train"]
    doc_hat = np.split(Xhat.numpy(), off[1:-1])
    snaps = finetune_query_projection([Hq[i] for i in tr], positives[tr].tolist(),
                                      training.candidates.numpy(), doc_hat, projection,
                                      snapshots=(0, *rc.ft_steps), batch=rc.proj_batch // 2,
                                      lr=rc.ft_lr, seed=seed)
    best = None
    for step, Wq in sorted(snaps.items()):
        if step == 0 and m0 is not None:
            m = m0
        else:
            m = evaluate(Xhat, [torch.from_numpy(q) for q in project([Hq[i] for i in ev], Wq)])
        if best is None or m["mrr@10"][:n_dev].mean() > best[1]["mrr@10"][:n_dev].mean():
            best = (step, m)
    return best


def split_queries(n: int, rc: ReproConfig) -> dict[str, np.ndarray]:
    """Fixed train / dev / test query positions (see ``ReproConfig``)."""
    a, b = rc.n_tuned, rc.n_tuned + rc.n_train_queries
    c = b + rc.n_dev - rc.n_tuned
    d = min(n, c + rc.n_test)
    if d <= c:
        raise UserError(f"the task has {n} queries, too few for the {rc.n_dev}/{rc.n_test} split")
    return {"train": np.arange(a, b), "dev": np.r_[np.arange(0, a), np.arange(b, c)],
            "test": np.arange(c, d)}


def per_query(S: torch.Tensor, positives: list[int], fp_top: torch.Tensor | None) -> dict[str, np.ndarray]:
    """Per-query MRR@10, nDCG@10, recall@10 (one relevant document each) and, given the
    full-precision top 10, the overlap with it."""
    top = S.topk(min(10, S.shape[1]), dim=1).indices
    out = per_query_ranked(top, np.asarray(positives))
    if fp_top is not None:
        out["teacher_top10_recall"] = np.array(
            [len(set(a) & set(b)) / len(a) for a, b in zip(top.tolist(), fp_top.tolist(), strict=True)])
    return out


def pool_gathers(offsets: np.ndarray, pools: np.ndarray) -> list[tuple[torch.Tensor, ...]]:
    """Per query, the token rows of its pool's documents, their offsets and each row's document
    position in the pool: computed once, reused by every codec's ``pool_scores``."""
    from .core import doc_index
    from .train import gather_docs

    out = []
    for pool in pools:
        rows, off = gather_docs(offsets, pool)
        off_t = torch.from_numpy(off)
        out.append((torch.from_numpy(rows), off_t, doc_index(off_t)))
    return out


def pool_scores(Qs: list[torch.Tensor], Xh: torch.Tensor, offsets: np.ndarray,
                pools: np.ndarray, gathers=None) -> torch.Tensor:
    """MaxSim of each query against its candidate pool ``pools [n_q, P]`` (doc ids) on vectors
    ``Xh``: ``[n_q, P]``. Every method ranks the same pools (the full-precision top-P);
    ``gathers`` = ``pool_gathers(offsets, pools)``, precomputed."""
    from .core import segment_max

    gathers = pool_gathers(offsets, pools) if gathers is None else gathers
    out = [segment_max(Q @ Xh[rows].T, off, idx).sum(0)
           for Q, (rows, off, idx) in zip(Qs, gathers, strict=True)]
    return torch.stack(out)


def pooled_metrics(S_pool: torch.Tensor, pools: np.ndarray, positives: np.ndarray,
                   fp_top: torch.Tensor | None) -> dict[str, np.ndarray]:
    """``per_query`` on pool scores, mapped back to document ids (a positive outside the pool
    is never retrieved)."""
    order = S_pool.topk(min(10, S_pool.shape[1]), dim=1).indices.numpy()
    top = torch.from_numpy(np.take_along_axis(pools, order, 1))
    out = per_query_ranked(top, positives)
    if fp_top is not None:
        out["teacher_top10_recall"] = np.array(
            [len(set(a) & set(b)) / len(a) for a, b in zip(top.tolist(), fp_top.tolist(), strict=True)])
    return out


def per_query_ranked(top: torch.Tensor, positives: np.ndarray) -> dict[str, np.ndarray]:
    """Per-query MRR@10, nDCG@10 and recall@10 of ranked doc ids ``top [n_q, 10]``."""
    pos = torch.as_tensor(positives)[:, None]
    hit = top == pos
    rank = torch.where(hit.any(1), hit.float().argmax(1) + 1, torch.zeros(len(pos), dtype=torch.long))
    rr = torch.where(rank > 0, 1.0 / rank.clamp(min=1).float(), torch.zeros(len(pos)))
    ndcg = torch.where(rank > 0, 1.0 / torch.log2(rank.float() + 1), torch.zeros(len(pos)))
    return {"mrr@10": rr.numpy().astype(np.float64), "ndcg@10": ndcg.numpy().astype(np.float64),
            "recall@10": (rank > 0).numpy().astype(np.float64)}


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    """The reproduction, single-threaded (torch here, faiss in ``_faiss.py``): its work is many
    small products, which a second thread barely speeds up and, on a shared machine, slows down
    (spinning threads); the process's torch thread count is restored afterwards."""
    if scale == "full":
        raise UserError(FULL_RECIPE)
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r} (smoke, quick or full)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _reproduce(scale, out_dir, seed)
    finally:
        torch.set_num_threads(threads)


def _reproduce(scale: str, out_dir: Path, seed: int) -> Results:
    from . import bench, claims

    rc = SCALES[scale]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    res = Results(package="crossq", version=package_version("crossq"), scale=scale, seed=seed)
    task = build_task(rc.n_docs, rc.n_docs, seed=0)  # every query; split below
    Hd, Hq, W_pca, enc_s = _embed(task, rc)
    pos_of = {d: i for i, d in enumerate(task.doc_ids)}
    positives = np.array([pos_of[next(iter(task.qrels[q]))] for q in task.query_ids])
    split = split_queries(len(Hq), rc)
    projection, head, S_fp = choose_projection(res, Hd, Hq, W_pca, split, positives, rc)
    docs = project(Hd, projection)
    X, off, queries = np.concatenate(docs), offsets_of(docs), project(Hq, projection)
    dim = X.shape[1]
    Qt = [torch.from_numpy(q) for q in queries]
    ev = np.r_[split["dev"], split["test"]]  # one scoring pass for dev and test
    n_dev = len(split["dev"])
    Qev = [Qt[i] for i in ev]
    Xt, offt = torch.from_numpy(X), torch.from_numpy(off)
    fp_top = S_fp.topk(10, dim=1).indices
    fp = per_query(S_fp, positives[ev].tolist(), None)
    # every codec re-ranks the same candidate pool per query: the full-precision top-P [R: compute]
    pools = S_fp.topk(min(rc.pool, S_fp.shape[1]), dim=1).indices.numpy()
    pos_ev = positives[ev]
    fp_pool_recall = float(np.mean([p in row for p, row in zip(pos_ev[n_dev:], pools[n_dev:], strict=True)]))
    res.add("full precision", "fp32", f"recall@{pools.shape[1]} (candidate pool)", fp_pool_recall,
            split="test")

    gathers = pool_gathers(off, pools)

    def evaluate(Xh: torch.Tensor, Qs: list[torch.Tensor] | None = None) -> dict[str, np.ndarray]:
        return pooled_metrics(pool_scores(Qev if Qs is None else Qs, Xh, off, pools, gathers),
                              pools, pos_ev, fp_top)

    training = build_training_set([Qt[i] for i in split["train"]], Xt, offt, rc.n_candidates,
                                  positives[split["train"]].tolist())
    seeds = [seed + s for s in rc.seeds]
    for name, codec in (("fp32", None), ("fp16", get_codec("fp16")(dim)), ("int8", get_codec("int8")(dim))):
        if codec is None:
            m, bpt = fp, 4 * dim
        else:
            codec.fit(X, off)
            Xh = torch.from_numpy(codec.decode(codec.encode(X, off)))
            m, bpt = evaluate(Xh), codec.bytes_per_token
        for k, v in m.items():
            res.add("full precision", name, k, [float(v[n_dev:].mean())] * len(seeds), seeds=seeds,
                    bytes_per_token=bpt, split="test")
    n_ev_dev = slice(0, n_dev)

    def evaluate_dev(Xh: torch.Tensor) -> dict[str, np.ndarray]:  # learning curves: dev only
        return pooled_metrics(pool_scores(Qev[n_ev_dev], Xh, off, pools[n_ev_dev], gathers[n_ev_dev]),
                              pools[n_ev_dev], pos_ev[n_ev_dev], None)

    dev_set = (build_training_set([Qt[i] for i in split["dev"]], Xt, offt, rc.n_candidates,
                                  positives[split["dev"]].tolist()) if rc.curve_every else None)
    sample = train_sample(X, rc)
    res.add("training sample (every quantizer)", "all", "tokens", len(sample[0]), sha256=sample[1],
            of_tokens=len(X), seed=rc.sample_seed)
    ctx = {"X": X, "off": off, "Xt": Xt, "n_dev": n_dev, "evaluate": evaluate, "training": training,
           "sample": sample, "evaluate_dev": evaluate_dev, "dev_set": dev_set,
           "Hq": Hq, "split": split, "positives": positives, "projection": projection, "ev": ev,
           # winner-token flips: test queries against their full-precision top-10 documents
           "win_queries": Qev[n_dev:], "win_docs": pools[n_dev:, :10]}
    per, last = sweep(ctx, seeds, rc, rc.workers)
    for (B, method), rec in per.items():
        seeds = [seed + s for s in rc.seeds][:len(rec["test"])]  # first_seed_only: seed 0 only
        for sp in ("test", "dev"):
            for k in rec[sp][0]:
                res.add(f"{B} B/token", method, k if sp == "test" else f"dev {k}",
                        [float(r[k].mean()) for r in rec[sp]], seeds=seeds, split=sp)
        res.add(f"{B} B/token", method, "index_time_s", rec["index_time_s"], seeds=seeds, unit="s")
        res.add(f"{B} B/token", method, "recon_mse", rec["recon_mse"], seeds=seeds,
                train_sample_sha256=sorted(set(rec.get("train_sample", []))))
        for k in (rec["flips"][0] if "flips" in rec else ()):  # crossq.metrics (flip_diagnostics)
            res.add(f"{B} B/token", method, k, [float(f[k]) for f in rec["flips"]], seeds=seeds,
                    **({"split": "test"} if k == "winner_flip_rate" else {}))
        for cv in rec.get("curve", []):  # the first seed's learning curves (CrossQ family)
            for k, direction in (("dev mrr@10", "higher"), ("dev listwise KL", "lower"),
                                 ("train loss", "lower"), ("code flip rate", "higher")):
                pts = [(st, v) for st, v in zip(cv["step"], cv[k], strict=True) if np.isfinite(v)]
                res.add_curve(f"{B} B/token training (seed {seeds[0]})", method, k,
                              [p[0] for p in pts], [p[1] for p in pts],
                              "dev" if k.startswith("dev") else "train", seed=seeds[0],
                              direction=direction, budget=cv["step"][-1])
        if "ft_steps" in rec:
            res.add(f"{B} B/token", method, "query_head_steps (chosen on dev)",
                    [float(v) for v in rec["ft_steps"]], seeds=seeds)
    seeds = [seed + s for s in rc.seeds]
    sizes = bench.bytes_rows(res, last, off, task.doc_ids, projection, out_dir, rc, dim)  # head stored
    lat = bench.latency(res, last, off, [Qt[i] for i in split["test"]], X, rc, dim)
    claims.check(res, per, fp["mrr@10"][n_dev:], sizes, lat, rc)
    res.figures.append(bench.figure(out_dir, per, fp["mrr@10"][n_dev:].mean(), rc))
    res.notes += [
        f"task: {len(task.doc_ids)} documents ({X.shape[0]} token vectors of {dim} dims); queries "
        f"split train {len(split['train'])} / dev {n_dev} / test {len(split['test'])} (fixed "
        f"positions; dev holds the {rc.n_tuned} queries that chose CrossQ's defaults in 0.1.x); "
        "the strongest baseline per budget is chosen on dev, every claim is computed on test.",
        f"encoder {'toy hashed word vectors (smoke)' if rc.tiny_encoder else 'all-MiniLM-L6-v2 token states'}"
        f" + a linear head to {dim} d: {head} (PCA or MaxSim-trained on the training queries, chosen "
        "on dev full-precision MRR@10)"
        + (f" (encoding took {enc_s:.0f} s)" if enc_s else " (token states from cache or toy)"),
        "faithful [P/S]: budgets in bytes per token with 256-entry codebooks; context computed at "
        "indexing and never stored; additive codes scored by lookup tables; listwise KL + "
        "hard-negative margin + soft-to-hard annealing; baselines PQ, OPQ, RQ, LSQ, token-wise "
        "conditional quantization, ColBERTv2-style residual.",
        "reconstructed [R]: the conditional encoder (context as a bias on code logits), loss forms "
        "and weights, the residual baseline's budget matching, the docstring task and the MiniLM "
        "'mini-ColBERT' (frozen MiniLM + a linear head), the query-side fine-tuning recipe (the "
        "query head only, contrastive against the compressed documents, steps chosen on dev).",
        "rq-greedy = CrossQ's residual k-means initialisation (no training); rq = faiss "
        "ResidualQuantizer with beam search; tokenwise = CrossQ without document context; "
        "crossq-recon = CrossQ without its ranking losses (reconstruction only).",
    ]
    return res
