"""crossq beside real engines (issue 59 item 5): an export of token vectors, the crossq-side bench
and the merge of every engine's timings into one table.

``python -m crossq.enginebench export``  one corpus's fp16 token vectors (a ``crossq embed`` folder,
                                        or the reproduction's docstring corpus) and its test
                                        queries' token vectors with their qrels, as plain ``.npy``
                                        and JSON files, so that a script in another environment
                                        (``bench/fastplaid_bench.py``: numpy, torch, fast_plaid
                                        only) reads the very same vectors;
``python -m crossq.enginebench run``     times crossq (exhaustive and candidate search, single and
                                        batched queries) and faiss ``IndexIVFPQ`` over token
                                        vectors with exact MaxSim re-ranking on those queries;
``python -m crossq.enginebench merge``   one table from both JSONs (MRR@10 computed here, by
                                        ``crossq.io.evaluate``, from every engine's top 10).

Export folder (``crossq-bench-export`` v1): ``docs.npy`` fp16 ``[n_tokens, dim]`` (unit rows),
``doc_lengths.npy`` int64, ``doc_ids.json``, ``queries.npy`` fp16 ``[n_query_tokens, dim]``,
``query_lengths.npy`` int64, ``query_ids.json``, ``qrels.json`` (``{qid: {docid: grade}}``) and
``export.json`` (sizes, source, a SHA-256 per file and ``id``, the digest of those digests).
An engine's JSON (``crossq-bench-result`` v1): ``export_id``, ``machine`` (CPU, threads, load
average before and after) and ``rows``: ``engine``, ``setting``, ``build_s``, ``bytes_per_token``,
``single_ms_p50/p90`` (one query per call), ``batched_ms_p50/p90`` (per query: a call's time
over its queries, ``batch`` queries a call), the same as the process's CPU time
(``single_cpu_ms_p50/p90``, ``batched_cpu_ms_p50/p90``) and ``run`` (``{qid: [[docid, score], ...]}``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from icml26_shared import UserError, cli_entry
from icml26_shared.io import atomic_dir, dumps_json, write_json

from .embeddings import _sha256

EXPORT_FORMAT, RESULT_FORMAT, VERSION = "crossq-bench-export", "crossq-bench-result", 1
EXPORT_FILES = ("docs.npy", "doc_lengths.npy", "doc_ids.json", "queries.npy", "query_lengths.npy",
                "query_ids.json", "qrels.json")


def write_export(out: Path, docs: list[np.ndarray], doc_ids: list[str], queries: list[np.ndarray],
                 query_ids: list[str], qrels: dict[str, dict[str, int]], source: dict[str, Any],
                 overwrite: bool = False) -> dict[str, Any]:
    """Write an export folder atomically; returns its ``export.json``."""
    if len(docs) != len(doc_ids) or len(queries) != len(query_ids) or not docs or not queries:
        raise ValueError("documents / queries and their ids disagree (or are empty)")
    dims = {v.shape[1] for v in (*docs, *queries)}
    if len(dims) != 1:
        raise ValueError(f"token vectors of several dims: {sorted(dims)}")
    with atomic_dir(Path(out), replace=overwrite,
                    exists_error="{path} exists (pass --overwrite to replace it)") as tmp:
        np.save(tmp / "docs.npy", np.concatenate(docs).astype(np.float16))
        np.save(tmp / "doc_lengths.npy", np.array([len(v) for v in docs], np.int64))
        np.save(tmp / "queries.npy", np.concatenate(queries).astype(np.float16))
        np.save(tmp / "query_lengths.npy", np.array([len(v) for v in queries], np.int64))
        (tmp / "doc_ids.json").write_text(json.dumps([str(d) for d in doc_ids]))
        (tmp / "query_ids.json").write_text(json.dumps([str(q) for q in query_ids]))
        (tmp / "qrels.json").write_text(json.dumps({q: {str(d): int(g) for d, g in r.items()}
                                                    for q, r in qrels.items() if q in set(query_ids)}))
        sums = {f: _sha256(tmp / f) for f in EXPORT_FILES}
        meta = {"format": EXPORT_FORMAT, "version": VERSION, "dim": dims.pop(), "n_docs": len(docs),
                "n_tokens": int(sum(len(v) for v in docs)), "n_queries": len(queries),
                "n_query_tokens": int(sum(len(v) for v in queries)), "source": source,
                "sha256": sums, "id": hashlib.sha256(json.dumps(sums, sort_keys=True).encode()).hexdigest()}
        (tmp / "export.json").write_text(dumps_json(meta, indent=2))
    return meta


def read_export(folder: str | Path) -> dict[str, Any]:
    """An export folder, every file checked: ``meta``, ``X`` (float32), ``offsets``,
    ``doc_ids``, ``queries`` (list of float32 ``[Lq, dim]``), ``query_ids``, ``qrels``."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "export.json").read_text())
    except FileNotFoundError:
        raise UserError(f"{folder} is not a bench export (no export.json)") from None
    except (OSError, ValueError):
        raise UserError(f"{folder}: corrupt export.json") from None
    if not isinstance(meta, dict) or meta.get("format") != EXPORT_FORMAT or meta.get("version") != VERSION:
        raise UserError(f"{folder}: not a {EXPORT_FORMAT} v{VERSION} folder")
    for name in EXPORT_FILES:
        if not (folder / name).is_file():
            raise UserError(f"{folder}: {name} is missing")
        if _sha256(folder / name) != meta.get("sha256", {}).get(name):
            raise UserError(f"{folder}: {name} does not match its checksum (edited or corrupt)")
    X = np.load(folder / "docs.npy", allow_pickle=False).astype(np.float32)
    dl = np.load(folder / "doc_lengths.npy", allow_pickle=False)
    Q = np.load(folder / "queries.npy", allow_pickle=False).astype(np.float32)
    ql = np.load(folder / "query_lengths.npy", allow_pickle=False)
    qoff = np.concatenate([[0], np.cumsum(ql)])
    return {"meta": meta, "X": X, "offsets": np.concatenate([[0], np.cumsum(dl)]).astype(np.int64),
            "doc_ids": json.loads((folder / "doc_ids.json").read_text()),
            "queries": [Q[qoff[i]:qoff[i + 1]] for i in range(len(ql))],
            "query_ids": json.loads((folder / "query_ids.json").read_text()),
            "qrels": json.loads((folder / "qrels.json").read_text())}


