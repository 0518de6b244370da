"""One trainer for every method (GRPO, DAPO, SEC, MT-GRPO and the ablations), any policy that maps
``input_ids`` to logits (the tiny CPU policy or a Hugging Face causal LM, with or without LoRA).

Multi-process (``accelerate launch``): every process runs the task weights, the sampler and the
prompt draws identically (same seed); rollouts are split by group and gathered, so all processes
see the same rewards; each process computes the loss on its share of every mini-batch, scaled so
that the data-parallel average equals the single-process token-mean. Per-task losses before and
after each optimizer step (the IWU improvement signal) are summed across processes.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icml26_shared import UserError
from icml26_shared.io import atomic_write_bytes

from .baselines import METHODS, SecBandit
from .config import TrainConfig
from .core import (
    RatioPreservingSampler,
    TaskWeighter,
    clipped_pg_loss,
    grpo_advantages,
    plain_sample,
    task_wise_total_loss,
    zero_gradient_mask,
)
from .policy import generate, hf_generate, left_pad, response_logprobs
from .tasks import Task, safe_reward


@dataclass
class Group:
    task: int
    example: dict
    prompt: list[int]
    resp: torch.Tensor  # [N, R] (cpu)
    resp_mask: torch.Tensor  # [N, R]
    rewards: np.ndarray  # [N]


@dataclass
class Policy:
    """A model mapping ``input_ids`` → logits and a tokenizer with ``encode``, ``decode``,
    ``eos_id`` and ``pad_id``."""

    model: torch.nn.Module
    tokenizer: Any


class _Dist:
    """The accelerate calls the trainer needs, or their single-process equivalents."""

    def __init__(self, accelerator=None):
        self.acc = accelerator
        self.world = accelerator.num_processes if accelerator else 1
        self.rank = accelerator.process_index if accelerator else 0

    def gather_object(self, obj: list) -> list:
        if self.world == 1:
            return obj
        from accelerate.utils import gather_object
        return gather_object(obj)

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.world == 1 else self.acc.reduce(t.contiguous(), reduction="sum")


class MTGRPOTrainer:
    def __init__(self, policy: Policy, tasks: list[Task], config: TrainConfig, accelerator=None,
                 device: str | None = None):
        if not tasks:
            raise UserError("no tasks given")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise UserError(f"task names must be unique (got {names})")
        self.cfg, self.tasks, self.K = config, tasks, len(tasks)
        self.spec = METHODS[config.method]()
        self.dist = _Dist(accelerator)
        self.tok = policy.tokenizer
        params = [p for p in policy.model.parameters() if p.requires_grad]
        if not params:
            raise UserError("the model has no trainable parameters")
        opt = torch.optim.AdamW(params, lr=config.lr, betas=config.betas, weight_decay=0.0)
        if accelerator is not None:
            self.model, self.opt = accelerator.prepare(policy.model, opt)
            self.device = accelerator.device
        else:  # CUDA when present (icml26_shared.data.device), unless the caller names a device
            from icml26_shared.data import device as pick_device

            self.device = torch.device(pick_device(device))
            self.model, self.opt = policy.model.to(self.device), opt
        self._hf = hasattr(self.unwrapped, "generate") and hasattr(self.unwrapped, "generation_config")
        self.eps_high = config.eps_high if self.spec.clip_higher else config.eps_low
        w = self.spec.weighting
        self.weighter = TaskWeighter(self.K, lam=config.lam, lr=config.weight_lr,
                                     weight_decay=config.weight_decay,
                                     improvement_clip=config.improvement_clip, acc_ema=config.acc_ema,
                                     acc_ema_init=config.acc_ema_init,
                                     mode=w if w in ("iwu", "minimax", "regularized") else "iwu")
        self.sec = SecBandit(self.K, config.sec_alpha, config.sec_tau)
        self.sampler = RatioPreservingSampler(self.K, config.filter, config.M_os, config.N_rs,
                                              config.M_acc, config.rho_ema,
                                              quota=self.spec.sampling == "rps",
                                              inflate=config.inflate)
        self.rng = np.random.default_rng([config.seed, 7])
        self.gen = torch.Generator().manual_seed(config.seed)
        self.step_idx = 0
        self.history: list[dict] = []
        self._drawn: list[Group] = []
        self._round_acc: list[np.ndarray] = []
        self._unfilled = np.zeros(self.K, int)  # steps running with this task's quota unfilled
        self._warned = np.zeros(self.K, bool)

    # --- task weights ------------------------------------------------------------------------
    @property
    def z(self) -> np.ndarray:
        if self.spec.weighting == "uniform":
            return np.full(self.K, 1.0 / self.K)
        if self.spec.weighting == "sec":
            return self.sec.z
        return self.weighter.z

    @property
    def unwrapped(self) -> torch.nn.Module:
        return self.dist.acc.unwrap_model(self.model) if self.dist.acc else self.model

    # --- rollouts ----------------------------------------------------------------------------
    def _rollout(self, items: list[tuple[int, dict]], uniforms: torch.Tensor | None,
                 n: int, seed: int | None = None) -> list[Group]:
        """Generate ``n`` responses per (task, example) and score them. The tiny policy samples
        by inverse CDF from ``uniforms`` ``[len(items), n, max_new]``; a Hugging Face model by
        batched ``model.generate`` seeded from ``seed``; both greedy when given ``None``. Work is
        split across processes."""
        mine = [i for i in range(len(items)) if i % self.dist.world == self.dist.rank]
        out: list[tuple[int, list, list, list]] = []
        chunk = max(1, 512 // n)
        model = self.unwrapped
        was_training = model.training
        model.eval()
        for s in range(0, len(mine), chunk):
            idx = mine[s:s + chunk]
            prompts = [self.tok.encode(items[i][1]["prompt"]) for i in idx]
            ids, mask = left_pad([p for p in prompts for _ in range(n)], self.tok.pad_id, self.device)
            if self._hf:
                sd = None if seed is None else int(seed) + 1_000_003 * s + 7919 * self.dist.rank
                resp, rmask = hf_generate(model, ids, mask, self.cfg.max_new_tokens, self.tok.eos_id,
                                          self.tok.pad_id, sd, self.cfg.temperature)
            else:
                u = None if uniforms is None else uniforms[idx].reshape(len(idx) * n, -1).to(self.device)
                resp, rmask = generate(model, ids, mask, self.cfg.max_new_tokens, self.tok.eos_id,
                                       self.tok.pad_id, u, self.cfg.temperature)
            resp, rmask = resp.cpu(), rmask.cpu()
            for j, i in enumerate(idx):
                k, ex = items[i]
                rows = slice(j * n, (j + 1) * n)
                texts = [self.tok.decode(r[m.bool()].tolist()) for r, m in zip(resp[rows], rmask[rows], strict=True)]
                rew = [safe_reward(self.tasks[k], t, ex) for t in texts]
                out.append((i, prompts[j], resp[rows].tolist(), rmask[rows].tolist(), rew))
        model.train(was_training)
        got = sorted(self.dist.gather_object(out), key=lambda x: x[0])
        groups = []
        for (i, prompt, resp, rmask, rew) in got:
            k, ex = items[i]
            r, m = _pad_rows(resp, self.tok.pad_id), _pad_rows(rmask, 0)
            groups.append(Group(k, ex, prompt, r, m, np.asarray(rew, np.float64)))
        return groups

    def _draw(self, counts: np.ndarray) -> list[list[Group]]:
        items = [(k, self.tasks[k].train[int(j)]) for k in range(self.K)
                 for j in self.rng.integers(0, len(self.tasks[k].train), int(counts[k]))]
        n, t = self.cfg.group_size, self.cfg.max_new_tokens
        if self._hf:
            seed = int(torch.randint(0, 2 ** 62, (1,), generator=self.gen))
            groups = self._rollout(items, None, n, seed=seed) if items else []
        else:
            u = torch.rand((len(items), n, t), generator=self.gen, dtype=torch.float64)
            groups = self._rollout(items, u, n) if items else []
        self._drawn += groups
        self._round_acc.append(_per_task(groups, self.K, lambda g: float(np.mean(g.rewards >= 1.0))))
        per = [[] for _ in range(self.K)]
        for g in groups:
            per[g.task].append(g)
        return per

    # --- one global step ---------------------------------------------------------------------
    def step(self) -> dict:
        cfg, K = self.cfg, self.K
        z = self.z.copy()
        self._drawn, self._round_acc = [], []
        if self.spec.sampling == "plain":
            batch, st = plain_sample(z, cfg.batch_prompts, self._draw, self.rng, cfg.filter)
        else:
            batch, st = self.sampler.sample(z, cfg.batch_prompts, self._draw, self.rng)
        acc = _per_task(self._drawn, K, lambda g: float(np.mean(g.rewards >= 1.0)))
        rew = _per_task(self._drawn, K, lambda g: float(np.mean(g.rewards)))
        observed = self._acc_observations(batch, acc)
        if self.spec.weighting in ("iwu", "minimax", "regularized"):
            for a in observed:
                self.weighter.observe_accuracy(a)
        unfilled = self._check_quotas(st)
        adv = [torch.as_tensor(grpo_advantages(g.rewards[None], cfg.adv_eps)[0], dtype=torch.float32)
               for g in batch]
        if self.spec.weighting == "sec":
            self.sec.update(_per_task_vals([(g.task, float(a.abs().mean())) for g, a in zip(batch, adv, strict=True)], K))
        improvements, loss = self._update(batch, adv) if batch else (np.zeros(K), float("nan"))
        B = max(len(batch), 1)
        rec = {"step": self.step_idx, "z": z.tolist(), "share": (st.realized / B).tolist(),
               "requested": st.requested.tolist(), "acc": acc.tolist(), "reward": rew.tolist(),
               "zero_grad_rate": st.filter_rate.tolist(), "batch_size": len(batch),
               "rounds": st.rounds, "prompts_generated": int(st.generated.sum()),
               "improvement": improvements.tolist(), "loss": loss, "rho": self.sampler.rho.tolist(),
               "acc_observed": [a.tolist() for a in observed], "J": self.weighter.J.tolist(),
               "unfilled": unfilled}
        self.step_idx += 1
        self.history.append(rec)
        return rec

    def _acc_observations(self, batch: list[Group], acc: np.ndarray) -> list[np.ndarray]:
        """What J_k's EMA observes this step (``TrainConfig.acc_source``): one per-task accuracy per
        generation round, pre-filter (the authors' code); all rollouts pooled; or the training
        batch's groups that pass the zero-advantage filter."""
        src = self.cfg.acc_source
        if src == "round":
            return list(self._round_acc)
        if src == "generated":
            return [acc]
        kept = [g for g in batch if not zero_gradient_mask(g.rewards[None], self.cfg.filter)[0]]
        return [_per_task(kept, self.K, lambda g: float(np.mean(g.rewards >= 1.0)))]

    def _check_quotas(self, st) -> list[str]:
        """Tasks whose RPS quota went unfilled after all N_rs rounds; one warning per task once
        that has happened ``unfilled_warn_steps`` steps running (each such step costs N_rs
        generation rounds)."""
        if self.spec.sampling != "rps":
            return []
        short = np.asarray(st.accepted) < np.asarray(st.requested)
        self._unfilled = np.where(short, self._unfilled + 1, 0)
        names = [self.tasks[k].name for k in np.flatnonzero(short)]
        for k in np.flatnonzero((self._unfilled >= self.cfg.unfilled_warn_steps) & ~self._warned):
            self._warned[k] = True
            if self.dist.rank == 0:
                warnings.warn(f"mtgrpo: task {self.tasks[k].name!r} left its RPS quota unfilled "
                              f"{self._unfilled[k]} steps running, each spending all {st.rounds} "
                              "generation rounds: its groups are nearly all solved or all failed "
                              "(--max-rounds caps the cost)", RuntimeWarning, stacklevel=3)
        return names

    def _update(self, batch: list[Group], adv: list[torch.Tensor]) -> tuple[np.ndarray, float]:
        cfg, K, d = self.cfg, self.K, self.dist
        order = self.rng.permutation(len(batch))
        chunks = [c for c in np.array_split(order, min(cfg.minibatches, len(batch))) if len(c)]
        mbs = [self._tensors(batch, adv, c) for c in chunks]
        with torch.no_grad():  # the rollout policy's log-probs, before any update of this step
            for mb in mbs:
                mb["old"] = [self._logp(mc).detach() for mc in self._micro(mb)]
        track = self.spec.weighting in ("iwu", "minimax", "regularized")
        imp_total, losses = np.zeros(K), []
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.model.train()
        for mb in mbs:
            self.opt.zero_grad(set_to_none=True)
            before, loss_sum = np.zeros(K), 0.0
            pieces = self._micro(mb)
            for j, (mc, old) in enumerate(zip(pieces, mb["old"], strict=True)):
                # DDP: gradients are all-reduced once per mini-batch, on the last piece (the
                # processes may hold different numbers of pieces)
                quiet = d.world > 1 and j < len(pieces) - 1 and hasattr(self.model, "no_sync")
                with self.model.no_sync() if quiet else contextlib.nullcontext():
                    loss, per_tok = self._loss(mb, mc, self._logp(mc), old)
                    before += self._task_loss_local(mc, per_tok)
                    if d.acc is not None:
                        d.acc.backward(loss)
                    else:
                        loss.backward()
                loss_sum += float(loss.detach())
            before = self._reduce(before)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            self.opt.step()
            losses.append(float(d.sum(torch.tensor([loss_sum], device=self.device)).item()) / d.world)
            if track:
                after = np.zeros(K)
                with torch.no_grad():
                    for mc, old in zip(self._micro(mb), mb["old"], strict=True):
                        _, per_after = self._loss(mb, mc, self._logp(mc), old)
                        after += self._task_loss_local(mc, per_after)
                after = self._reduce(after)
                present = mb["task_tokens"] > 0
                imp = np.where(present, before - after, 0.0)  # improvement = old − new total loss [C]
                imp_total += imp
                self.weighter.update(imp)
        return imp_total, float(np.mean(losses))

    def _loss(self, mb: dict, mc: dict, lp: torch.Tensor, old: torch.Tensor):
        """This micro-batch's share of the mini-batch loss (token-mean over the whole mini-batch
        on all processes, so micro-batching and data parallelism leave the gradient unchanged)."""
        cfg, d = self.cfg, self.dist
        _, per_tok = clipped_pg_loss(lp, old, mc["adv"], mc["mask"], cfg.eps_low, self.eps_high,
                                     cfg.agg)
        if cfg.agg == "seq":
            seq = per_tok.sum(-1) / mc["mask"].sum(-1).clamp_min(1)
            loss = seq.sum() / mb["all_rows"] * d.world
        else:
            loss = per_tok.sum() / float(mb["all_tokens"]) * d.world
        if not mb["local"]:  # a stand-in row with zero weight keeps DDP's collectives aligned
            return loss * 0.0, None
        return loss, per_tok

    def _micro(self, mb: dict) -> list[dict]:
        """Split a PPO mini-batch's local rows into micro-batches (``micro_batch`` sequences, or
        ``grad_accum`` pieces), each trimmed to its own padding."""
        n = mb["resp"].shape[0]
        pieces = self.cfg.grad_accum
        if self.cfg.micro_batch:
            pieces = max(pieces, -(-n // self.cfg.micro_batch))
        out = []
        for rows in np.array_split(np.arange(n), min(pieces, n)):
            sl = slice(int(rows[0]), int(rows[-1]) + 1)
            pm, m = mb["pmask"][sl], mb["mask"][sl]
            p0 = int((pm.sum(0) > 0).nonzero()[0]) if bool(pm.any()) else pm.shape[1] - 1
            r1 = max(int(m.sum(0).nonzero().max()) + 1, 1) if bool(m.any()) else 1
            out.append({"ids": mb["ids"][sl, p0:], "pmask": pm[:, p0:], "resp": mb["resp"][sl, :r1],
                        "mask": m[:, :r1], "adv": mb["adv"][sl], "task": mb["task"][sl]})
        return out

    def _tensors(self, batch: list[Group], adv: list[torch.Tensor], idx: np.ndarray) -> dict:
        d, n = self.dist, self.cfg.group_size
        local = [int(i) for j, i in enumerate(idx) if j % d.world == d.rank]
        all_tokens = sum(float(batch[int(i)].resp_mask.sum()) for i in idx)
        task_tokens = np.zeros(self.K)
        for i in idx:
            task_tokens[batch[int(i)].task] += float(batch[int(i)].resp_mask.sum())
        mb = {"local": bool(local), "all_tokens": all_tokens, "all_rows": len(idx) * n,
              "task_tokens": task_tokens}
        # every process holds the whole batch; one with no share here gets a zero-weight stand-in
        rows = local or [int(idx[0])]
        gs = [batch[i] for i in rows]
        ids, pmask = left_pad([g.prompt for g in gs for _ in range(n)], self.tok.pad_id, self.device)
        width = max(g.resp.shape[1] for g in gs)
        resp = torch.cat([_pad_to(g.resp, width, self.tok.pad_id) for g in gs]).to(self.device)
        rmask = torch.cat([_pad_to(g.resp_mask, width, 0) for g in gs]).to(self.device)
        mb.update(ids=ids, pmask=pmask, resp=resp, mask=rmask,
                  adv=torch.cat([adv[i] for i in rows]).to(self.device),
                  task=torch.tensor([g.task for g in gs for _ in range(n)], device=self.device))
        return mb

    def _logp(self, mb: dict) -> torch.Tensor:
        """Log-probs under the sampling distribution (the rollout temperature), as sampled."""
        return response_logprobs(self.model, mb["ids"], mb["pmask"], mb["resp"], mb["mask"],
                                 self.cfg.temperature)

    def _task_loss_local(self, mc: dict, per_tok: torch.Tensor | None) -> np.ndarray:
        """Per task, the SUM over its sequences of each sequence's token-mean surrogate loss
        (this process, this micro-batch) — the authors' ``task_wise_total_loss`` [C dp_actor]."""
        if per_tok is None:
            return np.zeros(self.K)
        return task_wise_total_loss(per_tok, mc["mask"], mc["task"], self.K)

    def _reduce(self, v: np.ndarray) -> np.ndarray:
        if self.dist.world == 1:
            return v
        return self.dist.sum(torch.tensor(v, dtype=torch.float64, device=self.device)).cpu().numpy()

    # --- evaluation --------------------------------------------------------------------------
    def evaluate(self, split: str = "test", n_prompts: int | None = None, n_val: int | None = None,
                 seed: int | None = None) -> dict[str, float]:
        """Held-out accuracy per task: ``n_val`` samples per prompt at the rollout temperature
        (``n_val=0``: greedy). Uses its own random stream, so evaluating never changes training."""
        per = self.evaluate_prompts(split, n_prompts, n_val, seed)
        return {n: float(np.mean(a)) if len(a) else float("nan") for n, a in per.items()}

    @torch.no_grad()
    def evaluate_prompts(self, split: str = "test", n_prompts: int | None = None,
                         n_val: int | None = None, seed: int | None = None
                         ) -> dict[str, np.ndarray]:
        """Per task, each held-out prompt's accuracy (the fraction of its ``n_val`` samples that
        are correct), in the split's order: the units of a paired, prompt-level comparison."""
        n_prompts = n_prompts or self.cfg.eval_prompts
        n_val = self.cfg.n_val if n_val is None else n_val
        g = torch.Generator().manual_seed(int(seed if seed is not None else 10_000 + self.cfg.seed))
        items = [(k, ex) for k, t in enumerate(self.tasks) for ex in (getattr(t, split))[:n_prompts]]
        if not items:
            raise UserError(f"no {split} examples to evaluate")
        n = max(n_val, 1)
        if self._hf:
            sd = None if n_val == 0 else int(torch.randint(0, 2 ** 62, (1,), generator=g))
            groups = self._rollout(items, None, n, seed=sd)
        else:
            u = None if n_val == 0 else torch.rand((len(items), n, self.cfg.max_new_tokens),
                                                   generator=g, dtype=torch.float64)
            groups = self._rollout(items, u, n)
        per: list[list[float]] = [[] for _ in range(self.K)]
        for gr in groups:  # _rollout returns the groups in the order of ``items``
            per[gr.task].append(float(np.mean(gr.rewards >= 1.0)))
        return {t.name: np.asarray(a) for t, a in zip(self.tasks, per, strict=True)}

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"model": self.unwrapped.state_dict(), "optimizer": self.opt.state_dict(),
                "weighter": self.weighter.state_dict(), "sampler": self.sampler.state_dict(),
                "sec": self.sec.state_dict(), "rng": self.rng.bit_generator.state,
                "gen": self.gen.get_state(), "step": self.step_idx, "history": self.history,
                "unfilled": self._unfilled.tolist(), "warned": self._warned.tolist(),
                "config": self.cfg.to_dict(), "tasks": [t.name for t in self.tasks]}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("tasks") != [t.name for t in self.tasks]:
            raise UserError(f"checkpoint tasks {sd.get('tasks')} differ from {[t.name for t in self.tasks]}")
        self.unwrapped.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["optimizer"])
        self.weighter.load_state_dict(sd["weighter"])
        self.sampler.load_state_dict(sd["sampler"])
        self.sec.load_state_dict(sd["sec"])
        self.rng.bit_generator.state = sd["rng"]
        self.gen.set_state(sd["gen"])
        self.step_idx, self.history = int(sd["step"]), list(sd["history"])
        self._unfilled = np.asarray(sd.get("unfilled", np.zeros(self.K)), int)
        self._warned = np.asarray(sd.get("warned", np.zeros(self.K)), bool)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if self.dist.rank == 0:
            buf = io.BytesIO()
            torch.save(self.state_dict(), buf)
            atomic_write_bytes(path, buf.getvalue())
        return path

    def load(self, path: str | Path, check_method: bool = True) -> None:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"checkpoint {path} does not exist")
        try:  # tensors, numbers, strings and containers only: no pickled code is run
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # PyTorch's own text advises weights_only=False: never relayed
            raise UserError(f"checkpoint {path} cannot be read: it is truncated, corrupt or not "
                            f"written by mtgrpo ({type(exc).__name__})") from None
        if not isinstance(sd, dict) or not {"model", "config", "tasks", "step"} <= set(sd):
            raise UserError(f"checkpoint {path} is not an mtgrpo checkpoint")
        method = sd["config"].get("method")
        if check_method and method != self.cfg.method:
            raise UserError(f"checkpoint {path} was trained with --method {method}, not "
                            f"{self.cfg.method}")
        try:
            self.load_state_dict(sd)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"checkpoint {path} does not fit this model and configuration "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


def _pad_rows(rows: list[list[int]], pad: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def _pad_to(t: torch.Tensor, width: int, pad: int) -> torch.Tensor:
    if t.shape[1] == width:
        return t
    return torch.cat([t, torch.full((t.shape[0], width - t.shape[1]), pad, dtype=t.dtype)], 1)


def _per_task(groups: list[Group], K: int, fn) -> np.ndarray:
    return _per_task_vals([(g.task, fn(g)) for g in groups], K)


def _per_task_vals(pairs: list[tuple[int, float]], K: int) -> np.ndarray:
    s, c = np.zeros(K), np.zeros(K)
    for k, v in pairs:
        s[k] += v
        c[k] += 1
    with np.errstate(invalid="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)
