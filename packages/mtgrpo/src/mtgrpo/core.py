"""The paper's maths as pure functions and small state machines (no I/O, no logging).

- ``grpo_advantages`` / ``clipped_pg_loss``: GRPO with the clip-higher token-level surrogate [P §2, C].
- ``zero_gradient_mask``: the strict / lenient filters of the RP-Sampler [P Alg. 2].
- ``TaskWeighter``: improvement-aware weight update (IWU, Subroutine 1), strict minimax and the
  regularised rewards-only update (Subroutine 2) [P §3, C ``priority_decay.py``].
- ``RatioPreservingSampler``: Algorithm 2 — quotas from z, acceptance-aware oversampling, filtering,
  resampling on the deficit, exact fill to B, per-task filter-rate EMA [P Alg. 2, C ``ray_trainer.py``].

Everything numeric on the task side is NumPy (float64) so that it is exact, cheap and checkpointable;
only the policy loss touches torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------
# GRPO


def grpo_advantages(rewards, eps: float = 1e-6):
    """Group-normalised advantages ``(r - mean_G r) / (std_G r + eps)``.

    ``rewards``: ``[n_groups, G]`` (NumPy or torch). ``std`` is the unbiased sample std, as in verl's
    ``compute_grpo_outcome_advantage`` [C]; a group of identical rewards gives all-zero advantages.
    """
    if hasattr(rewards, "std") and hasattr(rewards, "detach"):  # torch
        mean = rewards.mean(dim=-1, keepdim=True)
        std = rewards.std(dim=-1, keepdim=True, unbiased=True) if rewards.shape[-1] > 1 else 0 * mean
        return (rewards - mean) / (std + eps)
    r = np.asarray(rewards, dtype=np.float64)
    mean = r.mean(axis=-1, keepdims=True)
    std = r.std(axis=-1, ddof=1, keepdims=True) if r.shape[-1] > 1 else np.zeros_like(mean)
    return (r - mean) / (std + eps)


def clipped_pg_loss(logp_new, logp_old, adv, mask, eps_low: float = 0.2, eps_high: float = 0.28,
                    agg: str = "token"):
    """Clipped surrogate with clip-higher (DAPO), to be minimised.

    Args:
        logp_new, logp_old: ``[B, T]`` per-token log-probs (``logp_old`` detached).
        adv: ``[B]`` sequence advantages (broadcast over tokens) or ``[B, T]``.
        mask: ``[B, T]`` 1 for response tokens.
        agg: ``"token"`` (token-mean over the whole mini-batch, DAPO / the paper's runs [C]) or
            ``"seq"`` (mean over tokens of each sequence, then over sequences: original GRPO).
    Returns ``(loss, per_token_loss)``; the per-token loss is zero outside ``mask``.
    """
    import torch

    if adv.dim() == 1:
        adv = adv[:, None]
    mask = mask.to(logp_new.dtype)
    ratio = torch.exp(logp_new - logp_old)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_tok = torch.maximum(pg1, pg2) * mask
    if agg == "token":
        loss = per_tok.sum() / mask.sum().clamp_min(1.0)
    elif agg == "seq":
        loss = (per_tok.sum(-1) / mask.sum(-1).clamp_min(1.0)).mean()
    else:
        raise ValueError(f"unknown agg {agg!r} (token|seq)")
    return loss, per_tok


def task_wise_total_loss(per_tok, mask, task, num_tasks: int):
    """Per task, the SUM over its sequences of each sequence's token-mean surrogate loss — the
    authors' ``task_wise_total_loss`` [C dp_actor]; IWU's improvement is its old − new value on
    the same mini-batch. ``per_tok``/``mask``: ``[B, T]``; ``task``: ``[B]`` task indices (torch).
    Returns a float64 NumPy ``[num_tasks]``."""
    import torch

    sums = torch.zeros(num_tasks, dtype=torch.float64, device=per_tok.device)
    seq = per_tok.detach().sum(-1) / mask.sum(-1).clamp_min(1)
    sums.index_add_(0, task, seq.double())
    return sums.cpu().numpy()


def task_accuracy(task, rewards, num_tasks: int, correct: float = 1.0) -> np.ndarray:
    """Per task, the fraction of rollouts with reward ≥ ``correct`` (NaN for a task not drawn):
    the batch accuracy J_k is an EMA of [C ``batch_acc``]. ``task``: ``[N]`` indices,
    ``rewards``: ``[N]``."""
    t, r = np.asarray(task, int), np.asarray(rewards, np.float64)
    out = np.full(num_tasks, np.nan)
    for k in range(num_tasks):
        if np.any(t == k):
            out[k] = float(np.mean(r[t == k] >= correct))
    return out


def zero_gradient_mask(rewards, mode: str = "strict", correct: float = 1.0) -> np.ndarray:
    """``True`` for groups the filter drops. ``rewards``: ``[n_groups, G]``.

    strict (Exp-1): all rollouts correct or all incorrect [P Alg. 2]; lenient (Exp-2): all rewards
    0 or all rewards 1, as the authors' code (a group of only format rewards 0.1 is kept) [C];
    constant: any group of identical rewards, i.e. exactly the groups whose GRPO advantages are all
    zero [R].
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError("rewards must be [n_groups, G]")
    if mode == "lenient":
        return np.all(r == 0.0, axis=1) | np.all(r == 1.0, axis=1)
    if mode == "constant":
        return np.all(r == r[:, :1], axis=1)
    if mode == "strict":
        ok = r >= correct
        return ok.all(axis=1) | (~ok).all(axis=1)
    if mode == "none":
        return np.zeros(len(r), dtype=bool)
    raise ValueError(f"unknown filter {mode!r} (strict|lenient|constant|none)")


# --------------------------------------------------------------------------------------------
# Task weights


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def iwu_gradient(z: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``g_k = z_k (s_k - Σ_j z_j s_j)``: the gradient of ``Σ_k z_k s_k`` w.r.t. the logits ξ
    (z = softmax ξ) [P Subroutine 1]. Sums to zero."""
    z, s = np.asarray(z, np.float64), np.asarray(s, np.float64)
    return z * (s - float(z @ s))


@dataclass
class TaskWeighter:
    """Task logits ξ (z = softmax ξ) moved by Adam with L2 decay γ on ``g`` (descent: the min
    player of ``max_θ min_z Σ z_k s_k``), one step per PPO mini-batch [C ``priority_decay.py``;
    the paper says AdamW — with γ = 1e-5 the two differ negligibly].

    modes: ``iwu`` s = I + λ·J [P Subroutine 1]; ``minimax`` s = J (strict minimax, ε = 0, the
    collapse of Fig. 2) [P]; ``regularized`` s = J plus logit shrinkage η·ξ [P App. Subroutine 2].
    """

    num_tasks: int
    lam: float = 0.2
    lr: float = 0.025
    weight_decay: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    improvement_clip: float = 0.1
    acc_ema: float = 0.5
    acc_ema_init: str = "zero"
    mode: str = "iwu"
    shrink: float = 0.1
    xi: np.ndarray = field(default=None)  # type: ignore[assignment]
    J: np.ndarray = field(default=None)  # type: ignore[assignment]
    _m: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    _v: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    _t: int = 0

    def __post_init__(self) -> None:
        if self.num_tasks < 1:
            raise ValueError("num_tasks must be >= 1")
        if self.lam < 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")
        if self.mode not in ("iwu", "minimax", "regularized"):
            raise ValueError(f"unknown mode {self.mode!r} (iwu|minimax|regularized)")
        k = self.num_tasks
        self.xi = np.zeros(k) if self.xi is None else np.asarray(self.xi, np.float64)
        if self.acc_ema_init not in ("zero", "first"):
            raise ValueError(f"unknown acc_ema_init {self.acc_ema_init!r} (zero|first)")
        start = 0.0 if self.acc_ema_init == "zero" else np.nan
        self.J = np.full(k, start) if self.J is None else np.asarray(self.J, np.float64)
        self._m = np.zeros(k) if self._m is None else self._m
        self._v = np.zeros(k) if self._v is None else self._v

    @property
    def z(self) -> np.ndarray:
        return softmax(self.xi)

    def observe_accuracy(self, acc: Sequence[float]) -> np.ndarray:
        """EMA (decay ``acc_ema``) of the batch accuracy per task; NaN entries (task absent) keep
        the old value. ``acc_ema_init="zero"``: the EMA starts at 0, as the authors' code
        [C ``bias_metric=batch_acc``]; ``"first"``: the first observation initialises it [R]."""
        a = np.asarray(acc, np.float64)
        first = np.isnan(self.J)
        upd = self.acc_ema * self.J + (1 - self.acc_ema) * a
        self.J = np.where(np.isnan(a), self.J, np.where(first, a, upd))
        return self.J

    def scores(self, improvements: Sequence[float]) -> np.ndarray:
        J = np.nan_to_num(self.J, nan=0.0)
        if self.mode == "iwu":
            c = self.improvement_clip
            return np.clip(np.asarray(improvements, np.float64), -c, c) + self.lam * J
        return J

    def update(self, improvements: Sequence[float] | None = None) -> np.ndarray:
        """One AdamW step on ξ with ``g = z ⊙ (s − zᵀs)``; returns the new z."""
        imp = np.zeros(self.num_tasks) if improvements is None else improvements
        g = iwu_gradient(self.z, self.scores(imp))
        if self.mode == "regularized":
            g = g + self.shrink * self.xi
        b1, b2 = self.betas
        self._t += 1
        g = g + self.weight_decay * self.xi  # torch.optim.Adam(weight_decay=γ): coupled L2 [C]
        self._m = b1 * self._m + (1 - b1) * g
        self._v = b2 * self._v + (1 - b2) * g * g
        mhat = self._m / (1 - b1 ** self._t)
        vhat = self._v / (1 - b2 ** self._t)
        self.xi = self.xi - self.lr * mhat / (np.sqrt(vhat) + self.adam_eps)
        return self.z

    def state_dict(self) -> dict[str, Any]:
        return {"xi": self.xi.tolist(), "J": self.J.tolist(), "m": self._m.tolist(),
                "v": self._v.tolist(), "t": self._t}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.xi, self.J = np.asarray(sd["xi"], np.float64), np.asarray(sd["J"], np.float64)
        self._m, self._v, self._t = np.asarray(sd["m"]), np.asarray(sd["v"]), int(sd["t"])


# --------------------------------------------------------------------------------------------
# Ratio-preserving sampler

DrawFn = Callable[[np.ndarray], list[list[Any]]]
"""``draw(counts[K]) -> per task, a list of groups``; each group exposes ``.rewards`` ``[G]``."""


def inflation(rho: np.ndarray, cap: float) -> np.ndarray:
    """Acceptance-aware inflation ``m_k = min(1 / (1 − ρ_k), M_acc)`` (ρ_k = 1 gives the cap)."""
    rho = np.asarray(rho, np.float64)
    with np.errstate(divide="ignore"):
        m = np.where(rho < 1.0, 1.0 / np.maximum(1.0 - rho, 1e-12), np.inf)
    return np.minimum(m, cap)


@dataclass
class SampleStats:
    requested: np.ndarray  # n_k: desired post-filter counts
    generated: np.ndarray  # prompts generated per task (all rounds)
    accepted: np.ndarray  # groups passing the filter per task
    realized: np.ndarray  # groups per task in the returned batch
    rounds: int  # generation rounds used (1 = no resampling)
    filter_rate: np.ndarray  # filtered fraction per task this step (NaN if not drawn)


@dataclass
class RatioPreservingSampler:
    """Algorithm 2 of the paper; at most ``N_rs`` generation rounds in all, the first included
    (the authors' ``max_num_gen_batches`` [C]). ``inflate`` switches the acceptance-aware
    inflation (off in the authors' 3-task scripts). ``quota=False`` turns it into DAPO-style dynamic sampling with the
    task mixture fixed *before* filtering (the no-RPS ablation, and DAPO with uniform z)."""

    num_tasks: int
    filter: str = "strict"
    M_os: float = 3.0
    N_rs: int = 10
    M_acc: float = 5.0
    rho_ema: float = 0.9
    quota: bool = True
    inflate: bool = False
    round_multiple: int = 1  # prompts per generation round rounded up to a multiple of this (the
    # number of processes, so that every process generates the same number of whole groups)
    rho: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.rho = np.zeros(self.num_tasks) if self.rho is None else np.asarray(self.rho, np.float64)

    def _accept(self, groups: list[Any]) -> list[bool]:
        if not groups:
            return []
        r = np.stack([np.asarray(g.rewards, np.float64) for g in groups])
        return list(~zero_gradient_mask(r, self.filter))

    def sample(self, z: np.ndarray, B: int, draw: DrawFn, rng: np.random.Generator
               ) -> tuple[list[Any], SampleStats]:
        K = self.num_tasks
        z = np.asarray(z, np.float64)
        n = rng.multinomial(B, z / z.sum())
        m = inflation(self.rho, self.M_acc) if self.inflate else np.ones(K)
        per_round = max(int(round(self.M_os * B)), 1)
        per_round = -(-per_round // self.round_multiple) * self.round_multiple
        acc: list[list[Any]] = [[] for _ in range(K)]
        rej: list[list[Any]] = [[] for _ in range(K)]
        gen = np.zeros(K, int)
        rounds = 0
        probs = z * m if self.quota else z
        while True:
            counts = rng.multinomial(per_round, probs / probs.sum())
            drawn = draw(counts)
            rounds += 1
            for k in range(K):
                gen[k] += len(drawn[k])
                for g, ok in zip(drawn[k], self._accept(drawn[k]), strict=True):
                    (acc[k] if ok else rej[k]).append(g)
            c = np.array([len(a) for a in acc])
            if self.quota:
                deficit = np.maximum(n - c, 0)
                if deficit.sum() == 0 or rounds >= self.N_rs:
                    break
                probs = deficit * m
            else:
                if c.sum() >= B or rounds >= self.N_rs:
                    break
        batch = self._finish(acc, n, B, rng)
        realized = np.bincount([t for t, _ in batch], minlength=K)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(gen > 0, np.array([len(r) for r in rej]) / np.maximum(gen, 1), np.nan)
        self.rho = np.where(np.isnan(rate), self.rho,
                            self.rho_ema * self.rho + (1 - self.rho_ema) * np.nan_to_num(rate))
        stats = SampleStats(n, gen, c, realized, rounds, rate)
        return [g for _, g in batch], stats

    def _finish(self, acc: list[list[Any]], n: np.ndarray, B: int, rng: np.random.Generator
                ) -> list[tuple[int, Any]]:
        flat = [(k, g) for k in range(self.num_tasks) for g in acc[k]]
        if len(flat) <= B:
            return flat
        if not self.quota:  # DAPO: B of the accepted groups, uniformly (verl keeps the first B of
            # a generation order that mixes tasks at random, which has the same distribution)
            idx = np.sort(rng.choice(len(flat), size=B, replace=False))
            return [flat[i] for i in idx]
        keep = [(k, g) for k in range(self.num_tasks) for g in acc[k][: n[k]]]
        left = [(k, g) for k in range(self.num_tasks) for g in acc[k][n[k]:]]
        need = B - len(keep)
        if need > 0:
            idx = np.sort(rng.choice(len(left), size=need, replace=False))
            keep += [left[i] for i in idx]
        return keep

    def state_dict(self) -> dict[str, Any]:
        return {"rho": self.rho.tolist()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.rho = np.asarray(sd["rho"], np.float64)


def plain_sample(z: np.ndarray, B: int, draw: DrawFn, rng: np.random.Generator,
                 filter: str = "strict") -> tuple[list[Any], SampleStats]:
    """GRPO / SEC: B prompts drawn by task probabilities z, nothing filtered."""
    K = len(z)
    n = rng.multinomial(B, np.asarray(z, np.float64) / np.sum(z))
    drawn = draw(n)
    batch = [g for k in range(K) for g in drawn[k]]
    counts = np.array([len(d) for d in drawn])
    rate = np.array([float(np.mean(zero_gradient_mask(np.stack([g.rewards for g in d]), filter)))
                     if d else np.nan for d in drawn])
    return batch, SampleStats(n, counts, counts, counts, 1, rate)


def delta_m(acc_method: Sequence[float], acc_base: Sequence[float]) -> float:
    """Δm% = (1/K) Σ_k (Acc_m(k) − Acc_b(k)) / Acc_b(k) × 100 [P §5]."""
    a, b = np.asarray(acc_method, np.float64), np.asarray(acc_base, np.float64)
    return float(np.mean((a - b) / np.maximum(b, 1e-12)) * 100)
