"""fast-plaid on a crossq bench export: build at nbits 2 and 4, time search on the export's queries.

Runs in its own environment (fast-plaid pins torch 2.11; it imports numpy, torch and fast_plaid
only, never crossq):

    uv run --isolated --no-project --with "fast-plaid==1.7.0.2110" \\
        python packages/crossq/bench/fastplaid_bench.py EXPORT --out fastplaid.json

EXPORT is a folder from ``python -m crossq.enginebench export``; the JSON it writes is merged
with crossq's by ``python -m crossq.enginebench merge`` (which computes MRR@10 from the runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

FILES = ("docs.npy", "doc_lengths.npy", "doc_ids.json", "queries.npy", "query_lengths.npy",
         "query_ids.json", "qrels.json")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_export(folder: Path):
    import numpy as np

    meta_file = folder / "export.json"
    if not meta_file.is_file():
        sys.exit(f"fastplaid_bench: error: {folder} is not a bench export (no export.json)")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != "crossq-bench-export" or meta.get("version") != 1:
        sys.exit(f"fastplaid_bench: error: {folder}: not a crossq-bench-export v1 folder")
    for name in FILES:
        if not (folder / name).is_file() or _sha256(folder / name) != meta["sha256"].get(name):
            sys.exit(f"fastplaid_bench: error: {folder}: {name} is missing or edited")
    X = np.load(folder / "docs.npy").astype(np.float32)
    dl = np.load(folder / "doc_lengths.npy")
    Q = np.load(folder / "queries.npy").astype(np.float32)
    ql = np.load(folder / "query_lengths.npy")
    doff, qoff = np.concatenate([[0], np.cumsum(dl)]), np.concatenate([[0], np.cumsum(ql)])
    docs = [X[doff[i]:doff[i + 1]] for i in range(len(dl))]
    queries = [Q[qoff[i]:qoff[i + 1]] for i in range(len(ql))]
    return (meta, docs, json.loads((folder / "doc_ids.json").read_text()), queries,
            json.loads((folder / "query_ids.json").read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nbits", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--batch", type=int, default=32, help="queries per batched call")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-ivf-probe", type=int, default=8, help="fast-plaid's default")
    ap.add_argument("--n-full-scores", type=int, default=4096, help="fast-plaid's default")
    a = ap.parse_args()
    if a.out.exists():
        sys.exit(f"fastplaid_bench: error: {a.out} exists")
    os.environ.setdefault("RAYON_NUM_THREADS", str(a.threads))
    import numpy as np
    import torch
    from fast_plaid import search as fps

    torch.set_num_threads(a.threads)
    meta, docs, doc_ids, queries, qids = read_export(a.export)
    n_tokens = sum(len(d) for d in docs)
    load0 = list(os.getloadavg())
    rows = []
    for nbits in a.nbits:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            engine = fps.FastPlaid(index=tmp, device="cpu")
            engine.create(documents_embeddings=[torch.from_numpy(d) for d in docs], nbits=nbits)
            build = time.perf_counter() - t0
            files = {p.name: p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file()}
            size = sum(v for k, v in files.items() if not k.startswith("embeddings"))

            def search(G, engine=engine):
                return engine.search(queries_embeddings=[torch.from_numpy(q) for q in G], top_k=10,
                                     n_full_scores=a.n_full_scores, n_ivf_probe=a.n_ivf_probe,
                                     show_progress=False, n_processes=1)

            search(queries[:1])  # warm-up
            single, run = [], {}
            for qid, q in zip(qids, queries, strict=True):
                t, c = time.perf_counter(), time.process_time()
                hits = search([q])[0]
                single.append(((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000))
                run[qid] = [[doc_ids[int(d)], float(s)] for d, s in hits]
            batched = []
            for lo in range(0, len(queries), a.batch):
                group = queries[lo:lo + a.batch]
                t, c = time.perf_counter(), time.process_time()
                search(group)
                batched.append(((time.perf_counter() - t) * 1000 / len(group),
                                (time.process_time() - c) * 1000 / len(group)))
        rows.append({"engine": "fast-plaid 1.7", "setting": f"nbits {nbits}, n_ivf_probe {a.n_ivf_probe}, "
                     f"n_full_scores {a.n_full_scores}", "build_s": build,
                     "bytes_per_token": size / n_tokens, "index_files": files,
                     **{f"{name}_{kind}ms_p{p}": float(np.percentile(np.array(times)[:, col], p))
                        for name, times in (("single", single), ("batched", batched))
                        for col, kind in ((0, ""), (1, "cpu_")) for p in (50, 90)},
                     "batch": a.batch, "run": run})
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "")
    res = {"format": "crossq-bench-result", "version": 1, "side": "fast-plaid", "export_id": meta["id"],
           "threads": a.threads, "versions": {"torch": torch.__version__},
           "machine": {"cpu": cpu, "cpus": os.cpu_count(), "loadavg": list(os.getloadavg()),
                       "loadavg_before": load0}, "rows": rows}
    a.out.write_text(json.dumps(res))
    print(f"{a.out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
