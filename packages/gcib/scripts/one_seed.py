"""One seed of clean ml-100k at a given lr / batch (default: the grid's choice for every method,
lr 1e-2, batch 2048), d = 32, L = 2, up to 300 epochs, patience 20, one thread: an indicative check
outside `quick`, e.g.

    uv run --no-sync python packages/gcib/scripts/one_seed.py gcib,lightgcn,lightgcn-merged
"""

from __future__ import annotations

import argparse
import time

import torch
from gcib import evaluate, leave_one_out, load_ml100k, method_config, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("methods")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    split = leave_one_out(load_ml100k())
    for m in a.methods.split(","):
        t = time.process_time()
        r = train(split, method_config(m, lr=a.lr, batch_size=a.batch_size, dim=32, layers=2, epochs=300,
                                       patience=20, seed=a.seed))
        ev = evaluate(r.model, split, "test", "full", r.mask_mode)
        print(f"{m}: best epoch {r.best_epoch}, valid HR@10 {r.valid['hr@10']:.4f}, test HR@10 {ev['hr@10']:.4f} "
              f"NDCG@10 {ev['ndcg@10']:.4f}, {time.process_time() - t:.0f} CPU-s", flush=True)


if __name__ == "__main__":
    main()
