"""Estimation cost (CPU-s, one thread) of 0.3.2's key-pooled default vs 0.3.3's (b, 1), random Q/K,
4 heads, d = 64, block 64, density 0.25. Usage: uv run python packages/unisparse/scripts/estimate_cost.py"""
import time

import torch
from unisparse.sparse import estimate_block_mask

torch.set_num_threads(1)
for n in (8192, 32768):
    g = torch.Generator().manual_seed(n)
    q = torch.randn(1, 4, n, 64, generator=g)
    k = torch.randn(1, 4, n, 64, generator=g)
    for name, gr in (("0.3.2 (b,b/4)", (64, 16)), ("0.3.3 (b,1)", ((64, 1),))):
        estimate_block_mask(q, k, block_size=64, density=0.25, granularities=gr)
        ts = []
        for _ in range(2):
            t0 = time.process_time()
            estimate_block_mask(q, k, block_size=64, density=0.25, granularities=gr)
            ts.append(time.process_time() - t0)
        print(n, name, f"{min(ts):.3f} CPU-s", flush=True)
