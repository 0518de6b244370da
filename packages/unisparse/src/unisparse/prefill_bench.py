"""CPU prefill benchmark (a benchmark row, not a claim): one prefill of a causal LM, dense SDPA
against the UniSparse patch, thread CPU time, interleaved, and the break-even length.

    python -m unisparse.prefill_bench --model smollm2 --lengths 2048 4096 --density 0.25

The prompt is a ``zen`` needle document (``tasks.needle_prompt``) of each length; every layer goes
sparse (``min_seq_len=1``); the forward keeps the logits of the last position only. The
break-even is the length where the sparse / dense CPU-time ratio crosses 1, interpolated in
log-length between the measured lengths (``None`` when it does not cross inside them).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time


def prefill_cpu_times(model, tok, lengths, *, density: float = 0.25, block: int = 64,
                      repeats: int = 2, seed: int = 0, log=None) -> list[dict]:
    """Per length: median thread CPU time of a dense and a UniSparse prefill (``repeats``
    interleaved pairs after one short warm-up of each path) and their ratio."""
    import torch

    from .e2e import documents
    from .io import patch, unpatch

    log = log or (lambda _m: None)

    def run(x, sparse: bool) -> float:
        if sparse:
            patch(model, method="unisparse", density=density, block_size=block, min_seq_len=1)
        try:
            t0 = time.thread_time()
            with torch.no_grad():
                model(x, use_cache=False, logits_to_keep=1)
            return time.thread_time() - t0
        finally:
            unpatch(model)

    warm = torch.tensor([documents(tok, 4 * block, 1, seed, offset=600, haystack="zen")[0][0]])
    run(warm, False), run(warm, True)  # one warm-up of each path, on a short prompt
    rows = []
    for n in lengths:
        ids = documents(tok, n, 1, seed, offset=600, haystack="zen")[0][0]
        x = torch.tensor([ids])
        times: dict = {"dense": [], "unisparse": []}
        for _ in range(repeats):  # interleaved pairs
            for arm in times:
                times[arm].append(run(x, arm == "unisparse"))
        d, s = statistics.median(times["dense"]), statistics.median(times["unisparse"])
        rows.append({"n": len(ids), "dense_cpu_s": d, "unisparse_cpu_s": s, "ratio": s / d,
                     "density": density, "block": block, "repeats": repeats})
        log(f"prefill {len(ids)} tokens: dense {d:.2f} CPU-s, UniSparse {s:.2f} CPU-s "
            f"(sparse / dense {s / d:.2f})")
    return rows


def break_even(rows: list[dict]) -> float | None:
    """The length where sparse / dense crosses 1 (log-length interpolation between the first
    pair of consecutive measured lengths that brackets it); ``None`` when none does."""
    rows = sorted(rows, key=lambda r: r["n"])
    if rows and rows[0]["ratio"] <= 1:
        return float(rows[0]["n"])  # already ahead at the shortest length measured
    for a, b in zip(rows, rows[1:]):
        if a["ratio"] > 1 >= b["ratio"]:
            f = (a["ratio"] - 1) / (a["ratio"] - b["ratio"])
            return math.exp(math.log(a["n"]) + f * (math.log(b["n"]) - math.log(a["n"])))
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m unisparse.prefill_bench", description=__doc__
                                .split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="local HF folder or 'smollm2'")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--density", type=float, default=0.25)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    a = p.parse_args(argv)
    import json

    import torch

    from .e2e import log
    from .io import load_model

    torch.set_num_threads(1)
    model, tok = load_model(a.model, a.dtype)
    rows = prefill_cpu_times(model, tok, a.lengths, density=a.density, block=a.block_size,
                             repeats=a.repeats, log=log)
    print(json.dumps({"rows": rows, "break_even": break_even(rows)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
