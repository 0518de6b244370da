"""MT-GRPO inside TRL (``pip install mtgrpo[trl]``): ``MTGRPOTrainer``, a ``trl.GRPOTrainer``
whose generation batches come from the ratio-preserving sampler (per-task quotas n ~ Mult(B, z)
enforced *after* the zero-advantage filter, resampling rounds on the deficit, exact fill to B)
and whose task weights z move by IWU after every optimizer step (I_k = old − new per-task loss
on the same mini-batch, J_k = EMA of batch accuracy). The maths is ``mtgrpo.core``'s, shared
with ``mtgrpo.trainer``; TRL keeps its own generation, rewards, advantages, loss and optimizer.

The dataset needs a ``prompt`` column and a task column (``task`` by default); TRL passes the
task column to every reward function, and ``per_task_reward({"countdown": f, ...})`` routes each
completion to its task's scorer. Text prompts; one process or several under ``accelerate launch``
(every process draws the same prompts, generates an equal share of each round, sees every
reward; the batch is re-split evenly and the IWU losses are summed across processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import pad

from icml26_shared import UserError

from .config import ACC_SOURCES
from .core import (
    RatioPreservingSampler,
    TaskWeighter,
    clipped_pg_loss,
    task_accuracy,
    task_wise_total_loss,
    zero_gradient_mask,
)

__all__ = ["MTGRPOConfig", "MTGRPOTrainer", "check_trl_api", "local_span", "per_task_reward",
           "select_rows"]

# The private GRPOTrainer methods MTGRPOTrainer overrides or calls, with the parameters it relies
# on (those of trl 1.16, the pinned range): a TRL release that changes one fails loudly here,
# naming the method, instead of training wrongly. ``prefix``: only the leading parameters matter.
TRL_PRIVATE_API: dict[str, tuple[tuple[str, ...], bool]] = {
    "_generate_and_score_completions": (("self", "inputs"), False),
    "_prepare_inputs": (("self", "generation_batch"), False),
    "_calculate_rewards": (("self", "inputs", "prompts", "completions", "completion_ids_list"), False),
    "_get_per_token_logps_and_entropies": (("self", "model", "input_ids", "attention_mask",
                                            "logits_to_keep"), True),
    "compute_loss": (("self", "model", "inputs", "return_outputs", "num_items_in_batch"), False),
    "training_step": (("self", "model", "inputs", "num_items_in_batch"), False),
}


TRL_PRIVATE_ATTRS = ("_metrics", "_step", "_tokenizer", "reward_weights", "epsilon_low",
                     "epsilon_high", "num_generations")


def check_trl_api(cls=GRPOTrainer) -> None:
    """Raise ``RuntimeError`` naming the first private TRL method whose signature differs from the
    one ``MTGRPOTrainer`` was written against (trl 1.16)."""
    import inspect

    import trl

    for name, (want, prefix) in TRL_PRIVATE_API.items():
        fn = getattr(cls, name, None)
        got = tuple(inspect.signature(fn).parameters) if callable(fn) else None
        if got is None or (got[:len(want)] if prefix else got) != want:
            raise RuntimeError(
                f"mtgrpo.trl: trl {trl.__version__} changed GRPOTrainer.{name} "
                f"(expected parameters {want}{' ...' if prefix else ''}, found {got}); "
                "mtgrpo.trl is tested with trl>=1.16,<1.17: install that range")


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
    acc_source: str = field(default="round", metadata={
        "help": "what J_k's EMA observes: round (each generation round's accuracy before the "
                "zero-advantage filter, the authors' ray_trainer.py) | generated (all rollouts of "
                "the step) | accepted (the batch's groups that pass the filter)"})
    epsilon_high: float | None = field(default=0.28, metadata={
        "help": "clip-higher upper bound (the authors' Exp-1: actor.clip_ratio_high=0.28)"})
    correct_reward: float = 1.0  # a rollout counts as correct at reward >= this (J_k, strict filter)
    zero_grad_filter: str = "strict"  # strict | lenient | constant [P, C]
    M_os: float = 3.0  # [P, C]
    N_rs: int = 10  # generation rounds in all [C]
    M_acc: float = 5.0  # [P]
    inflate: bool = False  # acceptance-aware inflation (off in Exp-1 [C])
    rho_ema: float = 0.9  # [R]

    def __post_init__(self):
        if self.use_vllm:
            import importlib.util

            if not torch.cuda.is_available():
                raise UserError("use_vllm=True needs a CUDA GPU (vLLM does not generate on the "
                                "CPU): drop use_vllm to generate with transformers")
            if importlib.util.find_spec("vllm") is None:
                raise UserError("use_vllm=True needs vLLM: pip install 'mtgrpo[vllm]'")
        super().__post_init__()
        if self.weighting not in ("iwu", "uniform") or self.sampling not in ("rps", "dynamic"):
            raise ValueError("weighting must be iwu|uniform and sampling rps|dynamic")
        if self.acc_source not in ACC_SOURCES:
            raise ValueError(f"acc_source must be one of {'|'.join(ACC_SOURCES)}")
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


def local_span(n_prompts: int, world: int, rank: int) -> tuple[int, int]:
    """This process's prompts ``[lo, hi)`` of a generation round (``n_prompts`` divisible by
    ``world``: whole groups, the same count on every process, in rank order as TRL gathers)."""
    if n_prompts % world:
        raise ValueError(f"{n_prompts} prompts do not split over {world} processes")
    per = n_prompts // world
    return rank * per, (rank + 1) * per


def select_rows(everyone: list[list[dict]], chosen: list[tuple[int, int, int]], G: int,
                world: int, rank: int) -> tuple[list[dict], list[int], float]:
    """The rows of this process's share of the global batch. ``everyone[r][c]``: process r's
    tensors of generation call c (rows: its span of whole groups); ``chosen``: the batch's groups
    as (call, global first row, task). Returns the rows (dicts of per-row tensors), their task
    indices and the completion-token count of the whole global batch (TRL's
    ``num_items_in_batch``)."""
    rows, tasks = [], []
    for c, start, k in chosen:
        per = everyone[0][c]["completion_ids"].shape[0]  # rows per process in call c
        owner, at = divmod(start, per)
        part = everyone[owner][c]
        for j in range(G):
            rows.append({key: v[at + j] for key, v in part.items()})
            tasks.append(k)
    n_tokens = float(sum(float(r["completion_mask"].sum()) for r in rows))
    if len(rows) % world:
        raise ValueError(f"a batch of {len(rows)} rows does not split over {world} processes")
    per = len(rows) // world
    return rows[rank * per:(rank + 1) * per], tasks[rank * per:(rank + 1) * per], n_tokens


def _group_accuracy(groups: list[_Group], K: int, G: int, correct: float) -> np.ndarray:
    """Per task, the fraction of correct rollouts over ``groups`` (NaN for a task absent)."""
    if not groups:
        return np.full(K, np.nan)
    return task_accuracy(np.repeat([g.task for g in groups], G),
                         np.concatenate([g.rewards for g in groups]), K, correct)


class MTGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with IWU task weights and the ratio-preserving sampler. Telemetry per
    generation step is in ``self.mt_history`` (z, requested / accepted / realised counts,
    rounds, prompts generated, filter rate, accuracy) and in TRL's logs (``mtgrpo/*``)."""

    def __init__(self, *args, **kwargs):
        check_trl_api()
        super().__init__(*args, **kwargs)
        for name in TRL_PRIVATE_ATTRS:
            if not hasattr(self, name):
                raise RuntimeError(f"mtgrpo.trl: this trl's GRPOTrainer has no {name} attribute; "
                                   "mtgrpo.trl is tested with trl>=1.16,<1.17: install that range")
        a = self.args
        if not isinstance(a, MTGRPOConfig):
            raise ValueError("MTGRPOTrainer needs args=MTGRPOConfig(...)")
        self.world, self.rank = self.accelerator.num_processes, self.accelerator.process_index
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
                                              quota=a.sampling == "rps", inflate=a.inflate,
                                              round_multiple=self.world)
        self.rng = np.random.default_rng(a.seed)  # the same on every process: same draws
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
            # every process generates an equal run of whole groups (the round's prompt count is a
            # multiple of the process count); TRL gathers the rewards, so all see every group
            lo, hi = local_span(len(rows), self.world, self.rank)
            batch = [dict(self.train_dataset[i]) for _, i in rows[lo:hi] for _ in range(G)]
            res = super(MTGRPOTrainer, self)._generate_and_score_completions(batch)
            w = self.reward_weights.to(self._last_rewards.device)
            r = (self._last_rewards * w).nansum(1).cpu().numpy()
            calls.append(res)
            for j, (k, _) in enumerate(rows):
                out[k].append(_Group(k, len(calls) - 1, j * G, r[j * G:(j + 1) * G]))
            return out

        drawn_all: list[_Group] = []
        per_round: list[np.ndarray] = []
        correct = self.args.correct_reward

        def draw_logged(counts):
            d = draw(counts)
            new = [g for gs in d for g in gs]
            drawn_all.extend(new)
            per_round.append(_group_accuracy(new, self.K, G, correct))
            return d

        z = self.z.copy()
        batch, st = self.sampler.sample(z, B, draw_logged, self.rng)
        if self.args.acc_source == "round":
            observed = per_round
        elif self.args.acc_source == "generated":
            observed = [_group_accuracy(drawn_all, self.K, G, correct)]
        else:  # the sampler's batch (before any top-up), groups that pass the filter
            kept = [g for g in batch
                    if not zero_gradient_mask(g.rewards[None], self.args.zero_grad_filter)[0]]
            observed = [_group_accuracy(kept, self.K, G, correct)]
        if len(batch) < B:  # N_rs rounds left a deficit: top up with filtered groups (zero
            # advantage, no gradient) so TRL's fixed batch shape holds [R]
            chosen = {id(g) for g in batch}
            rest = [g for g in drawn_all if id(g) not in chosen]
            batch += [rest[i] for i in self.rng.choice(len(rest), B - len(batch), replace=False)]
        acc = _group_accuracy(drawn_all, self.K, G, correct)
        if self.args.weighting == "iwu":
            for a in observed:
                self.weighter.observe_accuracy(a)
        rec = {"step": len(self.mt_history), "z": z.tolist(), "requested": st.requested.tolist(),
               "accepted": st.accepted.tolist(), "realized": st.realized.tolist(),
               "rounds": st.rounds, "prompts_generated": int(st.generated.sum()),
               "filter_rate": st.filter_rate.tolist(), "acc": acc.tolist(),
               "acc_observed": [a.tolist() for a in observed], "J": self.weighter.J.tolist()}
        self.mt_history.append(rec)
        for k, n in enumerate(self.task_names):
            self._metrics["train"][f"mtgrpo/z_{n}"].append(float(z[k]))
            self._metrics["train"][f"mtgrpo/share_{n}"].append(float(st.realized[k]) / B)
        self._metrics["train"]["mtgrpo/rounds"].append(float(st.rounds))
        return self._merge(calls, batch)

    def _merge(self, calls: list[dict], batch: list[_Group]) -> dict:
        """The chosen groups' rows of several generation calls as one TRL batch (re-padded): this
        process's equal share of the global batch, gathered from whichever process generated
        each row."""
        G, pad_id = self.num_generations, self._tokenizer.pad_token_id
        first = calls[0]
        for key in ("pixel_values", "num_images", "tool_mask", "image_grid_thw"):
            if key in first:
                raise ValueError(f"mtgrpo.trl handles text prompts only (got {key!r})")
        keys = [k for k, v in first.items() if k != "num_items_in_batch" and torch.is_tensor(v)]
        device = first["advantages"].device
        local = [{k: c[k].detach().cpu() for k in keys} for c in calls]
        if self.world > 1:
            from accelerate.utils import gather_object

            everyone = gather_object([local])  # [rank][call] -> {key: tensor}
        else:
            everyone = [local]
        rows, tasks, n_tokens = select_rows(everyone, [(g.call, g.start, g.task) for g in batch],
                                            G, self.world, self.rank)
        out: dict[str, Any] = {}
        for key in keys:
            parts = [r[key] for r in rows]
            if parts[0].dim() == 0:
                out[key] = torch.stack(parts).to(device)
            else:
                side = "left" if key.startswith("prompt") else "right"
                val = pad_id if key.endswith("_ids") else (1.0 if key == "importance_sampling_ratio" else 0)
                out[key] = pad(parts, padding_value=val, padding_side=side).to(device)
        out["task_index"] = torch.tensor(tasks, device=device)
        out["num_items_in_batch"] = torch.tensor(n_tokens, device=device)  # the global batch's
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
        if self.world > 1:  # one reduction: every process then takes the same IWU step
            both = torch.tensor(np.concatenate([before, after, present]), dtype=torch.float64,
                                device=self.accelerator.device)
            both = self.accelerator.reduce(both, reduction="sum").cpu().numpy()
            before, after, present = both[:self.K], both[self.K:2 * self.K], both[2 * self.K:] > 0
        imp = np.where(present, before - after, 0.0)  # improvement = old − new total loss [C]
        self.weighter.update(imp)
        if self.mt_history:
            self.mt_history[-1].setdefault("improvement", []).append(imp.tolist())
