"""The reproduction's measurements beyond ranking quality: bytes per token (a real index, a
synthetic 3M-token index checked against the size model, the size model at MS MARCO scale),
query latency of the block-wise exhaustive and candidate search, and the MRR-vs-bytes figure."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from icml26_shared.eval import compare

from .codecs import Codec, get_codec
from .config import ReproConfig
from .index import DEFAULT_BATCH, Index, disk_report, read_manifest, size_model, write_index

MSMARCO_TOKENS, MSMARCO_DOCS = 600_000_000, 8_841_823  # ColBERTv2 on MS MARCO passages [P/S]


def _crossq(last, B=4) -> tuple[int, Codec, np.ndarray]:
    key = (B, "crossq") if (B, "crossq") in last else next(k for k in last if k[1] == "crossq")
    return key[0], *last[key]


def _tile(codes: np.ndarray, off: np.ndarray, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The corpus repeated until it holds at least ``n_tokens`` token vectors (whole documents)."""
    reps = int(np.ceil(n_tokens / len(codes)))
    lengths = np.tile(np.diff(off), reps)
    n_docs = min(len(lengths), int(np.searchsorted(np.cumsum(lengths), n_tokens)) + 1)
    offsets = np.concatenate([[0], np.cumsum(lengths[:n_docs])]).astype(np.int64)
    return np.tile(codes, (reps, 1))[:offsets[-1]], offsets


def bytes_rows(res, last, off, doc_ids, projection, out_dir: Path, rc: ReproConfig, dim: int) -> dict:
    """Bytes per token of (a) the CrossQ index of this corpus at each budget, (b) a synthetic
    ``big_tokens`` index (the 4 B/token codebooks, integer ids, this corpus's lengths tiled,
    random codes: size does not depend on code values), checked against ``size_model``, and
    (c) the size model at MS MARCO scale."""
    out: dict = {}
    for B in rc.budgets:
        if (B, "crossq") not in last:
            continue
        codec, codes = last[(B, "crossq")]
        path = out_dir / "indexes" / f"crossq-{B}B"
        write_index(path, codes, off, doc_ids, codec, {"model": "reproduction"}, overwrite=True,
                    encoder_arrays={"projection": projection})
        rep = disk_report(path, read_manifest(path))
        for k, v in rep["bytes_per_token"].items():
            res.add("bytes (this corpus, string ids)", f"crossq {B}B", f"bytes_per_token_{k}", v)
        res.add("bytes (this corpus, string ids)", f"crossq {B}B", "bytes_per_token_with_metadata",
                rep["bytes_per_token_with_metadata"])
        out.setdefault("corpus", {})[B] = rep["bytes_per_token_with_metadata"]
    B, codec, codes = _crossq(last)
    lengths = np.diff(off)
    n_docs = int(np.ceil(rc.big_tokens / lengths.mean())) + 1
    big_len = np.tile(lengths, int(np.ceil(n_docs / len(lengths))))[:n_docs]
    big_off = np.concatenate([[0], np.cumsum(big_len)]).astype(np.int64)
    rng = np.random.default_rng(0)
    big_codes = rng.integers(0, 256, size=(int(big_off[-1]), B), dtype=np.uint8)
    path = out_dir / "synthetic-size-index"
    mf = write_index(path, big_codes, big_off, [str(i) for i in range(n_docs)], codec, overwrite=True)
    rep = disk_report(path, mf)
    shutil.rmtree(path)
    cb = sum(a.nbytes for a in codec.search_state().values())
    model = size_model(int(big_off[-1]), n_docs, B, cb, int(big_len.max()), n_docs)
    exp = f"bytes ({int(big_off[-1]):,} synthetic tokens, integer ids)"
    for k, v in rep["bytes_per_token"].items():
        res.add(exp, f"crossq {B}B", f"bytes_per_token_{k}", v)
    res.add(exp, f"crossq {B}B", "bytes_per_token_with_metadata", rep["bytes_per_token_with_metadata"])
    res.add(exp, f"crossq {B}B", "bytes_per_token_on_disk", rep["bytes_per_token_on_disk"])
    res.add(exp, f"crossq {B}B", "size_model_bytes_per_token", model["bytes_per_token_with_metadata"])
    res.add(exp, f"crossq {B}B", "reduction_vs_fp16_with_metadata", 2 * dim / rep["bytes_per_token_with_metadata"])
    ms = size_model(MSMARCO_TOKENS, MSMARCO_DOCS, B, cb, 512, MSMARCO_DOCS)
    res.add("bytes (size model, MS MARCO scale)", f"crossq {B}B", "bytes_per_token_with_metadata",
            ms["bytes_per_token_with_metadata"], n_tokens=MSMARCO_TOKENS, n_docs=MSMARCO_DOCS)
    res.add("bytes (size model, MS MARCO scale)", f"crossq {B}B", "reduction_vs_fp16_with_metadata",
            2 * dim / ms["bytes_per_token_with_metadata"])
    out.update(B=B, big=rep, big_model=model, msmarco=ms, dim=dim)
    return out


