"""Exploration (0.3.4, issue 13 item 4): the kept blocks gathered per group of query blocks with
the same count, then the public fused ``F.scaled_dot_product_attention`` (CPU flash kernel, boolean
causal mask) instead of ``grouped``'s bmm + softmax + bmm. Prints the max difference to
``grouped`` and CPU-time ratios to dense causal SDPA, side by side in one run (one thread).
Usage: OMP_NUM_THREADS=1 uv run python packages/unisparse/scripts/cpu_sdpa_gathered.py 8192"""
import math
import sys
import time

import torch
import torch.nn.functional as F
from unisparse.fast import grouped_attention
from unisparse.sparse import estimate_block_mask

torch.set_num_threads(1)

def sdpa_grouped(q, k, v, mask, bs, scale=None):
    b, h, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    nq, nk = math.ceil(t / bs), math.ceil(s / bs)
    assert t % bs == 0 and s % bs == 0
    mask = mask.expand(b, h, nq, nk)
    qb = q.reshape(b * h * nq, 1, bs, d)
    kb = k.reshape(b * hkv * nk, bs, d)
    vb = v.reshape(b * hkv * nk, bs, d)
    counts = mask.sum(-1).reshape(-1)
    order = torch.argsort(counts, stable=True)
    runs = torch.unique_consecutive(counts[order], return_counts=True)
    kidx = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True).reshape(-1, nk)
    unit = torch.arange(b * h * nq)
    kv_base = ((unit // (h * nq)) * hkv + (unit // nq) % h // (h // hkv)) * nk
    qfirst = (unit % nq) * bs + (s - t)
    out = torch.empty(b * h * nq, 1, bs, d)
    local = torch.arange(bs)
    u0 = 0
    for c, n in zip(runs[0].tolist(), runs[1].tolist()):
        step = max(1, (1 << 22) // (c * bs * bs))
        for g0 in range(u0, u0 + n, step):
            units = order[g0:min(u0 + n, g0 + step)]
            g = len(units)
            idx = kidx[units, :c]
            flat = (kv_base[units, None] + idx).reshape(-1)
            kg = kb.index_select(0, flat).reshape(g, 1, c * bs, d)
            vg = vb.index_select(0, flat).reshape(g, 1, c * bs, d)
            kpos = (idx[:, :, None] * bs + local).reshape(g, 1, c * bs)
            qpos = qfirst[units][:, None] + local
            am = (kpos[:, :, None, :] <= qpos[:, None, :, None])  # [g,1,bs,c*bs]
            o = F.scaled_dot_product_attention(qb.index_select(0, units), kg, vg, attn_mask=am, scale=scale)
            out.index_copy_(0, units, o)
        u0 += n
    return out.reshape(b, h, nq * bs, d)

N = int(sys.argv[1])
bs = 64
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 4, N, 64, generator=g) for _ in range(3))
mask = estimate_block_mask(q, k, block_size=bs, density=0.25)
ref = grouped_attention(q, k, v, mask, bs)
o2 = sdpa_grouped(q, k, v, mask, bs)
print("maxdiff", float((o2 - ref).abs().max()))


def tm(f, r=2):
    ts = []
    for _ in range(r):
        t0 = time.process_time()
        f()
        ts.append(time.process_time() - t0)
    return min(ts)


td = tm(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
tg = tm(lambda: grouped_attention(q, k, v, mask, bs))
ts = tm(lambda: sdpa_grouped(q, k, v, mask, bs))
te = tm(lambda: estimate_block_mask(q, k, block_size=bs, density=0.25))
print(f"N={N} dense {td:.3f} grouped {tg:.3f} ({td / tg:.2f}x) sdpa-grouped {ts:.3f} "
      f"({td / ts:.2f}x) estimate {te:.3f} (attention only; estimation not included)")
