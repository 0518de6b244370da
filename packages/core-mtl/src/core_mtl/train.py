"""One trainer for CORE-MTL and every baseline: same encoder, data order, steps and optimiser.

CORE: stage 0 (first ``stage0_frac`` of the steps) trains the decomposition with the task heads
frozen; then the task losses, reconstruction, physics prior, CKA penalty (its weight ramped up over
``ind_warmup_frac``) and (from ``cfa_start_frac``, with probability ``cfa_prob``) the counterfactual
pass in ``eval()`` mode; CORE's gradients are clipped at max-norm ``core_clip`` (10) before each
step [C: engine/trainer.py].
Gradient methods aggregate the per-task gradients of the shared parameters; under several
processes (``accelerate launch``) each task's gradient is all-reduced first, so MGDA and PCGrad
see the global batch.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from icml26_shared.train import EarlyStopping

from . import baselines
from .config import TaskSpec, TrainConfig
from .core import gradient_conflict
from .losses import (
    edge_consistency,
    perceptual,
    physics_priors,
    pooled_cka,
    task_losses,
    task_weight_vector,
    weighted_task_sum,
)
from .model import build_model


@dataclass
class Batch:
    image: torch.Tensor  # [B, 3, H, W]
    targets: dict[str, torch.Tensor]

    def index(self, idx) -> Batch:
        return Batch(self.image[idx], {k: v[idx] for k, v in self.targets.items()})

    def to(self, device) -> Batch:
        return Batch(self.image.to(device), {k: v.to(device) for k, v in self.targets.items()})

    def __len__(self) -> int:
        return self.image.shape[0]


@dataclass
class TrainResult:
    model: nn.Module
    history: dict = field(default_factory=dict)


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """``auto`` (CUDA when there is one, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; a CUDA device
    that is not there is a ``ValueError``."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    head, _, idx = spec.partition(":")
    if head != "cuda" or (idx and not idx.isdigit()):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device {spec!r}: CUDA is not available on this machine (use --device cpu)")
    if idx and int(idx) >= torch.cuda.device_count():
        raise ValueError(f"device {spec!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device(spec)


def fresh_encoder(encoder) -> nn.Module | None:
    """A new encoder for one network: a module is deep-copied (every arm starts from the same
    weights and the caller's module is left untouched); a zero-argument factory is called."""
    import copy

    if encoder is None:
        return None
    if isinstance(encoder, nn.Module):
        return copy.deepcopy(encoder)
    if callable(encoder):
        m = encoder()
        if not isinstance(m, nn.Module):
            raise ValueError(f"the encoder factory returned {type(m).__name__}, not a torch.nn.Module")
        return m
    raise ValueError(f"encoder must be a torch.nn.Module or a factory, got {type(encoder).__name__}")


def _dist():
    d = torch.distributed
    return d if d.is_available() and d.is_initialized() and d.get_world_size() > 1 else None


def allreduce_mean(t: torch.Tensor) -> torch.Tensor:
    """Average a tensor over processes (identity in one process)."""
    d = _dist()
    if d is not None:
        d.all_reduce(t)
        t /= d.get_world_size()
    return t


def task_gradients(losses: list[torch.Tensor], params: list[nn.Parameter]) -> torch.Tensor:
    """G [T, P]: each task loss's gradient on ``params``, flattened, all-reduced over processes."""
    rows = []
    for loss in losses:
        gs = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                               for g, p in zip(gs, params)]))
    return allreduce_mean(torch.stack(rows))


def set_flat_grad(params: list[nn.Parameter], vec: torch.Tensor) -> None:
    i = 0
    for p in params:
        n = p.numel()
        p.grad = vec[i:i + n].view_as(p).clone()
        i += n


def aggregated_backward(model: nn.Module, losses: list[torch.Tensor], agg: baselines.Aggregator):
    """Shared parameters get ``agg.aggregate(G)``, clipped at ``agg.max_norm`` when it has one
    (Nash-MTL: 1.0 [C: LibMTL]); every other parameter (heads are task-specific) gets
    ``sum_t w_t grad L_t`` with ``w = agg.head_weights`` (Nash-MTL's alpha [C]) or the plain sum.
    Returns G for the diagnostics."""
    shared = [p for p in model.shared_parameters() if p.requires_grad]
    G = task_gradients(losses, shared)
    set_flat_grad(shared, agg.aggregate(G, torch.stack([x.detach() for x in losses])))
    if agg.max_norm is not None:
        torch.nn.utils.clip_grad_norm_(shared, agg.max_norm)
    ids = {id(p) for p in shared}
    rest = [p for p in model.parameters() if id(p) not in ids and p.requires_grad]
    if rest:
        hw = agg.head_weights
        stacked = torch.stack(losses)
        total = stacked.sum() if hw is None else (hw.detach().to(stacked) * stacked).sum()
        total.backward(inputs=rest)
        for p in rest:
            if p.grad is not None:
                allreduce_mean(p.grad)
    return G


