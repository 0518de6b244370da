"""Dev check (0.3.3): end-to-end passkey accuracy, every layer sparse, on DEV documents (offset
300) for UniSparse's pooling factors (c_q, c_k) and the oracle at the same row budget.
Usage: uv run python packages/unisparse/scripts/dev_key_pooling_e2e.py N_DOCS"""
import sys
import time

import torch
from unisparse.e2e import correct, documents
from unisparse.fidelity import arm_config
from unisparse.io import load_model, patch, unpatch
from unisparse.needle import prefill_decode

torch.set_num_threads(1)

n = int(sys.argv[1])
block, dens = 32, 0.25
model, tok = load_model("smollm2")
docs = documents(tok, 1024, n, 0, offset=300)  # dev docs
base = arm_config("unisparse", block, dens)
V = {
 "uni_old": base.with_(granularities=(32, 8)),
 "q32k1": base.with_(granularities=((32, 1),)),
 "q32k1+8": base.with_(granularities=((32, 1), 8)),
 "q32k2": base.with_(granularities=((32, 2),)),
 "oracle": arm_config("oracle", block, dens),
}
acc = {v: [] for v in ["dense", *V]}
t0 = time.process_time()
for ids, key, span in docs:
    _, g = prefill_decode(model, ids, 6)
    acc["dense"].append(correct(tok, g, key))
    for name, cfg in V.items():
        patch(model, method=cfg.method, cfg=cfg, density=cfg.density, min_seq_len=2 * block)
        try:
            _, g = prefill_decode(model, ids, 6)
        finally:
            unpatch(model)
        acc[name].append(correct(tok, g, key))
    print(span, {k: int(v[-1]) for k, v in acc.items()}, f"{time.process_time() - t0:.0f}s", flush=True)
print({k: sum(v) / len(v) for k, v in acc.items()})
