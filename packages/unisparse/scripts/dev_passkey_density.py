"""Dev (0.3.7): the needle claim's nominal density and a look at whether the passkey task tells
sparse rules apart, on DEV documents only (seed offset 700, as ``dev_passkey_length.py``; the
claim's test documents use 900). Every layer sparse through ``needle.run_documents`` (the claim's
own path); per arm accuracy and measured block density.
Usage: uv run python packages/unisparse/scripts/dev_passkey_density.py DTYPE HAYSTACK LEN N_DOCS
DENSITY [DENSITY ...]  (0.3.7's run: ``bf16 repeat 4096 6 0.3 0.25``: UniSparse and A-shape at
each density.)"""
import sys
import time

import torch
from unisparse.e2e import documents
from unisparse.io import load_model
from unisparse.needle import run_documents

torch.set_num_threads(1)
dtype, haystack, length, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
model, tok = load_model("smollm2", dtype)
docs = documents(tok, length, n, 0, offset=700, haystack=haystack)
for dens in map(float, sys.argv[5:]):
    t0 = time.process_time()
    rows = run_documents(model, tok, docs, ("unisparse", "ashape"), block=64, density=dens,
                         new_tokens=7)
    for arm in ("dense", "unisparse", "ashape"):
        acc = [int(r[arm]["correct"]) for r in rows]
        d = sum(r[arm]["density"] for r in rows) / n
        print(f"{dtype} {haystack} {length} nominal {dens:g}: {arm} {sum(acc)}/{n} {acc} "
              f"measured density {d:.3f}", flush=True)
    print(f"  ({time.process_time() - t0:.0f} CPU-s)", flush=True)
