"""Benchmark rows for ``block_sparse_attention`` in the kernels' long-format CSV schema
(op, provider, shape, metric, median, p20, p80, device, version).

Providers: ``block_sparse`` (this op, dispatched: Triton on CUDA, the reference on CPU) at each
density, and ``sdpa`` (``torch.nn.functional.scaled_dot_product_attention``, causal, dense, GQA
through ``enable_gqa`` so no K/V copy is timed; on a GPU this is FlashAttention-2 via PyTorch). Masks are random causal block masks that always keep
the sink column and the diagonal, at the requested density of the causal blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import block_sparse_attention


def causal_block_mask(n: int, density: float, heads: int, seed: int = 0,
                      device: str | torch.device = "cpu") -> torch.Tensor:
    """``[1, heads, n, n]`` bool: sink column + diagonal + random lower-triangle blocks so that
    about ``density`` of the ``n(n+1)/2`` causal blocks are kept."""
    g = torch.Generator().manual_seed(seed)
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    mask = torch.rand(heads, n, n, generator=g) < density
    mask = (mask & tril) | torch.eye(n, dtype=torch.bool)
    mask[..., 0] = True
    return mask[None].to(device)


def run(seq_lens: Sequence[int] = (1024, 4096), densities: Sequence[float] = (0.1, 0.25),
        heads: int = 8, kv_heads: int = 8, head_dim: int = 64, block_size: int = 64,
        dtype: torch.dtype | None = None, device: str | None = None, repeats: int = 5,
        warmup: int = 1) -> list[dict]:
    """Time the op against dense causal SDPA side by side; one row per (provider, shape)."""
    from icml26_shared.eval import compare

    from .. import __version__

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if device == "cuda" else torch.float32)
    dev_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    rows = []
    for t in seq_lens:
        g = torch.Generator(device="cpu").manual_seed(t)
        q = torch.randn(1, heads, t, head_dim, generator=g).to(device, dtype)
        k = torch.randn(1, kv_heads, t, head_dim, generator=g).to(device, dtype)
        v = torch.randn(1, kv_heads, t, head_dim, generator=g).to(device, dtype)
        n = math.ceil(t / block_size)
        fns = {"sdpa": lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=heads != kv_heads)}
        for dens in densities:
            mask = causal_block_mask(n, dens, heads, device=device)
            fns[f"block_sparse@{dens:g}"] = (
                lambda q=q, k=k, v=v, m=mask: block_sparse_attention(
                    q, k, v, m, block_size=block_size, causal=True))
        timings = compare(fns, warmup=warmup, repeats=repeats)
        shape = f"B1_H{heads}_Hkv{kv_heads}_T{t}_D{head_dim}_bs{block_size}_{str(dtype).split('.')[-1]}"
        for name, tm in timings.items():
            rows.append({"op": "block_sparse_attention", "provider": name, "shape": shape,
                         "metric": "time_s", "median": tm.median, "p20": tm.p20, "p80": tm.p80,
                         "device": dev_name, "version": __version__})
    return rows


__all__ = ["causal_block_mask", "run"]
