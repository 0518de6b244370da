"""Run by test_distributed.py, once in-process and once under 2 processes (torch.distributed.run)."""

import json
import os
import sys

import torch
from mtgrpo.config import TinyPolicyConfig, TrainConfig
from mtgrpo.io import build_tiny
from mtgrpo.tasks import make_synthetic
from mtgrpo.trainer import MTGRPOTrainer


def parity(resp, ex):
    return float(len(resp) % 2)


def run(accelerator=None, steps: int = 2) -> dict:
    torch.set_num_threads(1)
    tasks = []
    for n in ("copy:easy", "sort:easy", "add:easy"):
        t = make_synthetic(n, n_train=60, n_test=5)
        t.verifier = parity
        tasks.append(t)
    pol = build_tiny(0, TinyPolicyConfig(d=16, layers=1, heads=2, ctx=24))
    cfg = TrainConfig(method="mtgrpo", batch_prompts=6, group_size=4, max_new_tokens=4, N_rs=1,
                      filter="lenient", lr=1e-3)
    tr = MTGRPOTrainer(pol, tasks, cfg, accelerator=accelerator)
    for _ in range(steps):
        tr.step()
    return {"z": [h["z"] for h in tr.history] + [tr.z.tolist()],
            "share": [h["share"] for h in tr.history]}


if __name__ == "__main__":
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    out = run(acc)
    if acc.process_index == 0:
        out["world"] = acc.num_processes
        with open(sys.argv[1], "w") as f:
            json.dump(out, f)
    acc.wait_for_everyone()
    os._exit(0)