def export_docstrings(out: Path, overwrite: bool = False) -> dict[str, Any]:
    """The reproduction's quick docstring corpus (1,200 docstrings + pydoc topics) and its 400
    test queries, MiniLM token states through the PCA-128 head, unit rows (the token states come
    from the reproduction's cache when it has them)."""
    from .config import SCALES
    from .corpus import build_task
    from .experiments import _embed, split_queries
    from .projection import project

    rc = SCALES["quick"]
    task = build_task(rc.n_docs, rc.n_docs, seed=0)
    Hd, Hq, W, _ = _embed(task, rc)
    test = split_queries(len(Hq), rc)["test"]
    qids = [task.query_ids[i] for i in test]
    return write_export(out, project(Hd, W), task.doc_ids, project([Hq[i] for i in test], W), qids,
                        {q: task.qrels[q] for q in qids},
                        {"corpus": "reproduction quick docstrings", "encoder": "all-MiniLM-L6-v2 + PCA-128",
                         "queries": "test split"}, overwrite)


def export_embeddings(emb_folder: Path, queries: Path, qrels: Path, out: Path, id_field: str = "id",
                      text_field: str = "text", overwrite: bool = False) -> dict[str, Any]:
    """A ``crossq embed`` folder's vectors and ``queries`` encoded by that folder's encoder."""
    from .embeddings import read_embeddings
    from .io import read_corpus, read_qrels

    emb = read_embeddings(emb_folder)
    qids, qtexts = read_corpus(queries, id_field, text_field)
    rels = read_qrels(qrels)
    from .encoder import LateInteractionEncoder

    enc = LateInteractionEncoder.from_info(emb.meta["encoder"], emb.projection)
    return write_export(out, emb.vectors(0, len(emb.ids)), emb.ids, enc.encode(qtexts, is_query=True),
                        qids, rels, {"corpus": str(emb_folder), "encoder": emb.meta["encoder"].get("model"),
                                     "queries": str(queries)}, overwrite)


# --- timing -----------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "loadavg": list(os.getloadavg())}


