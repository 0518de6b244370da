"""MT-GRPO inside TRL (``pip install mtgrpo[trl]``): ``MTGRPOTrainer``, a ``trl.GRPOTrainer``
whose generation batches come from the ratio-preserving sampler (per-task quotas n ~ Mult(B, z)
enforced *after* the zero-advantage filter, resampling rounds on the deficit, exact fill to B)
and whose task weights z move by IWU after every optimizer step (I_k = old − new per-task loss
on the same mini-batch, J_k = EMA of batch accuracy). The maths is ``mtgrpo.core``'s, shared
with ``mtgrpo.trainer``; TRL keeps its own generation, rewards, advantages, loss and optimizer.

The dataset needs a ``prompt`` column and a task column (``task`` by default); TRL passes the
task column to every reward function, and ``per_task_reward({"countdown": f, ...})`` routes each
completion to its task's scorer. Text prompts, one process (see the README)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import pad

from .core import (
    RatioPreservingSampler,
    TaskWeighter,
    clipped_pg_loss,
    task_accuracy,
    task_wise_total_loss,
)

__all__ = ["MTGRPOConfig", "MTGRPOTrainer", "per_task_reward"]


@dataclass
class MTGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus MT-GRPO's settings (defaults: the authors' Exp-1 [P, C]; see
    ``mtgrpo.config.TrainConfig`` for the sources). ``sampling="dynamic"`` is DAPO's dynamic
    sampling (mixture fixed before the filter) and ``weighting="uniform"`` keeps z uniform: the
    two ablations / baselines in the same loop."""

    task_column: str = field(default="task", metadata={"help": "dataset column naming each row's task"})
    weighting: str = field(default="iwu", metadata={"help": "iwu | uniform"})
    sampling: str = field(default="rps", metadata={"help": "rps | dynamic"})
    lam: float = 0.2  # λ in s_k = I_k + λ J_k [P, C]
    weight_lr: float = 0.025  # β [C]
    weight_decay_tasks: float = 1e-5  # γ [C]
    improvement_clip: float = 0.1  # [C]
    acc_ema: float = 0.5  # [C]
    acc_ema_init: str = "zero"  # [C]
    correct_reward: float = 1.0  # a rollout counts as correct at reward >= this (J_k, strict filter)
    zero_grad_filter: str = "strict"  # strict | lenient | constant [P, C]
    M_os: float = 3.0  # [P, C]
    N_rs: int = 10  # generation rounds in all [C]
    M_acc: float = 5.0  # [P]
    inflate: bool = False  # acceptance-aware inflation (off in Exp-1 [C])
    rho_ema: float = 0.9  # [R]

    def __post_init__(self):
        super().__post_init__()
        if self.weighting not in ("iwu", "uniform") or self.sampling not in ("rps", "dynamic"):
            raise ValueError("weighting must be iwu|uniform and sampling rps|dynamic")
        if self.lam < 0 or self.M_os <= 0 or self.N_rs < 1 or self.M_acc < 1:
            raise ValueError("need lam >= 0, M_os > 0, N_rs >= 1 and M_acc >= 1")


def per_task_reward(funcs: dict[str, Any], task_column: str = "task"):
    """One TRL reward function that scores each completion with its task's function
    (``f(prompts=[...], completions=[...], **columns) -> list[float]``, TRL's signature)."""

    def reward(prompts, completions, **kw):
        tasks = kw[task_column]
        out = [0.0] * len(completions)
        for name, f in funcs.items():
            idx = [i for i, t in enumerate(tasks) if t == name]
            if not idx:
                continue
            sub = {k: [v[i] for i in idx] if isinstance(v, list) and len(v) == len(tasks) else v
                   for k, v in kw.items()}
            vals = f(prompts=[prompts[i] for i in idx], completions=[completions[i] for i in idx], **sub)
            for i, v in zip(idx, vals, strict=True):
                out[i] = float(v)
        return out

    reward.__name__ = "per_task_reward"
    return reward


