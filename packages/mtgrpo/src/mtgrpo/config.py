"""Configuration. [P] = the paper (arXiv 2602.05547), [C] = the authors' code (rsshyam/MT-GRPO,
``scripts/exp-1/run_mt-grpo_0.2.sh``), [R] = our choice for CPU scale."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from icml26_shared import UserError

ACC_SOURCES = ("round", "generated", "accepted")


@dataclass(frozen=True)
class TrainConfig:
    method: str = "mtgrpo"  # grpo | dapo | sec | sec_dapo | mtgrpo | iwu_only | rps_only | minimax
    steps: int = 100  # global steps (paper: 720 [P Tab. 5]; CPU: ~100 [R])
    batch_prompts: int = 16  # B, prompts per step after filtering (paper 32 [P, C train_batch_size])
    group_size: int = 8  # N rollouts per prompt (paper 72 in Exp-1, 8 in Exp-2 [P]; 8 here [R])
    minibatches: int = 4  # PPO mini-batch updates per step (32 / 8 = 4 [C])
    lr: float = 3e-4  # policy AdamW lr (paper 1e-6 for 3B models [P]; tiny policy 3e-4 [R])
    betas: tuple[float, float] = (0.9, 0.99)  # [P App.]
    eps_low: float = 0.2  # clip ε_low [P]
    eps_high: float = 0.28  # clip-higher ε_high (DAPO, MT-GRPO) [P, C clip_ratio_high]
    agg: str = "token"  # token-mean loss aggregation [C]
    adv_eps: float = 1e-6  # δ in the advantage denominator [C]
    filter: str = "strict"  # zero-gradient filter: strict (Exp-1) | lenient (Exp-2: all-0 / all-1
    # groups, as the authors' code [C]) | constant (any constant group, i.e. zero advantage) [R]
    lam: float = 0.2  # λ in s_k = I_k + λ J_k (0.2 / 0.25 in Exp-1) [P, C lambda_bias]
    weight_lr: float = 0.025  # β, Adam lr on task logits ξ [C bandit.lr]
    weight_decay: float = 1e-5  # Adam L2 decay γ on ξ (1e-5 Exp-1, 1e-4 Exp-2) [C gamma]
    improvement_clip: float = 0.1  # |I_k| clip [C at lr 1e-6; the code scales it by lr/1e-6]
    acc_ema: float = 0.5  # EMA decay of batch accuracy J_k [C]
    acc_ema_init: str = "zero"  # J_k starts at 0 [C]; "first" = the first observation [R]
    acc_source: str = "round"  # what J_k's EMA observes: "round" = each generation round's accuracy
    # over all its groups, before the zero-advantage filter, one EMA update per round [C
    # ray_trainer.py: acc_group_wise over unique_uids, then priority_func.update_batch_acc, both
    # before valid_mask is applied]; "generated" = all rollouts of the step pooled, one update
    # (mtgrpo <= 0.3) [R]; "accepted" = the training batch's groups that pass the filter (issue
    # 50's reading) [R]
    unfilled_warn_steps: int = 3  # warn once per task when its quota stays unfilled this many steps
    # running (RPS spends all N_rs rounds on it) [R]
    M_os: float = 3.0  # oversampling factor [P, C rejection_sample_multiplier]
    N_rs: int = 10  # generation rounds in all, the first included (10 Exp-1, 2 Exp-2)
    # [C max_num_gen_batches]; the paper's text reads as N_rs resampling rounds after the first
    M_acc: float = 5.0  # inflation cap [P]
    inflate: bool = False  # acceptance-aware inflation m_k; off in the authors' 3-task Exp-1
    # scripts [C], on in Algorithm 2 [P] (--inflate)
    rho_ema: float = 0.9  # EMA decay of per-task filter rates ρ_k [R]
    sec_alpha: float = 0.5  # SEC bandit step size [R, SEC paper's α]
    sec_tau: float = 0.2  # SEC Boltzmann temperature [R]
    max_new_tokens: int = 8  # response length cap (paper 4096 [P]) [R]
    temperature: float = 1.0  # rollout temperature [P]
    n_val: int = 4  # samples per held-out prompt at T = 1 (paper 8 [P]) [R]
    eval_every: int = 10  # steps between held-out evaluations [R]
    eval_prompts: int = 100  # held-out prompts per task per evaluation [R]
    seed: int = 0
    micro_batch: int = 0  # sequences per forward/backward (0: a whole PPO mini-batch) [R]
    grad_accum: int = 1  # micro-batches per PPO mini-batch (gradient accumulation) [R]

    def __post_init__(self) -> None:
        from .baselines import METHODS

        if self.method not in METHODS:
            raise UserError(f"unknown method {self.method!r} (choose one of {', '.join(METHODS)})")
        if self.lam < 0:
            raise UserError(f"--lam must be >= 0 (got {self.lam})")
        if self.filter not in ("strict", "lenient", "constant"):
            raise UserError(f"unknown filter {self.filter!r} (strict|lenient|constant)")
        if self.acc_ema_init not in ("zero", "first"):
            raise UserError(f"unknown acc_ema_init {self.acc_ema_init!r} (zero|first)")
        if self.acc_source not in ACC_SOURCES:
            raise UserError(f"unknown acc_source {self.acc_source!r} ({'|'.join(ACC_SOURCES)})")
        if self.unfilled_warn_steps < 1:
            raise UserError(f"unfilled_warn_steps must be >= 1 (got {self.unfilled_warn_steps})")
        for name in ("lam", "lr", "temperature", "M_os", "M_acc", "weight_lr", "eps_low", "eps_high"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise UserError(f"{name} must be a finite number (got {v})")
        if self.lr <= 0 or self.temperature <= 0:
            raise UserError(f"lr and temperature must be > 0 (got {self.lr}, {self.temperature})")
        if self.micro_batch < 0 or self.grad_accum < 1:
            raise UserError("need micro_batch >= 0 and grad_accum >= 1")
        for name in ("steps", "batch_prompts", "minibatches", "max_new_tokens", "n_val"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.group_size < 2:
            raise UserError(f"group_size must be >= 2 for group-normalised advantages (got {self.group_size})")
        if self.M_os <= 0 or self.M_acc < 1 or self.N_rs < 1:
            raise UserError("need M_os > 0, M_acc >= 1 and N_rs >= 1 (generation rounds)")

    def with_(self, **kw) -> TrainConfig:
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        d = {k: (tuple(v) if k == "betas" else v) for k, v in d.items() if k in names}
        return cls(**d)


@dataclass(frozen=True)
class TinyPolicyConfig:
    d: int = 64  # width [R]
    layers: int = 2  # [R]
    heads: int = 4  # [R]
    ctx: int = 32  # max positions [R]
    sft_steps: int = 150  # warm-start steps so tasks start at different non-zero accuracies [R]
    sft_batch: int = 64  # [R]
    sft_lr: float = 3e-3  # [R]