@contextlib.contextmanager
def bn_protected(model: nn.Module):
    """The counterfactual forward in ``eval()`` mode, every module's train/eval flag restored after
    [C: ``engine/trainer.py`` ``bn_protection_mode``]: BatchNorm normalises by its running
    statistics and leaves them untouched, so the off-distribution counterfactual batch neither
    pollutes them nor is normalised by its own statistics; gradients still flow."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.train(mode)


def counterfactual_loss(model, batch: Batch, z_s, z_p, perm, cfg: TrainConfig) -> torch.Tensor:
    """lambda_cfa (task loss of model(I_cf) with the ORIGINAL labels + 0.1 CKA) [C]."""
    size = batch.image.shape[-2:]
    with torch.no_grad():
        i_cf = model.counterfactual(z_s, z_p, perm, size)
    with bn_protected(model):
        out = model(i_cf)
    loss = weighted_task_sum(model.tasks, task_losses(model.tasks, out["tasks"], batch.targets), cfg.weights)
    if cfg.cka:
        loss = loss + cfg.weights.cfa_cka * pooled_cka(out["z_s"], out["z_p"])
    return cfg.weights.cfa * loss


def independence_weight(cfg: TrainConfig, step: int, total: int) -> float:
    """lambda_ind at ``step``: 0 in stage 0, then a linear ramp to ``weights.cka`` over the first
    ``ind_warmup_frac`` of training [C: ``engine/trainer.py``, ``ind_warmup_epochs: 10`` of 100 in
    ``1causal_nyu.yaml``; per epoch there, per step here R]. The CKA inside the counterfactual
    pass is not ramped [C]."""
    s0 = round(cfg.stage0_frac * total)
    ramp = round(cfg.ind_warmup_frac * total)
    if step < s0:
        return 0.0
    if ramp <= 0:
        return cfg.weights.cka
    return cfg.weights.cka * min(1.0, (step - s0) / ramp)


def core_loss(model, batch: Batch, out: dict, cfg: TrainConfig, step: int, total: int,
              gen: torch.Generator) -> torch.Tensor:
    w, tasks = cfg.weights, model.tasks
    stage0 = step < round(cfg.stage0_frac * total)
    loss = w.geom_recon * (out["depth_recon"] - _depth_target(model, batch)).abs().mean()
    loss = loss + w.app_recon * perceptual(out["app_recon"], batch.image)
    if cfg.physics:
        loss = loss + physics_priors(out, batch.image, w)
    if stage0:
        return loss
    losses = task_losses(tasks, out["tasks"], batch.targets)
    loss = loss + weighted_task_sum(tasks, losses, w)
    seg = [n for n, t in tasks.items() if t.kind == "segmentation"]
    dep = [n for n, t in tasks.items() if t.kind == "depth"]
    if seg and dep:
        loss = loss + w.edge * edge_consistency(out["tasks"][dep[0]], out["tasks"][seg[0]])
    if cfg.cka:
        loss = loss + independence_weight(cfg, step, total) * pooled_cka(out["z_s"], out["z_p"])
    if cfg.cfa and step >= round(cfg.cfa_start_frac * total) and torch.rand(1, generator=gen) < cfg.cfa_prob:
        perm = torch.randperm(len(batch), generator=gen).to(batch.image.device)
        loss = loss + counterfactual_loss(model, batch, out["z_s"], out["z_p"], perm, cfg)
    return loss


def _depth_target(model, batch: Batch) -> torch.Tensor:
    """D_g's target: the depth task's map; without one, the image intensity [R]."""
    for name, t in model.tasks.items():
        if t.kind == "depth":
            return batch.targets[name]
    return batch.image.mean(1)


def train(cfg: TrainConfig, tasks: tuple[TaskSpec, ...], data: Batch, dev: Batch | None = None,
          progress=None, *, encoder=None, device: str | torch.device | None = "cpu") -> TrainResult:
    """Train ``cfg.method`` on ``data``; with ``dev``, keep the epoch with the lowest mean dev
    task-loss ratio to epoch 1 (each arm's own selection rule, on dev) [R].

    ``encoder``: a module mapping ``[B, 3, H, W]`` to F ``[B, C, h, w]`` (deep-copied) or a
    zero-argument factory, for CORE and every baseline alike; None = the small CNN. ``device``:
    ``auto``, ``cpu``, ``cuda[:N]``; the data stay where they are and move batch by batch."""
    device = resolve_device(device)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    method = cfg.method
    if method not in baselines.ALL_METHODS:
        raise ValueError(f"unknown method {method!r}")
    if method == "single" and len(tasks) != 1:
        raise ValueError("single-task training takes exactly one task")
    model = build_model(method, tasks, cfg.model, fresh_encoder(encoder)).to(device)
    is_core = method == "core"
    tw = task_weight_vector(tasks, cfg.weights)  # CORE's core_loss applies the same weights
    agg = baselines.make(method, len(tasks)) if method in baselines.METHODS else None
    if agg is not None:
        agg.to(device)
    params = list(model.parameters()) + (agg.parameters() if agg else [])
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    d = _dist()
    rank, world = (d.get_rank(), d.get_world_size()) if d else (0, 1)
    n = len(data)
    steps_per_epoch = max(1, n // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warm = max(1, round(cfg.warmup_frac * total))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, max(0, s - warm) / max(1, total - warm)))))
    hist = {"conflict_cos": [], "conflict_neg": [], "dev_score": [], "train_loss": [], "dev_loss": []}
    best, ref = None, None
    stop = EarlyStopping(patience=cfg.patience or cfg.epochs + 1, mode="min")
    step = 0
    for epoch in range(cfg.epochs):
        model.train()
        order = torch.randperm(n, generator=gen)
        ep_losses = []
        for b in range(steps_per_epoch):
            idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            batch = data.index(idx[rank::world]).to(device)
            frozen = is_core and step < round(cfg.stage0_frac * total)
            for p in model.head_parameters():
                p.requires_grad_(not frozen)
            opt.zero_grad(set_to_none=True)
            out = model(batch.image, decode=is_core, physics=is_core and cfg.physics)
            L = task_losses(model.tasks, out["tasks"], batch.targets)
            raw = torch.stack([L[t.name] for t in tasks])
            Lw = tw.to(raw) * raw  # one task-weight vector for every arm, before any aggregation
            Ls = list(Lw.unbind())
            G = None
            if agg is not None and agg.kind == "grad" and method != "ew":
                G = aggregated_backward(model, Ls, agg)
            else:
                if len(Ls) > 1 and step % cfg.conflict_every == 0:
                    G = task_gradients(Ls, [p for p in model.shared_parameters() if p.requires_grad])
                if is_core:
                    loss = core_loss(model, batch, out, cfg, step, total, gen)
                elif agg is not None and agg.kind == "loss":
                    agg.observe(Lw.detach())
                    loss = agg.combine(Lw)
                else:  # ew, single, mtan: the weighted sum (EW without per-task backward passes)
                    loss = Lw.sum()
                loss.backward()
                if d is not None:
                    for p in params:
                        if p.grad is not None:
                            allreduce_mean(p.grad)
                if is_core and cfg.core_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.core_clip)
            if G is not None and step % cfg.conflict_every == 0 and len(Ls) > 1:
                cos, neg = gradient_conflict(G.detach().double().cpu().numpy())
                hist["conflict_cos"].append(cos)
                hist["conflict_neg"].append(neg)
            opt.step()
            sched.step()
            ep_losses.append(raw.detach().cpu().tolist())  # unweighted, for curves and DWA
            step += 1
        mean_l = np.mean(ep_losses, 0)
        hist["train_loss"].append(mean_l.tolist())
        if agg is not None:
            agg.end_epoch(mean_l)
        halt = False
        if dev is not None:
            dl = dev_losses(model, tasks, dev, cfg.batch_size)
            ref = dl if ref is None else ref
            score = float(np.mean(dl / np.maximum(ref, 1e-12)))
            hist["dev_score"].append(score)
            hist["dev_loss"].append(dl.tolist())
            halt = stop.step(score, at=epoch + 1)
            if stop.improved:
                best = {k: v.detach().clone() for k, v in model.state_dict().items()}
                hist["best_epoch"] = epoch + 1
        if progress:
            progress(epoch + 1, cfg.epochs)
        if halt:  # no dev improvement for cfg.patience epochs
            hist["stopped_at"] = epoch + 1
            break
    if best is not None:
        model.load_state_dict(best)
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    return TrainResult(model, hist)


@torch.no_grad()
def dev_losses(model, tasks, dev: Batch, batch_size: int) -> np.ndarray:
    model.eval()
    tot = np.zeros(len(tasks))
    for i in range(0, len(dev), batch_size):
        b = dev.index(slice(i, i + batch_size)).to(next(model.parameters()).device)
        L = task_losses(model.tasks, model(b.image)["tasks"], b.targets)
        tot += np.array([L[t.name].item() for t in tasks]) * len(b)
    model.train()
    return tot / len(dev)