class _AfterStep(TrainerCallback):
    """Runs IWU's "after" half once the optimizer has stepped (``on_step_end``)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._after_optimizer_step()


@dataclass
class _Group:  # G rollouts of one prompt, as rows [start, start + G) of one generation call
    task: int
    call: int
    start: int
    rewards: np.ndarray


class MTGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with IWU task weights and the ratio-preserving sampler. Telemetry per
    generation step is in ``self.mt_history`` (z, requested / accepted / realised counts,
    rounds, prompts generated, filter rate, accuracy) and in TRL's logs (``mtgrpo/*``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        a = self.args
        if not isinstance(a, MTGRPOConfig):
            raise ValueError("MTGRPOTrainer needs args=MTGRPOConfig(...)")
        if self.accelerator.num_processes > 1:
            raise ValueError("mtgrpo.trl runs in one process (multi-GPU: `mtgrpo train` under "
                             "accelerate launch)")
        ds = self.train_dataset
        if a.task_column not in ds.column_names:
            raise ValueError(f"the training dataset has no {a.task_column!r} column")
        col = list(ds[a.task_column])
        self.task_names = sorted(set(col))
        self.K = len(self.task_names)
        self._pools = [np.flatnonzero(np.array(col) == n) for n in self.task_names]
        self.weighter = TaskWeighter(self.K, lam=a.lam, lr=a.weight_lr,
                                     weight_decay=a.weight_decay_tasks,
                                     improvement_clip=a.improvement_clip, acc_ema=a.acc_ema,
                                     acc_ema_init=a.acc_ema_init)
        self.sampler = RatioPreservingSampler(self.K, filter=a.zero_grad_filter, M_os=a.M_os,
                                              N_rs=a.N_rs, M_acc=a.M_acc, rho_ema=a.rho_ema,
                                              quota=a.sampling == "rps", inflate=a.inflate)
        self.rng = np.random.default_rng(a.seed)
        self.mt_history: list[dict] = []
        self._before: list[tuple[dict, torch.Tensor, np.ndarray]] = []
        self._last_rewards: torch.Tensor | None = None
        self._pending: list | None = None
        self.add_callback(_AfterStep(self))

    @property
    def z(self) -> np.ndarray:
        return self.weighter.z if self.args.weighting == "iwu" else np.full(self.K, 1.0 / self.K)

    # --- the sampler in TRL's generation step ---------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = out
        return out

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        # TRL's dataloader still ticks the clock; the prompts come from the sampler instead
        return super()._prepare_inputs(None)

    def _generate_and_score_completions(self, inputs):
        if inputs is not None:  # evaluation: TRL's own path
            return super()._generate_and_score_completions(inputs)
        G = self.num_generations
        B = self.args.generation_batch_size // G
        calls: list[dict] = []

        def draw(counts: np.ndarray) -> list[list[_Group]]:
            rows = [(k, int(i)) for k in range(self.K)
                    for i in self.rng.choice(self._pools[k], size=int(counts[k]),
                                             replace=int(counts[k]) > len(self._pools[k]))]
            out: list[list[_Group]] = [[] for _ in range(self.K)]
            if not rows:
                return out
            batch = [dict(self.train_dataset[i]) for _, i in rows for _ in range(G)]
            res = super(MTGRPOTrainer, self)._generate_and_score_completions(batch)
            w = self.reward_weights.to(self._last_rewards.device)
            r = (self._last_rewards * w).nansum(1).cpu().numpy()
            calls.append(res)
            for j, (k, _) in enumerate(rows):
                out[k].append(_Group(k, len(calls) - 1, j * G, r[j * G:(j + 1) * G]))
            return out

        drawn_all: list[_Group] = []

        def draw_logged(counts):
            d = draw(counts)
            drawn_all.extend(g for gs in d for g in gs)
            return d

        z = self.z.copy()
        batch, st = self.sampler.sample(z, B, draw_logged, self.rng)
        if len(batch) < B:  # N_rs rounds left a deficit: top up with filtered groups (zero
            # advantage, no gradient) so TRL's fixed batch shape holds [R]
            chosen = {id(g) for g in batch}
            rest = [g for g in drawn_all if id(g) not in chosen]
            batch += [rest[i] for i in self.rng.choice(len(rest), B - len(batch), replace=False)]
        acc = task_accuracy(np.repeat([g.task for g in drawn_all], G),
                            np.concatenate([g.rewards for g in drawn_all]), self.K,
                            self.args.correct_reward)
        if self.args.weighting == "iwu":
            self.weighter.observe_accuracy(acc)
        rec = {"step": len(self.mt_history), "z": z.tolist(), "requested": st.requested.tolist(),
               "accepted": st.accepted.tolist(), "realized": st.realized.tolist(),
               "rounds": st.rounds, "prompts_generated": int(st.generated.sum()),
               "filter_rate": st.filter_rate.tolist(), "acc": acc.tolist()}
        self.mt_history.append(rec)
        for k, n in enumerate(self.task_names):
            self._metrics["train"][f"mtgrpo/z_{n}"].append(float(z[k]))
            self._metrics["train"][f"mtgrpo/share_{n}"].append(float(st.realized[k]) / B)
        self._metrics["train"]["mtgrpo/rounds"].append(float(st.rounds))
        return self._merge(calls, batch)

    def _merge(self, calls: list[dict], batch: list[_Group]) -> dict:
        """The chosen groups' rows of several generation calls as one TRL batch (re-padded)."""
        G, pad_id = self.num_generations, self._tokenizer.pad_token_id
        rows = [(g.call, g.start + j) for g in batch for j in range(G)]
        first = calls[0]
        for key in ("pixel_values", "num_images", "tool_mask", "image_grid_thw"):
            if key in first:
                raise ValueError(f"mtgrpo.trl handles text prompts only (got {key!r})")
        out: dict[str, Any] = {}
        for key, v in first.items():
            if key == "num_items_in_batch" or not torch.is_tensor(v):
                continue
            parts = [calls[c][key][i] for c, i in rows]
            if v.dim() == 1:
                out[key] = torch.stack(parts)
            else:
                side = "left" if key.startswith("prompt") else "right"
                val = pad_id if key.endswith("_ids") else (1.0 if key == "importance_sampling_ratio" else 0)
                out[key] = pad(parts, padding_value=val, padding_side=side)
        out["task_index"] = torch.tensor([g.task for g in batch for _ in range(G)],
                                         device=out["advantages"].device)
        out["num_items_in_batch"] = out["completion_mask"].sum()
        return out

    # --- IWU: old − new per-task loss around every optimizer step --------------------------
    def _task_loss(self, model, inputs, old=None) -> tuple[np.ndarray, torch.Tensor]:
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        with torch.no_grad():
            lp, _, _ = self._get_per_token_logps_and_entropies(
                model, ids, att, inputs["completion_ids"].size(1))
        if old is None:
            old = inputs.get("old_per_token_logps")
            old = lp if old is None else old
        mask = inputs["completion_mask"]
        _, per_tok = clipped_pg_loss(lp, old, inputs["advantages"], mask, self.epsilon_low,
                                     self.epsilon_high)
        return task_wise_total_loss(per_tok, mask, inputs["task_index"], self.K), old

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.model.training and self.args.weighting == "iwu" and "task_index" in inputs:
            before, old = self._task_loss(model, inputs)  # this piece, before the step
            self._before.append((inputs, old, before))
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def training_step(self, model, inputs, num_items_in_batch):
        out = super().training_step(model, inputs, num_items_in_batch)
        if self._before and self._step % self.current_gradient_accumulation_steps == 0:
            # the last accumulation piece: TRL's loop steps the optimizer right after this
            # returns; the callback's ``on_step_end`` then takes the "after" loss
            self._pending, self._before = self._before, []
        return out

    def _after_optimizer_step(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = None
        before, after = np.zeros(self.K), np.zeros(self.K)
        present = np.zeros(self.K, bool)
        for inputs, old, b in pending:
            a, _ = self._task_loss(self.model, inputs, old)
            before, after = before + b, after + a
            present |= np.bincount(inputs["task_index"].cpu().numpy(), minlength=self.K) > 0
        imp = np.where(present, before - after, 0.0)  # improvement = old − new total loss [C]
        self.weighter.update(imp)
        if self.mt_history:
            self.mt_history[-1].setdefault("improvement", []).append(imp.tolist())