def time_engine(search_one, search_batch, queries: list, query_ids: list[str], batch: int,
                doc_ids: list[str]) -> dict[str, Any]:
    """Per-query ms (p50 / p90) one query per call and ``batch`` queries per call, and the
    single-query run (``{qid: [[docid, score], ...]}``). ``search_one(Q) -> (docs, scores)``;
    ``search_batch(list of Q) -> list of (docs, scores)``; docs are positions in ``doc_ids``."""
    search_one(queries[0])  # warm-up (lazy structures, allocator)
    single, run = [], {}
    for qid, Q in zip(query_ids, queries, strict=True):
        t, c = time.perf_counter(), time.process_time()
        docs, scores = search_one(Q)
        single.append(((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000))
        run[qid] = [[doc_ids[int(d)], float(s)] for d, s in zip(docs, scores, strict=True)]
    batched = []
    for lo in range(0, len(queries), batch):
        group = queries[lo:lo + batch]
        t, c = time.perf_counter(), time.process_time()
        search_batch(group)
        batched.append(((time.perf_counter() - t) * 1000 / len(group),
                        (time.process_time() - c) * 1000 / len(group)))
    return {**percentiles("single", single), **percentiles("batched", batched), "batch": batch, "run": run}


def percentiles(name: str, times: list[tuple[float, float]]) -> dict[str, float]:
    """p50 / p90 of wall ms (``{name}_ms_p50``) and of the process's CPU ms (``{name}_cpu_ms_p50``:
    what a loaded, shared machine inflates least)."""
    w, c = np.array(times).T
    return {f"{name}_ms_p50": float(np.percentile(w, 50)), f"{name}_ms_p90": float(np.percentile(w, 90)),
            f"{name}_cpu_ms_p50": float(np.percentile(c, 50)), f"{name}_cpu_ms_p90": float(np.percentile(c, 90))}


def bench_crossq(data: dict[str, Any], budgets=(2, 4), steps: int = 0, nprobe: int = 4, k: int = 10,
                 batch: int = 32, seed: int = 0) -> list[dict[str, Any]]:
    """crossq at each budget (exhaustive, candidates at ``nprobe``), codec fitted on the corpus
    (``steps`` CrossQ training steps on pseudo-queries; 0 = its greedy-RQ start), plus fp16."""
    from .codecs import get_codec
    from .index import Index

    X, off, ids, Qs = data["X"], data["offsets"], data["doc_ids"], data["queries"]
    rows = []
    for name, B in [*(("crossq", b) for b in budgets), ("fp16", None)]:
        t0 = time.perf_counter()
        codec = get_codec(name)(X.shape[1], B, **({"steps": steps} if name == "crossq" else {}))
        codec.fit(X, off, seed=seed)
        codes = codec.encode(X, off)
        build = time.perf_counter() - t0
        idx = Index(codec, codes, off, ids)
        bpt = (codes.nbytes + sum(a.nbytes for a in codec.search_state().values())
               + 2 * len(ids)) / len(X)  # codes + codebooks + uint16 document lengths
        for mode, p in (("exhaustive", 0), (f"candidates nprobe {nprobe}", nprobe)):
            if name == "fp16" and p:
                continue
            t = time_engine(lambda Q, p=p, idx=idx: idx.search(Q, k, nprobe=p),
                            lambda G, p=p, idx=idx: idx.search_many(G, k, nprobe=p),
                            Qs, data["query_ids"], batch, ids)
            setting = f"{B or X.shape[1] * 2} B/token, {mode}" + (f", {steps} training steps" if name == "crossq" else "")
            rows.append({"engine": "crossq" if name == "crossq" else "crossq fp16", "setting": setting,
                         "build_s": build, "bytes_per_token": bpt, **t})
    return rows


def bench_faiss_ivfpq(data: dict[str, Any], m: int = 16, nprobe: int = 10, depth: int = 256, k: int = 10,
                      batch: int = 32, seed: int = 0) -> dict[str, Any]:
    """faiss ``IndexIVFPQ`` over the token vectors (``4 sqrt(n)`` lists, ``m`` one-byte PQ
    codes, inner product), each query token's ``depth`` nearest tokens at ``nprobe`` lists giving
    candidate documents, re-ranked by exact MaxSim on the fp16 token vectors (ColBERTv1's
    end-to-end retrieval). Bytes per token: the faiss index (codes, ids, quantizers) plus the fp16
    vectors the re-ranking reads."""
    import faiss
    import torch

    from .codecs import get_codec
    from .index import Index

    X, off, ids = data["X"], data["offsets"], data["doc_ids"]
    d = X.shape[1]
    nlist = int(4 * np.sqrt(len(X)))
    t0 = time.perf_counter()
    quant = faiss.IndexFlatIP(d)
    ivf = faiss.IndexIVFPQ(quant, d, nlist, m, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = seed
    ivf.train(X)
    ivf.add(X)
    ivf.nprobe = nprobe
    fp16 = get_codec("fp16")(d)
    fp16.fit(X, off)
    rerank = Index(fp16, fp16.encode(X, off), off, ids)
    build = time.perf_counter() - t0
    tok_doc = np.repeat(np.arange(len(ids)), np.diff(off))

    def rank(Q, nn):
        docs = np.unique(tok_doc[nn[nn >= 0]])
        s = rerank.scores(torch.from_numpy(np.ascontiguousarray(Q, np.float32)), docs)
        top = torch.topk(s, min(k, len(s)))
        return docs[top.indices.numpy()], top.values.numpy()

    def one(Q):
        return rank(Q, ivf.search(np.ascontiguousarray(Q, np.float32), depth)[1])

    def many(G):  # one faiss call for every query token of the batch, then each query's re-rank
        nn = ivf.search(np.ascontiguousarray(np.concatenate(G), np.float32), depth)[1]
        b = np.concatenate([[0], np.cumsum([len(Q) for Q in G])])
        return [rank(Q, nn[b[i]:b[i + 1]]) for i, Q in enumerate(G)]

    t = time_engine(one, many, data["queries"], data["query_ids"], batch, ids)
    size = faiss.serialize_index(ivf).nbytes
    return {"engine": "faiss IVFPQ + MaxSim re-rank", "build_s": build,
            "setting": f"IVF{nlist},PQ{m}x8, nprobe {nprobe}, depth {depth}, fp16 re-rank",
            "bytes_per_token": (size + X.shape[0] * d * 2 + 2 * len(ids)) / len(X), **t}


def run(folder: Path, out: Path, budgets=(2, 4), steps: int = 0, nprobe: int = 4, batch: int = 32,
        threads: int = 1, faiss_m: int = 16, faiss_nprobe: int = 10, faiss_depth: int = 256,
        overwrite: bool = False) -> dict[str, Any]:
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists (pass --overwrite to replace it)")
    data = read_export(folder)
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    load0 = os.getloadavg()
    rows = bench_crossq(data, budgets, steps, nprobe, batch=batch)
    rows.append(bench_faiss_ivfpq(data, faiss_m, faiss_nprobe, faiss_depth, batch=batch))
    res = {"format": RESULT_FORMAT, "version": VERSION, "side": "crossq", "export_id": data["meta"]["id"],
           "threads": threads, "machine": {**machine(), "loadavg_before": list(load0)}, "rows": rows}
    write_json(out, res, indent=None)
    return res


# --- merge ------------------------------------------------------------------------------------------


def merge(folder: Path, results: list[Path]) -> tuple[list[dict[str, Any]], str]:
    """Rows of every result JSON (all of the same export), MRR@10 computed here from each row's
    run and the export's qrels; returns ``(rows, markdown table)``."""
    from .io import evaluate

    meta = read_export(folder)
    rows, loads = [], []
    for path in results:
        try:
            res = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            raise UserError(f"{path}: not a readable result JSON") from None
        if not isinstance(res, dict) or res.get("format") != RESULT_FORMAT or res.get("version") != VERSION:
            raise UserError(f"{path}: not a {RESULT_FORMAT} v{VERSION} file")
        if res.get("export_id") != meta["meta"]["id"]:
            raise UserError(f"{path} was measured on another export than {folder}")
        la = [", ".join(f"{x:.1f}" for x in res["machine"].get(k) or ()) for k in ("loadavg_before", "loadavg")]
        loads.append(f"{res.get('side', path)}: load average ({la[0]}) before, ({la[1]}) after, "
                     f"{res.get('threads')} thread(s), {res['machine'].get('cpus')} CPUs "
                     f"({res['machine'].get('cpu')})")
        for r in res["rows"]:
            run = {q: [d for d, _ in hits] for q, hits in r["run"].items()}
            m = evaluate(run, meta["qrels"], k=10, recall_k=(10,))
            rows.append({k: v for k, v in r.items() if k != "run"} | {"mrr@10": m["mrr@10"],
                                                                      "side": res.get("side")})
    ref = next((r for r in rows if r["engine"].startswith("fast-plaid")), rows[0])
    head = ("| engine | setting | B/token | build s | single: wall p50 / p90, CPU p50 (ms) | "
            "batched: wall p50 / p90, CPU p50 (ms per query) | single CPU p50 vs "
            f"{ref['engine']} {ref['setting'].split(',')[0]} | MRR@10 |\n|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['engine']} | {r['setting']} | {r['bytes_per_token']:.1f} | {r['build_s']:.1f} | "
        f"{r['single_ms_p50']:.1f} / {r['single_ms_p90']:.1f}, {r['single_cpu_ms_p50']:.1f} | "
        f"{r['batched_ms_p50']:.1f} / {r['batched_ms_p90']:.1f}, {r['batched_cpu_ms_p50']:.1f} (x{r['batch']}) | "
        f"{r['single_cpu_ms_p50'] / ref['single_cpu_ms_p50']:.2f}x | {r['mrr@10']:.3f} |\n" for r in rows)
    m = meta["meta"]
    note = (f"\n{m['n_docs']:,} documents, {m['n_tokens']:,} token vectors of {m['dim']} dims, "
            f"{m['n_queries']} queries ({m['source'].get('corpus')}). " + "; ".join(loads) + "\n")
    return rows, head + body + note


# --- command line -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from icml26_shared.cli import ArgumentParser, nonneg_int, positive_int

    parser = ArgumentParser(prog="python -m crossq.enginebench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="token vectors of a corpus and its queries, for every engine")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--docstrings", action="store_true", help="the reproduction's quick corpus, test queries")
    src.add_argument("--embeddings", type=Path, help="a `crossq embed` folder (with --queries, --qrels)")
    p.add_argument("--queries", type=Path)
    p.add_argument("--qrels", type=Path)
    p.add_argument("--id-field", default="id")
    p.add_argument("--text-field", default="text")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--overwrite", action="store_true")
    p = sub.add_parser("run", help="time crossq and faiss IVFPQ on an export")
    p.add_argument("export", type=Path)
    p.add_argument("--out", type=Path, required=True, help="result JSON")
    p.add_argument("--budgets", type=positive_int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=nonneg_int, default=0, help="CrossQ training steps (pseudo-queries)")
    p.add_argument("--nprobe", type=positive_int, default=4)
    p.add_argument("--batch", type=positive_int, default=32, help="queries per batched call")
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--faiss-m", type=positive_int, default=16)
    p.add_argument("--faiss-nprobe", type=positive_int, default=10)
    p.add_argument("--faiss-depth", type=positive_int, default=256)
    p.add_argument("--overwrite", action="store_true")
    p = sub.add_parser("merge", help="one table from the result JSONs of one export")
    p.add_argument("export", type=Path)
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--json", type=Path, default=None, help="also write the merged rows here")
    return parser


@cli_entry("crossq.enginebench")
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.command == "export":
        if a.embeddings is not None and (a.queries is None or a.qrels is None):
            raise UserError("--embeddings needs --queries and --qrels")
        meta = (export_docstrings(a.out, a.overwrite) if a.docstrings else
                export_embeddings(a.embeddings, a.queries, a.qrels, a.out, a.id_field, a.text_field,
                                  a.overwrite))
        print(f"export: {a.out} ({meta['n_docs']} documents, {meta['n_tokens']} token vectors, "
              f"{meta['n_queries']} queries)")
    elif a.command == "run":
        res = run(a.export, a.out, tuple(a.budgets), a.steps, a.nprobe, a.batch, a.threads, a.faiss_m,
                  a.faiss_nprobe, a.faiss_depth, a.overwrite)
        print(f"{a.out}: {len(res['rows'])} rows")
    else:
        if a.json is not None and a.json.exists():
            raise UserError(f"{a.json} exists (remove it or choose another --json)")
        rows, table = merge(a.export, a.results)
        if a.json is not None:
            write_json(a.json, rows, indent=2)
        print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