def latency(res, last, off, Qtest, X, rc: ReproConfig, dim: int) -> dict:
    """Per-query latency (median over repeats of the mean per query) of the block-wise
    exhaustive lookup-table MaxSim and the candidate search (first-code cells, nprobe 4) at
    ``latency_tokens``, fp16 matmul scoring beside them (same documents, side by side), and the
    candidate search at ``big_tokens`` (the corpus tiled)."""
    B, codec, codes = _crossq(last)
    qs = Qtest[:rc.latency_queries]
    c1, o1 = _tile(codes, off, rc.latency_tokens)
    ids = [str(i) for i in range(len(o1) - 1)]
    idx = Index(codec, c1, o1, ids)
    fp16 = get_codec("fp16")(dim)
    f1, _ = _tile(fp16.encode(X, off), off, rc.latency_tokens)
    idx_fp = Index(fp16, f1, o1, ids)
    for q in qs[:1]:  # the candidate lists are built on first use: not part of a query's time
        idx.search(q, 10, nprobe=4)
    t = compare({"lut": lambda: [idx.search(q, 10) for q in qs],
                 "lut_nprobe": lambda: [idx.search(q, 10, nprobe=4) for q in qs],
                 "fp16": lambda: [idx_fp.search(q, 10) for q in qs]}, warmup=1,
                repeats=rc.latency_repeats)
    ms = {k: v.median / len(qs) * 1000 for k, v in t.items()}
    name = f"crossq {B}B, {len(c1):,} token vectors"
    res.add("latency", name, "latency_ms_exhaustive", ms["lut"], unit="ms", batch=DEFAULT_BATCH)
    res.add("latency", name, "latency_ms_candidates", ms["lut_nprobe"], unit="ms", nprobe=4)
    res.add("latency", f"fp16, {len(c1):,} token vectors", "latency_ms_exhaustive", ms["fp16"], unit="ms")
    res.add("latency", name, "ratio_time_lut_over_fp16", ms["lut"] / ms["fp16"])
    lq = max(len(q) for q in qs)
    res.add("latency", name, "scoring_buffer_mb", lq * DEFAULT_BATCH * 4 * 2 / 2 ** 20,
            note="peak of the scoring buffers (two [Lq, batch] float32), analytic, not measured")
    c2, o2 = _tile(codes, off, rc.big_tokens)
    big = Index(codec, c2, o2, [str(i) for i in range(len(o2) - 1)])
    big.search(qs[0], 10, nprobe=4)
    tb = compare({"lut_nprobe": lambda: [big.search(q, 10, nprobe=4) for q in qs]}, warmup=0,
                 repeats=max(1, rc.latency_repeats // 2))
    ms_big = tb["lut_nprobe"].median / len(qs) * 1000
    cand = float(np.mean([len(big.candidates(torch.as_tensor(q), 4)) for q in qs]))
    res.add("latency", f"crossq {B}B, {len(c2):,} token vectors (corpus tiled)",
            "latency_ms_candidates", ms_big, unit="ms", nprobe=4, mean_candidates=cand)
    return {"small": ms, "big": ms_big, "small_tokens": len(c1), "big_tokens": len(c2)}


def figure(out_dir: Path, per, fp_mrr: float, rc: ReproConfig) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .experiments import METHODS

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for method in (*METHODS, "crossq+ft"):
        xs = [B for B in rc.budgets if (B, method) in per]
        ys = [np.mean([r["mrr@10"].mean() for r in per[(B, method)]["test"]]) for B in xs]
        ax.plot(xs, ys, marker="o", label=method)
    ax.axhline(fp_mrr, color="k", ls="--", label="full precision")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per token")
    ax.set_ylabel("MRR@10 (test queries)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "mrr_vs_bytes.png", dpi=120)
    plt.close(fig)
    return "mrr_vs_bytes.png"


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def clustered_codes(n_tokens: int, bytes_per_token: int, doc_len: int = 64, docs_per_topic: int = 64,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A synthetic index with the structure real corpora have [R]: documents of ``doc_len`` tokens
    belong to topics of about ``docs_per_topic`` documents; a topic's tokens draw their first
    code byte from 4 values and their second from 8 (the topic's region of the first two
    additive stages), the other bytes uniformly. Returns ``(codes, offsets, topic of each doc)``."""
    rng = np.random.default_rng(seed)
    n_docs = max(1, -(-n_tokens // doc_len))
    n_topics = max(1, n_docs // docs_per_topic)
    topic = rng.integers(0, n_topics, n_docs)
    first, second = rng.integers(0, 256, (n_topics, 4)), rng.integers(0, 256, (n_topics, 8))
    n = n_docs * doc_len
    tok = np.repeat(topic, doc_len)
    codes = rng.integers(0, 256, size=(n, bytes_per_token), dtype=np.uint8)
    codes[:, 0] = first[tok, rng.integers(0, 4, n)]
    if bytes_per_token > 1:
        codes[:, 1] = second[tok, rng.integers(0, 8, n)]
    return codes, np.arange(0, n + 1, doc_len, dtype=np.int64), topic


def run_bench(sizes, bytes_per_token: int = 4, dim: int = 128, n_queries: int = 8,
              query_len: int = 32, nprobe: int = 4, batch: int = DEFAULT_BATCH, repeats: int = 3,
              index: Index | None = None, seed: int = 0, cell_bytes: int | None = None) -> list[dict]:
    """Query latency (p50 / p90 over ``n_queries`` x ``repeats`` timed queries, ms) of the
    block-wise exhaustive and the candidate search on indexes of each of ``sizes`` token vectors,
    the candidates' share of the documents, the candidate search's recall of the exhaustive
    top 10, and the process's peak memory after each (sizes ascending, so each figure includes
    the index of that size). ``index`` (a built index) is tiled to each size, with queries drawn
    from its own decoded documents; without it, a CrossQ codec without training (residual
    k-means on random unit vectors) scores ``clustered_codes`` (prefixes of one synthetic index
    of the largest size), each query being 32 noisy decoded tokens of a random document."""
    import time

    rng = np.random.default_rng(seed)
    if index is None:
        X = rng.standard_normal((20_000, dim)).astype(np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        codec = get_codec("crossq")(dim, bytes_per_token, steps=0)
        codec.fit(X, np.array([0, len(X)]), seed=seed)
        codes, off, _ = clustered_codes(max(sizes), bytes_per_token, seed=seed)
        tiled = False
    else:
        codec, codes, off = index.codec, np.asarray(index.codes), index.offsets
        dim, tiled = codec.dim, True
    rows = []
    for n in sorted(sizes):
        if tiled:
            c, o = _tile(codes, off, n)
        else:
            n_d = min(len(off) - 1, int(np.searchsorted(off, n)))
            c, o = codes[:off[n_d]], off[:n_d + 1]
        idx = Index(codec, c, o, [str(i) for i in range(len(o) - 1)])
        Q = []
        for j in rng.integers(0, idx.n_docs, n_queries):
            toks = codec.decode(c[o[j]:o[j + 1]])[rng.integers(0, o[j + 1] - o[j], query_len)]
            toks = toks + 0.05 * rng.standard_normal(toks.shape).astype(np.float32)
            Q.append(toks / np.linalg.norm(toks, axis=1, keepdims=True))
        t0 = time.perf_counter()
        idx.search(Q[0], 10, nprobe=nprobe, batch=batch, cell_bytes=cell_bytes)  # cell lists, once
        build_s = time.perf_counter() - t0
        row = {"tokens": int(len(c)), "docs": int(idx.n_docs), "bytes_per_token": codec.bytes_per_token,
               "nprobe": nprobe, "batch": batch, "cell_lists_s": build_s,
               "cell_bytes": idx.cell_bytes() if cell_bytes is None else cell_bytes,
               "corpus": "tiled index" if tiled else "clustered synthetic"}
        tops = {}
        for mode, p in (("exhaustive", 0), ("candidates", nprobe)):
            times = []
            for _ in range(repeats):
                for i, q in enumerate(Q):
                    t = time.perf_counter()
                    tops[(mode, i)] = idx.search(q, 10, nprobe=p, batch=batch, cell_bytes=cell_bytes)[0]
                    times.append((time.perf_counter() - t) * 1000)
            row[f"{mode}_ms_p50"] = float(np.percentile(times, 50))
            row[f"{mode}_ms_p90"] = float(np.percentile(times, 90))
        cand = [len(idx.candidates(torch.from_numpy(q), nprobe, cell_bytes)) for q in Q]
        row["mean_candidates"] = float(np.mean(cand))
        row["candidate_share"] = float(np.mean(cand) / idx.n_docs)
        row["recall_of_exhaustive_top10"] = float(np.mean([
            len(set(tops[("candidates", i)]) & set(tops[("exhaustive", i)])) / len(tops[("exhaustive", i)])
            for i in range(len(Q))]))
        row["peak_rss_mb"] = peak_rss_mb()
        rows.append(row)
        del idx, c, o
    return rows
