"""The λ·J term in our own trainer (the mutant lambda-j-sign-flipped in mutants.toml): with the
improvement clipped to 0, s_k = λ·J_k alone, so one step must move weight toward the task the
trainer measured as least accurate."""

import numpy as np
import torch
from mtgrpo.config import TinyPolicyConfig, TrainConfig
from mtgrpo.io import build_tiny, sft_warmstart
from mtgrpo.tasks import make_synthetic
from mtgrpo.trainer import MTGRPOTrainer

TINY = TinyPolicyConfig(d=16, layers=1, heads=2, ctx=24, sft_steps=30, sft_batch=32)


def test_trainer_moves_weight_toward_the_least_accurate_task():
    tasks = [make_synthetic(n, n_train=200, n_test=20) for n in ("copy:easy", "sort:easy", "add:easy")]
    torch.manual_seed(0)
    pol = build_tiny(0, TINY)
    sft_warmstart(pol, tasks, TINY, seed=0)
    cfg = TrainConfig(method="mtgrpo", batch_prompts=6, group_size=4, max_new_tokens=5, N_rs=2, lr=1e-3,
                      lam=1.0, improvement_clip=0.0, acc_ema_init="first")
    tr = MTGRPOTrainer(pol, tasks, cfg)
    tr.step()
    J, z = tr.weighter.J, tr.z
    assert np.isfinite(J).all() and J.max() > J.min(), J
    assert z[np.argmax(J)] == z.min() < 1 / 3 < z[np.argmin(J)], (J, z)
