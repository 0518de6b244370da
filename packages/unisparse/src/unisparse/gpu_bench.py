"""GPU benchmark for CI/gpu-check and the ``full`` scale: the Triton block-sparse kernel and a
FlexAttention ``BlockMask`` on the same UniSparse mask (and the estimation itself) against dense
SDPA (FlashAttention-2 inside PyTorch) at 32k–128k tokens, in one run. Not yet run on a GPU by
us (no device was lent to this package's sessions).

    python -m unisparse.gpu_bench [--lens 32768 65536 131072] [--density 0.25] [--csv out.csv]

Prints one line per length and writes the kernels' long-format CSV rows. Target: >= 2x at 128k.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

FIELDS = ("op", "provider", "shape", "metric", "median", "p20", "p80", "device", "version")


def run(lens=(32768, 65536, 131072), density: float = 0.25, heads: int = 32, kv_heads: int = 8,
        head_dim: int = 128, block: int = 128, repeats: int = 5) -> list[dict]:
    import torch

    from icml26_kernels import block_sparse_attention
    from icml26_shared.eval import compare

    from . import __version__
    from .config import SparseConfig
    from .fast import flex_attention_blocks
    from .sparse import estimate_block_mask

    if not torch.cuda.is_available():
        from icml26_shared import UserError

        raise UserError("the GPU benchmark needs a CUDA device (run it on a GPU machine)")
    dev = torch.cuda.get_device_name(0)
    cfg = SparseConfig(block_size=block, density=density)
    rows = []
    for n in lens:
        g = torch.Generator(device="cuda").manual_seed(n)
        q = torch.randn(1, heads, n, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, kv_heads, n, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, kv_heads, n, head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
        mask = estimate_block_mask(q, k, cfg)
        fns = {
            "sdpa_flash": lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
            "block_sparse_kernel": lambda q=q, k=k, v=v, m=mask: block_sparse_attention(
                q, k, v, m, block_size=block, causal=True),
            "flex_blockmask": lambda q=q, k=k, v=v, m=mask: flex_attention_blocks(q, k, v, m, block),
            "unisparse_estimate": lambda q=q, k=k: estimate_block_mask(q, k, cfg),
        }
        tm = compare(fns, warmup=2, repeats=repeats)
        shape = f"B1_H{heads}_Hkv{kv_heads}_T{n}_D{head_dim}_bs{block}_d{density:g}_bf16"
        for name, t in tm.items():
            rows.append({"op": "unisparse_prefill", "provider": name, "shape": shape,
                         "metric": "time_s", "median": t.median, "p20": t.p20, "p80": t.p80,
                         "device": dev, "version": __version__})
        kern = tm["sdpa_flash"].median / tm["block_sparse_kernel"].median
        total = tm["sdpa_flash"].median / (tm["block_sparse_kernel"].median
                                           + tm["unisparse_estimate"].median)
        print(f"{n:>7} tokens: kernel {kern:.2f}x, with estimation {total:.2f}x vs SDPA", flush=True)
        del q, k, v, mask
        torch.cuda.empty_cache()
    return rows


def full_recipe(out_dir: Path, seed: int):
    """``reproduce --scale full``: end-to-end needle accuracy on a user-supplied model at 4096
    tokens (24 documents, each method at density 0.3, paired interval against 0.95 x dense), then
    the GPU speed rows. Needs CUDA and ``UNISPARSE_MODEL``; checked before anything loads."""
    import os

    import torch

    from icml26_shared import ClaimCheck, Results, UserError

    from .registry import CLAIMS, DESCRIPTOR

    if not torch.cuda.is_available():
        raise UserError("the full scale is the GPU recipe (end-to-end needle accuracy on your model, "
                        "Triton / FlexAttention vs SDPA at 32k-128k tokens) and needs a CUDA "
                        "device; none is visible here")
    model_dir = os.environ.get("UNISPARSE_MODEL")
    if not model_dir:
        raise UserError("the full scale needs UNISPARSE_MODEL=<local Hugging Face causal-LM folder "
                        "with config.json, weights and tokenizer files>; it is not set")
    from icml26_shared.hf import check_model_dir

    check_model_dir(model_dir)  # the core's folder check: one line naming what is missing
    from .experiments import _claims_needle
    from .needle import needle_study

    # the same study as `unisparse needle`: UniSparse first, its measured per-layer density the
    # budget of the threshold baselines, MInference's patterns searched on a dev document
    study = needle_study(model_dir, length=4096, n_docs=24, density=0.3, block=128, workers=1,
                         new_tokens=8, dtype="bf16", seed=seed, device="cuda")
    e2e = {arm: {"correct": [r[arm]["correct"] for r in study["per_doc"]]}
           for arm in study["per_doc"][0]}
    torch.cuda.empty_cache()
    rows = run()
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
    for m, cell in study["summary"].items():
        res.add("end_to_end", m, "needle_accuracy", e2e[m]["correct"], length=4096,
                density=cell["density"], minus_dense=list(cell.get("minus_dense", ())))
    res.claims.append(_claims_needle(e2e, 4096, 0.3))
    by = {}
    for r in rows:
        by.setdefault(r["shape"], {})[r["provider"]] = r["median"]
    for shape, t in by.items():
        res.add("speed_gpu", "unisparse", "speedup_vs_dense",
                t["sdpa_flash"] / (t["block_sparse_kernel"] + t["unisparse_estimate"]), shape=shape)
    last = list(by.values())[-1]
    speed = last["sdpa_flash"] / (last["block_sparse_kernel"] + last["unisparse_estimate"])
    res.claims.append(ClaimCheck.compare(CLAIMS[2], speed, threshold=2.61,
                                         note="GPU, longest length, estimation included"))
    write_csv(rows, Path(out_dir) / "gpu_bench.csv")
    return res


def write_csv(rows: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    return path


def main(argv: list[str] | None = None) -> int:
    from icml26_shared import cli_entry

    return cli_entry("unisparse")(_main)(argv)


def _main(argv: list[str] | None = None) -> int:
    from icml26_shared.cli import ArgumentParser

    ap = ArgumentParser(prog="python -m unisparse.gpu_bench", description=__doc__)
    ap.add_argument("--lens", type=int, nargs="+", default=[32768, 65536, 131072])
    ap.add_argument("--density", type=float, default=0.25)
    ap.add_argument("--csv", type=Path, default=Path("gpu_bench_unisparse.csv"))
    args = ap.parse_args(argv)
    rows = run(tuple(args.lens), args.density)
    print(f"wrote {write_csv(rows, args.csv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
