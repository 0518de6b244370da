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
)

CHECKPOINT = "checkpoint.safetensors"


class Interrupted(Exception):
    """Training stopped by SIGTERM / SIGINT after writing a checkpoint at ``step`` (``saved`` False:
    stopped while the best-of-R candidates ran, before any checkpoint; the same call starts again)."""

    def __init__(self, step: int, signum: int, saved: bool = True):
        super().__init__(f"interrupted at step {step}")
        self.step, self.signum, self.saved = step, signum, saved


START_SEED_STRIDE = 1_000_003  # candidate r > 0 of a best-of-R start initialises from seed + r * this [R]
GAP_CLIPS = 32  # the start rule's clips: the first 32 training clips, one training window each


def start_seed(seed: int, r: int) -> int:
    """The ``torch.manual_seed`` of candidate ``r`` of a best-of-R start (``TrainConfig.starts``):
    candidate 0 is the run's own seed (exactly the init of a run without starts); r > 0 adds r times a
    large odd stride, so no candidate shares its init with another seed's run (seeds are small) [R]."""
    return seed if r == 0 else seed + r * START_SEED_STRIDE


def save_checkpoint(path: Path, model: WorldModel, opt: torch.optim.Optimizer, step: int,
                    rng: np.random.Generator, gen: torch.Generator, start: dict | None = None) -> Path:
    """One safetensors file (weights, Adam moments, the noise generator's state; the step, the
    batch sampler's state and, with best-of-R starts, the chosen candidate in its metadata), written
    atomically."""
    from safetensors.torch import save

    from icml26_shared.io import atomic_write_bytes, dumps_json

    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            tensors[f"opt.{i}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
    tensors["gen_state"] = gen.get_state()
    meta = {"step": str(step), "rng": dumps_json(rng.bit_generator.state, indent=None)}
    if start is not None:
        meta["start"] = dumps_json(start, indent=None)
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


def checkpoint_start(path: Path) -> dict | None:
    """The best-of-R record a checkpoint carries (``{"start": r, "starts": R, "losses": [...]}``), or None."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    return json.loads(meta["start"]) if "start" in meta else None


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


def start_gap(model: WorldModel, z: torch.Tensor) -> float:
    """A best-of-R candidate's score (higher wins; issue 57 item 5) [R]: its relative latent-use gap on the
    start rule's clips ``z`` (``evaluate.latent_use_gap(relative=True)``: the share of the one-step
    prediction error that each slot's own latents remove against latents shuffled across transitions).
    Reads frames only: no action label can change the choice."""
    from .evaluate import latent_use_gap

    was = model.training
    model.eval()
    try:
        return latent_use_gap(model, z, relative=True)
    finally:
        model.train(was)


def _build(model_cfg: ModelConfig, train_cfg: TrainConfig, tokenizer, init_seed: int):
    """A fresh model (initialised under ``torch.manual_seed(init_seed)``) and its Adam."""
    torch.manual_seed(init_seed)
    model = WorldModel(model_cfg)
    if model_cfg.tokenizer == "conv":
        if tokenizer is None:
            raise ValueError("a conv-tokenizer model needs its fitted tokenizer (train(..., tokenizer=))")
        model.tokenizer.load_state_dict(tokenizer.state_dict())
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=train_cfg.lr)
    return model, opt


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

    Best-of-R starts (``train_cfg.starts`` = R > 1) [R]: unless a checkpoint is resumed, R models that
    differ only in their initialisation (candidate r under ``start_seed(seed, r)``; candidate 0 is the init
    of a run without starts) each take ``start_steps`` steps on the same batches and noise (the sampler's
    and the noise generator's states restored before each). Each is scored by ``start_gap`` on the first
    ``GAP_CLIPS`` training clips (frames only). While the best score is under ``start_floor`` and fewer than
    ``start_max`` candidates have run, one more candidate is drawn (a start whose latents are unused is
    replaced). The best-scoring candidate (scores averaged over the processes, the choice broadcast from
    process 0) continues, model and optimiser, to ``steps``, the streams going on from where the candidates
    left them; so when candidate 0 wins the result is bit-identical to a run without starts. No checkpoint is
    written while the candidates run (one is written at the choice); ``on_step`` sees every candidate's
    steps, its ``info["start"]`` saying which. The choice is ``model.train_info`` (``{"start": r, "starts":
    candidates run, "gaps": [...], "losses": [each candidate's mean loss over its last 50 steps], "floor":
    start_floor, "met": best gap >= floor}``) and in the checkpoint.
    """
    model, opt = _build(model_cfg, train_cfg, tokenizer, train_cfg.seed)
    gen = torch.Generator().manual_seed(train_cfg.seed + 1)
    rng = np.random.default_rng(train_cfg.seed)
    ckpt = None if run_dir is None else Path(run_dir) / CHECKPOINT
    start, record = 0, {"start": 0, "starts": 1, "losses": None}
    if ckpt is not None and ckpt.is_file():
        start = load_checkpoint(ckpt, model, opt, rng, gen)
        record = checkpoint_start(ckpt) or record
    procs, rank, main = 1, 0, True
    if accelerator is not None:
        procs, rank, main = accelerator.num_processes, accelerator.process_index, accelerator.is_main_process
        device = str(accelerator.device)
    model.to(device)
    b = train_cfg.batch_size
    if b % procs:
        raise ValueError(f"batch size {b} is not divisible by the {procs} processes")
    lo, hi = rank * b // procs, (rank + 1) * b // procs
    z_all = model.tokenize(video).to(device)  # frozen: encoded once
    n, t = z_all.shape[:2]
    w = min(train_cfg.window, t)
    lat_shape = (b, w - 1, model_cfg.latent_slots, model_cfg.slot_latent)

    def prepare(m, o):
        if accelerator is not None:
            return accelerator.prepare(m, o)
        m.to(device)
        return m, o

    def run(net, model, opt, step: int, until: int, stop, losses: list | None = None, tag: dict | None = None) -> int:
        """Steps ``step`` -> ``until`` of one model (``losses``: each step's loss appended; ``tag``:
        candidate steps, no checkpoints)."""
        while step < until:
            idx = rng.integers(0, n, b)
            off = int(rng.integers(0, t - w + 1))
            eps = torch.randn(lat_shape, generator=gen)
            batch = z_all[torch.as_tensor(idx[lo:hi], device=device), off:off + w]
            warm = step < train_cfg.unroll_from  # the one-step loss first, then the unrolled one
            loss, info = net(batch, eps[lo:hi].to(device), 1 if warm else None)
            if not torch.isfinite(loss):  # a diverged run fails here, by name, not later in a probe
                raise FloatingPointError(f"training diverged: non-finite loss at step {step + 1} "
                                         f"(model {model_cfg.model}, lr {train_cfg.lr}, seed {train_cfg.seed})")
            if losses is not None:
                losses.append(loss.item())
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
                on_step(step, model, info if tag is None else {**info, **tag})
            if tag is not None:
                if stop.signum:  # no checkpoint of a candidate: the same call starts the choice again
                    raise Interrupted(0, stop.signum, saved=False)
                continue
            done = step == train_cfg.steps
            if ckpt is not None and main and (done or stop.signum or step % every == 0):
                save_checkpoint(ckpt, model, _unwrap_opt(opt), step, rng, gen, record)
            if stop.signum and not done:
                raise Interrupted(step, stop.signum)
        return step

    model.train()
    step = start
    with _StopFlag() as stop:
        if train_cfg.starts > 1 and start == 0:
            z_gap = z_all[:GAP_CLIPS, :w]
            model, opt, net, step, record = _choose_start(model, opt, model_cfg, train_cfg, tokenizer, rng, gen,
                                                          prepare, run, stop, accelerator, z_gap)
            if ckpt is not None and main:  # the choice is kept: a resumed run continues the winner
                save_checkpoint(ckpt, model, _unwrap_opt(opt), step, rng, gen, record)
        else:
            net, opt = prepare(model, opt)
        step = run(net, model, opt, step, train_cfg.steps, stop)
    model.eval()
    model.train_info = record
    return model.cpu()


def _choose_start(model0, opt0, model_cfg, train_cfg, tokenizer, rng, gen, prepare, run, stop, accelerator,
                  z_gap):
    """Best-of-R starts (see ``train``): (winner model, its optimiser, its prepared net, step, record)."""
    s, floor = train_cfg.start_steps, train_cfg.start_floor
    most = max(train_cfg.starts, train_cfg.start_max)
    rng0, gen0 = rng.bit_generator.state, gen.get_state()
    cands, gaps, losses_kept, end, err = [], [], [], None, None

    def score_all() -> torch.Tensor:
        score = torch.tensor(gaps, dtype=torch.float64)
        if accelerator is not None and accelerator.num_processes > 1:  # every process picks the same candidate
            score = accelerator.reduce(score.to(accelerator.device), reduction="mean").cpu()
        return score

    r = 0
    while r < train_cfg.starts or (r < most and float(score_all().max()) < floor):
        model, opt = (model0, opt0) if r == 0 else _build(model_cfg, train_cfg, tokenizer, start_seed(train_cfg.seed, r))
        model.train()
        net, opt = prepare(model, opt)
        rng.bit_generator.state = rng0  # every candidate sees the same batches and noise
        gen.set_state(gen0)
        losses: list[float] = []
        r += 1
        try:
            run(net, model, opt, 0, s, stop, losses, {"start": r - 1})
        except FloatingPointError as exc:  # a candidate that diverges loses
            cands.append(None)
            gaps.append(float("-inf"))
            losses_kept.append(float("nan"))
            err = exc
            continue
        cands.append((model, opt, net))
        gaps.append(start_gap(model, z_gap))
        losses_kept.append(float(np.mean(losses[-50:])))
        end = (rng.bit_generator.state, gen.get_state())
    score = score_all()
    if accelerator is not None and accelerator.num_processes > 1:
        from accelerate.utils import broadcast

        pick = torch.tensor([int(torch.argmax(score))], device=accelerator.device)
        best = int(broadcast(pick, from_process=0).item())
    else:
        best = int(torch.argmax(score))
    if end is None or cands[best] is None:
        raise err if err is not None else FloatingPointError("every best-of-R candidate diverged")
    rng.bit_generator.state = end[0]  # the streams go on from where the candidates left them
    gen.set_state(end[1])
    model, opt, net = cands[best]
    record = {"start": best, "starts": len(cands), "gaps": [round(float(x), 6) for x in score],
              "losses": [round(x, 6) for x in losses_kept], "floor": floor, "met": bool(score[best] >= floor)}
    return model, opt, net, s, record


def _unwrap_opt(opt):
    return getattr(opt, "optimizer", opt)  # accelerate's AcceleratedOptimizer wraps the torch one
