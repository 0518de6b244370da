"""Dev diagnosis (0.3.3): last-row recall, whole-map recall and needle-block hit per layer of
SmolLM2 on DEV needle documents (offset 300; the test documents use 900, MInference's dev 500),
for UniSparse's pooling factors (c_q, c_k), the oracle and XAttention at the same budget.
Usage: uv run python packages/unisparse/scripts/dev_key_pooling_fidelity.py N_DOCS"""
import sys
import time

import numpy as np
import torch
from unisparse import core
from unisparse.e2e import documents
from unisparse.fidelity import arm_config, capture
from unisparse.io import load_model
from unisparse.sparse import estimate_block_mask

torch.set_num_threads(1)

n = int(sys.argv[1])
block, dens = 32, 0.25
model, tok = load_model("smollm2")
docs = documents(tok, 1024, n, 0, offset=300)  # dev docs (test: offset 900; MInference dev: 500)
base = arm_config("unisparse", block, dens)
V = {
 "oracle": arm_config("oracle", block, dens),
 "uni": base,
 "q32k1": base.with_(granularities=((32, 1),)),
 "q32k2": base.with_(granularities=((32, 2),)),
 "q32k4": base.with_(granularities=((32, 4),)),
 "q8k8": base.with_(granularities=(8,)),
 "q32k1+q8k8": base.with_(granularities=((32, 1), 8)),
 "q8k1": base.with_(granularities=((8, 1),)),
 "xattn": arm_config("xattention", block, dens),
}
res = {v: {"rr": [], "hit": [], "rec": [], "dens": []} for v in V}
t0 = time.process_time()
for ids, _key, span in docs:
    caps = capture(model, ids, range(30))
    nb = list(range(span[0] // block, (span[1] - 1) // block + 1))
    for _layer, (q, k, _v) in caps.items():
        T = q.shape[2]
        mass = core.block_attention_mass(q, k, block)
        ref = None
        for name, cfg in V.items():
            if name == "xattn":
                cfg = cfg.with_(density=ref)
            m = estimate_block_mask(q, k, cfg)
            d = core.block_density(m, T, T, block)[0]
            if name == "uni":
                ref = float(d.mean())
            r = res[name]
            r["rr"].append(core.row_recall(mass, m, 1)[0].tolist())
            r["hit"].append(core.block_hit(m, nb, 1)[0].float().tolist())
            r["rec"].append(core.attention_recall(q, k, m, block, mass=mass)[0].tolist())
            r["dens"].append(d.tolist())
    print("doc", span, time.process_time() - t0, flush=True)
L = 30
for name, r in res.items():
    rr, hit, rec = (np.array(r[x]).reshape(n, L, -1) for x in ("rr", "hit", "rec"))
    print(f"{name:11s} rr {rr.mean():.3f} rec {rec.mean():.3f} hit {hit.mean():.3f} dens {np.mean(r['dens']):.3f}")
    print("   rr/layer ", " ".join(f"{x:.2f}" for x in rr.mean((0, 2))))
    print("   rec/layer", " ".join(f"{x:.2f}" for x in rec.mean((0, 2))))
