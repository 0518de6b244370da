"""Dev (0.3.7): at which prompt length does *dense* SmolLM2-135M-Instruct still retrieve the pass
key? Dense accuracy over depths per haystack and length on DEV documents only (seed offset 700;
the needle claim's test documents use 900, MInference's dev 500, the 0.3.3-0.3.4 diagnoses 300).
Usage: uv run python packages/unisparse/scripts/dev_passkey_length.py HAYSTACK N_DOCS LEN [LEN ...]
(0.3.7's runs: ``repeat 6 2048 3072 4096`` and ``varied 6 2048 3072 4096``.)"""
import sys
import time

import torch
from unisparse.e2e import correct, documents
from unisparse.io import load_model
from unisparse.needle import prefill_decode

torch.set_num_threads(1)
haystack, n = sys.argv[1], int(sys.argv[2])
model, tok = load_model("smollm2", "fp32")
for length in map(int, sys.argv[3:]):
    docs = documents(tok, length, n, 0, offset=700, haystack=haystack)
    t0, hits = time.process_time(), []
    for ids, key, _span in docs:
        _, gen = prefill_decode(model, ids, 7)
        hits.append(int(correct(tok, gen, key)))
        print(f"  {haystack} {length} key {key} -> {tok.decode(gen)!r}", flush=True)
    print(f"{haystack} {length}: dense {sum(hits)}/{n} {hits} "
          f"({(time.process_time() - t0) / n:.1f} CPU-s per document)", flush=True)
