"""Per-query CPU ms of one-at-a-time vs batched (32 a call) exhaustive crossq search on a bench
export's first 64 queries: python bench/batched_check.py EXPORT CODEC [BYTES_PER_TOKEN]."""

import sys
import time

import torch
from crossq.codecs import get_codec
from crossq.enginebench import read_export
from crossq.index import Index

torch.set_num_threads(1)
d = read_export(sys.argv[1])
X, off, name = d["X"], d["offsets"], sys.argv[2]
codec = get_codec(name)(X.shape[1], int(sys.argv[3]) if len(sys.argv) > 3 else None,
                        **({"steps": 0} if name == "crossq" else {}))
codec.fit(X, off, seed=0)
idx = Index(codec, codec.encode(X, off), off, d["doc_ids"])
Qs = d["queries"][:64]
idx.search(Qs[0])
for label, fn in (("single", lambda: [idx.search(Q) for Q in Qs]),
                  ("batched32", lambda: [idx.search_many(Qs[i:i + 32]) for i in range(0, len(Qs), 32)])):
    c = time.process_time()
    fn()
    print(label, round((time.process_time() - c) * 1000 / len(Qs), 2), "CPU ms/query")
