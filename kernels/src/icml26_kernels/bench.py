"""Kernel benchmarks to one long-format CSV (Liger-Kernel's layout):
``op, provider, shape, metric, median, p20, p80, device, version``.

    python -m icml26_kernels.bench --out kernels-bench.csv [--quick]

Providers are timed side by side in one run (interleaved rounds), so their ratio is what to read.
On CPU the Triton provider is skipped (the interpreter is a correctness tool, not a fast path).
Other ops add themselves to ``BENCHES``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

import torch

from . import __version__
from ._dispatch import ENV

FIELDS = ["op", "provider", "shape", "metric", "median", "p20", "p80", "device", "version"]
Row = dict[str, object]


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@contextmanager
def forced_backend(name: str):
    old = os.environ.get(ENV)
    os.environ[ENV] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def _peak_mb(fn: Callable[[], object]) -> float | None:
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def bench_token_logprobs(quick: bool = False,
                         shapes: list[tuple[int, int, int]] | None = None) -> Iterable[Row]:
    from icml26_shared.eval import compare

    from .token_logprobs import token_logprobs as op

    dev = _device()
    shapes = shapes or [(2, 128, 32000), (4, 256, 49152)] if quick or dev == "cpu" else \
        [(4, 512, 32000), (4, 1024, 128256), (8, 1024, 151936)]
    for b, t, v in shapes:
        dtype = torch.bfloat16 if dev == "cuda" else torch.float32
        x = torch.randn(b, t, v, device=dev, dtype=dtype, requires_grad=True)
        ids = torch.randint(0, v, (b, t), device=dev)

        def torch_naive(x=x, ids=ids):
            lp = torch.log_softmax(x.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
            lp.sum().backward()

        def ours(backend: str, x=x, ids=ids) -> Callable[[], None]:
            def run() -> None:
                with forced_backend(backend):
                    op(x, ids).sum().backward()
            return run

        providers = {"torch": torch_naive, "reference": ours("reference")}
        if dev == "cuda":
            providers["triton"] = ours("triton")
        timings = compare(providers, warmup=1, repeats=3 if quick else 10)
        shape = f"{b}x{t}x{v}"
        for name, tm in timings.items():
            yield dict(op="token_logprobs", provider=name, shape=shape, metric="fwd_bwd_ms",
                       median=tm.median * 1e3, p20=tm.p20 * 1e3, p80=tm.p80 * 1e3, device=dev,
                       version=__version__)
            peak = _peak_mb(providers[name])
            if peak is not None:
                yield dict(op="token_logprobs", provider=name, shape=shape, metric="peak_mem_mb",
                           median=peak, p20=peak, p80=peak, device=dev, version=__version__)
        x.grad = None


def bench_block_sparse_attention(quick: bool = False) -> Iterable[Row]:
    from .block_sparse_attention.bench import run

    if quick or _device() == "cpu":
        return run(seq_lens=(1024, 4096), repeats=3 if quick else 5)
    return run(seq_lens=(8192, 32768), repeats=10)


BENCHES: dict[str, Callable[[bool], Iterable[Row]]] = {
    "token_logprobs": bench_token_logprobs,
    "block_sparse_attention": bench_block_sparse_attention,
}


def write_csv(rows: Iterable[Row], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow(row)
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m icml26_kernels.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("kernels-bench.csv"))
    p.add_argument("--ops", nargs="*", default=list(BENCHES), choices=list(BENCHES))
    p.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    args = p.parse_args(argv)
    rows = (row for op in args.ops for row in BENCHES[op](args.quick))
    n = write_csv(rows, args.out)
    print(f"wrote {n} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
