"""One training loop for every model (Adam on the FLAM loss), with atomic safetensors checkpoints
(every ``every`` steps and on SIGTERM / Ctrl-C; the same call resumes and ends at ``steps``) and
several processes through accelerate (each process takes its slice of the same global batch)."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import numpy as np
import torch

from .config import ModelConfig, TrainConfig
from .core import WorldModel
from .evaluate import (  # noqa: F401  (re-exported: the evaluations used to live here)
    chance_per_entity,
    correspondence,
    latents,
    probe_matrix,
    render_rollout,
    rollout_metrics,
    rollout_psnr,
)

CHECKPOINT = "checkpoint.safetensors"


class Interrupted(Exception):
    """Training stopped by SIGTERM / SIGINT after writing a checkpoint at ``step``."""

    def __init__(self, step: int, signum: int):
        super().__init__(f"interrupted at step {step}")
        self.step, self.signum = step, signum


def save_checkpoint(path: Path, model: WorldModel, opt: torch.optim.Optimizer, step: int,
                    rng: np.random.Generator, gen: torch.Generator) -> Path:
    """One safetensors file (weights, Adam moments, the noise generator's state; the step and the
    batch sampler's state in its metadata), written atomically."""
    from safetensors.torch import save

    from icml26_shared.io import atomic_write_bytes

    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            tensors[f"opt.{i}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
    tensors["gen_state"] = gen.get_state()
    meta = {"step": str(step), "rng": json.dumps(rng.bit_generator.state)}
    return atomic_write_bytes(path, save(tensors, metadata=meta))


def load_checkpoint(path: Path, model: WorldModel, opt: torch.optim.Optimizer,
                    rng: np.random.Generator, gen: torch.Generator) -> int:
    """Restore what ``save_checkpoint`` wrote into ``model`` / ``opt`` / ``rng`` / ``gen``; the step."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iterator)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    state = opt.state_dict()
    per: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            per.setdefault(int(i), {})[name] = v
    state["state"] = per
    opt.load_state_dict(state)
    rng.bit_generator.state = json.loads(meta["rng"])
    gen.set_state(tensors["gen_state"])
    return int(meta["step"])


class _StopFlag:
    """SIGTERM / SIGINT set a flag (the step in flight finishes, then a checkpoint is written)."""

    def __init__(self):
        self.signum, self._old = 0, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self._old[s] = signal.signal(s, self._set)
        return self

    def _set(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def train(model_cfg: ModelConfig, train_cfg: TrainConfig, video: np.ndarray, *,
          run_dir: Path | None = None, every: int = 200, on_step=None, device: str = "cpu",
          accelerator=None, tokenizer: torch.nn.Module | None = None) -> WorldModel:
    """Train on random ``window``-frame crops of ``video [N, T, H, W, 3]`` uint8 until ``steps``.

    With ``run_dir``, a checkpoint is written there every ``every`` steps, at the end, and on
    SIGTERM / SIGINT (then ``Interrupted`` is raised); a checkpoint found there is resumed. With an
    ``accelerate.Accelerator`` of P processes, every process draws the same global batch and noise
    and trains on its 1/P slice (gradients averaged by DDP), so P processes take the same step as one.
    ``tokenizer``: the fitted frozen ``ConvTokenizer`` a ``tokenizer="conv"`` config needs (its
    weights are copied into the model, never trained).
    """
    torch.manual_seed(train_cfg.seed)
    model = WorldModel(model_cfg)
    if model_cfg.tokenizer == "conv":
        if tokenizer is None:
            raise ValueError("a conv-tokenizer model needs its fitted tokenizer (train(..., tokenizer=))")
        model.tokenizer.load_state_dict(tokenizer.state_dict())
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=train_cfg.lr)
    gen = torch.Generator().manual_seed(train_cfg.seed + 1)
    rng = np.random.default_rng(train_cfg.seed)
    ckpt = None if run_dir is None else Path(run_dir) / CHECKPOINT
    start = load_checkpoint(ckpt, model, opt, rng, gen) if ckpt is not None and ckpt.is_file() else 0
    procs, rank, main = 1, 0, True
    net = model
    if accelerator is not None:
        procs, rank, main = accelerator.num_processes, accelerator.process_index, accelerator.is_main_process
        net, opt = accelerator.prepare(model, opt)
        device = str(accelerator.device)
    else:
        model.to(device)
    b = train_cfg.batch_size
    if b % procs:
        raise ValueError(f"batch size {b} is not divisible by the {procs} processes")
    lo, hi = rank * b // procs, (rank + 1) * b // procs
    z_all = model.tokenize(video).to(device)  # frozen: encoded once
    n, t = z_all.shape[:2]
    w = min(train_cfg.window, t)
    lat_shape = (b, w - 1, model_cfg.slots, model_cfg.slot_latent)
    model.train()
    step = start
    with _StopFlag() as stop:
        while step < train_cfg.steps:
            idx = rng.integers(0, n, b)
            off = int(rng.integers(0, t - w + 1))
            eps = torch.randn(lat_shape, generator=gen)
            batch = z_all[torch.as_tensor(idx[lo:hi], device=device), off:off + w]
            warm = step < train_cfg.unroll_from  # the one-step loss first, then the unrolled one
            kl_scale = min(1.0, step / train_cfg.kl_warmup) if train_cfg.kl_warmup else 1.0
            dyn = 0.0 if step < train_cfg.slot_warmup else 1.0  # slots first: reconstruction alone (0.9.3) [R]
            loss, info = net(batch, eps[lo:hi].to(device), 1 if warm else None, kl_scale, dyn)
            if not torch.isfinite(loss):  # a diverged run fails here, by name, not later in a probe
                raise FloatingPointError(f"training diverged: non-finite loss at step {step + 1} "
                                         f"(model {model_cfg.model}, lr {train_cfg.lr}, seed {train_cfg.seed})")
            opt.zero_grad()
            if accelerator is not None:
                accelerator.backward(loss)
                norm = accelerator.clip_grad_norm_(net.parameters(), 1.0)
            else:
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if not torch.isfinite(torch.as_tensor(norm)):  # clipping an inf gradient would write NaN weights
                raise FloatingPointError(f"training diverged: non-finite gradient at step {step + 1} (loss "
                                         f"{loss.item():.4g}; model {model_cfg.model}, lr {train_cfg.lr}, "
                                         f"seed {train_cfg.seed})")
            opt.step()
            step += 1
            if on_step is not None:
                on_step(step, model, info)
            done = step == train_cfg.steps
            if ckpt is not None and main and (done or stop.signum or step % every == 0):
                save_checkpoint(ckpt, model, _unwrap_opt(opt), step, rng, gen)
            if stop.signum and not done:
                raise Interrupted(step, stop.signum)
    model.eval()
    return model.cpu()


def _unwrap_opt(opt):
    return getattr(opt, "optimizer", opt)  # accelerate's AcceleratedOptimizer wraps the torch one
