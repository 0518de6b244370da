"""Exploration (0.3.6, issue 13 item 4, idea "bigger tiles"): would G adjacent query blocks run
as one fused-SDPA tile over the *union* of their kept key blocks (with a mask exact for each
row's own selection) pay on CPU? It pays only if the union's extra scores (union x G / kept)
cost less than what the larger query tile saves per score element. Prints both, one thread:
(1) the union overhead of UniSparse's masks (block 64, density 0.25) on random Q/K at 32k (the
speed benchmark's inputs) and on SmolLM2 Q/K of one *dev* needle document at 4096 tokens
(layers 2, 8, 14); (2) the CPU flash kernel's CPU time per score element for L-query tiles
(additive mask, 4096 keys). Usage:
OMP_NUM_THREADS=1 uv run python packages/unisparse/scripts/cpu_union_tiles.py"""
import time

import torch
import torch.nn.functional as F
from unisparse.e2e import documents
from unisparse.fidelity import capture
from unisparse.sparse import estimate_block_mask

from icml26_shared.data import load_smollm2

torch.set_num_threads(1)


def overhead(mask, G):
    nq = mask.shape[1] // G * G
    m = mask[:, :nq].reshape(mask.shape[0], nq // G, G, -1)
    return round(m.any(2).sum().item() * G / m.sum().item(), 2)


g = torch.Generator().manual_seed(32768)
q, k = (torch.randn(1, 4, 32768, 64, generator=g) for _ in range(2))
mask = estimate_block_mask(q, k, block_size=64, density=0.25)[0]
print("random 32k: union x G / kept", [(G, overhead(mask, G)) for G in (2, 4, 8)])
model, tok = load_smollm2()
ids, _, _ = documents(tok, 4096, 1, 0, offset=500)[0]  # a dev document
for layer, (q, k, _v) in capture(model.eval(), ids, (2, 8, 14)).items():
    mask = estimate_block_mask(q, k, block_size=64, density=0.25)[0]
    print(f"SmolLM2 dev doc, layer {layer}: union x G / kept",
          [(G, overhead(mask, G)) for G in (2, 4, 8)])
for L in (64, 128, 256, 512, 1024):
    S, B = 4096, max(1, (1 << 24) // (L * 4096))
    qq, kk, vv = torch.randn(B, 1, L, 64), torch.randn(B, 1, S, 64), torch.randn(B, 1, S, 64)
    am, ts = torch.zeros(L, S), []
    for _ in range(3):
        t0 = time.thread_time()
        F.scaled_dot_product_attention(qq, kk, vv, attn_mask=am)
        ts.append(time.thread_time() - t0)
    print(f"flash kernel, {L}-query tiles: {min(ts) / (B * L * S) * 1e9:.2f} ns of CPU per score")
