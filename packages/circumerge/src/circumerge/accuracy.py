"""The accuracy benchmark: LoRA adapters on derived scikit-learn digits tasks, merged in every
space × rule, scored by normalized accuracy (merged ÷ individual) — KnOTS' per-task protocol:
each task keeps its own frozen head, only the LoRA updates of the shared body are merged."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .spaces import merge_layer
from .synthetic import _label_opts

LAYERS = ("fc1", "fc2")
BATCH = 256


def _img(X: np.ndarray) -> np.ndarray:
    return X.reshape(-1, 8, 8)


# name -> (input transform on (N, 64) pixels in [0, 16], label map on digits)
TASKS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "rot90": (lambda X: np.rot90(_img(X), 1, (1, 2)).reshape(-1, 64), lambda y: y),
    "fliplr": (lambda X: _img(X)[:, :, ::-1].reshape(-1, 64), lambda y: y),
    "invert": (lambda X: 16.0 - X, lambda y: y),
    "rot180_parity": (lambda X: np.rot90(_img(X), 2, (1, 2)).reshape(-1, 64), lambda y: y % 2),
    "transpose_mod3": (lambda X: _img(X).transpose(0, 2, 1).reshape(-1, 64), lambda y: y % 3),
    "shift_ge5": (lambda X: np.roll(_img(X), 2, axis=2).reshape(-1, 64), lambda y: (y >= 5).astype(int)),
    "flipud": (lambda X: _img(X)[:, ::-1, :].reshape(-1, 64), lambda y: y),
    "rot270_mod4": (lambda X: np.rot90(_img(X), 3, (1, 2)).reshape(-1, 64), lambda y: y % 4),
}


class MLP(nn.Module):
    def __init__(self, hidden: int = 256):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, hidden), nn.Linear(hidden, hidden)

    def features(self, x, deltas: dict[str, torch.Tensor] | None = None):
        d = deltas or {}
        h = F.relu(F.linear(x, self.fc1.weight + d.get("fc1", 0), self.fc1.bias))
        return F.relu(F.linear(h, self.fc2.weight + d.get("fc2", 0), self.fc2.bias))


@dataclass
class Task:
    name: str
    splits: dict[str, tuple[torch.Tensor, torch.Tensor]]  # train / dev / test
    classes: int


def make_tasks(names: Sequence[str], seed: int) -> tuple[tuple[torch.Tensor, ...], list[Task]]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = {"train": order[:1000], "dev": order[1000:1350], "test": order[1350:]}

    def tensor(Xp):
        return torch.tensor(np.ascontiguousarray(Xp) / 16.0, dtype=torch.float32)

    base = (tensor(X[cut["train"]]), torch.tensor(y[cut["train"]]))
    tasks = []
    for name in names:
        fx, fy = TASKS[name]
        splits = {k: (tensor(fx(X[idx])), torch.tensor(fy(y[idx]))) for k, idx in cut.items()}
        tasks.append(Task(name, splits, int(fy(np.arange(10)).max()) + 1))
    return base, tasks


def train_base(base, steps: int, seed: int) -> tuple[MLP, nn.Linear]:
    torch.manual_seed(seed)
    net, head = MLP(), nn.Linear(256, 10)
    opt = torch.optim.Adam([*net.parameters(), *head.parameters()], lr=3e-3)
    X, y = base
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(y), (BATCH,), generator=g)
        opt.zero_grad()
        F.cross_entropy(head(net.features(X[idx])), y[idx]).backward()
        opt.step()
    return net.requires_grad_(False), head


def train_lora(net: MLP, task: Task, rank: int, steps: int, seed: int, *, eval_every: int = 10,
               patience: int = 5):
    """LoRA (rank ``rank``, B initialised at 0) on fc1 and fc2 plus a task head, trained for at
    most ``steps`` steps; the step kept is chosen on dev (``EarlyStopping``, evaluated every
    ``eval_every`` steps; the best dev point's weights are restored). Returns ({layer: (A, B)},
    head, log) with log = {"steps", "train", "dev" (accuracies), "stopped_at", "best_at"}."""
    from icml26_shared.train import EarlyStopping

    g = torch.Generator().manual_seed(seed)
    lora = {}
    for name in LAYERS:
        W = getattr(net, name).weight
        lora[name] = (nn.Parameter(torch.randn(rank, W.shape[1], generator=g) / W.shape[1] ** 0.5),
                      nn.Parameter(torch.zeros(W.shape[0], rank)))
    torch.manual_seed(seed)
    head = nn.Linear(256, task.classes)
    opt = torch.optim.Adam([p for ab in lora.values() for p in ab] + list(head.parameters()), lr=1e-2)
    X, y = task.splits["train"]
    stop = EarlyStopping(patience=patience, mode="max")
    log = {"steps": [], "train": [], "dev": []}
    best = None

    def snapshot():
        return ({k: (A.detach().clone(), B.detach().clone()) for k, (A, B) in lora.items()},
                {k: v.detach().clone() for k, v in head.state_dict().items()})

    for step in range(1, steps + 1):
        idx = torch.randint(0, len(y), (BATCH,), generator=g)
        opt.zero_grad()
        deltas = {k: B @ A for k, (A, B) in lora.items()}
        F.cross_entropy(head(net.features(X[idx], deltas)), y[idx]).backward()
        opt.step()
        if step % eval_every and step != steps:
            continue
        with torch.no_grad():
            deltas = {k: B @ A for k, (A, B) in lora.items()}
            train_acc = accuracy(net, head, deltas, (X, y))
            dev_acc = accuracy(net, head, deltas, task.splits["dev"])
        log["steps"].append(step)
        log["train"].append(train_acc)
        log["dev"].append(dev_acc)
        halt = stop.step(dev_acc, at=step)
        if stop.improved:
            best = snapshot()
        if halt:
            break
    factors, head_state = best if best is not None else snapshot()
    head.load_state_dict(head_state)
    log.update(stopped_at=stop.stopped_at, best_at=stop.best_at)
    return factors, head.requires_grad_(False), log


@torch.no_grad()
def correct(net: MLP, head: nn.Linear, deltas, split) -> np.ndarray:
    """Per-example correctness (bool, one per example of ``split``)."""
    X, y = split
    return (head(net.features(X, deltas)).argmax(1) == y).numpy()


def accuracy(net: MLP, head: nn.Linear, deltas, split) -> float:
    return float(correct(net, head, deltas, split).mean())


def run_accuracy(names: Sequence[str], *, seed: int, rank: int, base_steps: int, lora_steps: int,
                 spaces: Sequence[str], rules: Sequence[str], lambdas: Sequence[float],
                 sketch_size: int | str = "auto") -> dict:
    """One seed: train, merge every (space, rule) with λ picked on dev, score on test.

    Returns {"individual": {task: acc}, "merged": {(space, rule): {"norm_acc", "lambda",
    "merge_s", "per_task", "per_example"}}, "adapters": [{layer: (A, B)}], "base_norm_acc" (the
    unmerged base with each task's head), "lora_logs": {task: train/dev curve}};
    ``per_example`` (one per test example) averages the example's normalized correctness over
    the tasks.
    """
    base, tasks = make_tasks(names, seed)
    net, _ = train_base(base, base_steps, seed)
    adapters, heads, logs = [], [], {}
    for t, task in enumerate(tasks):
        lora, head, log = train_lora(net, task, rank, lora_steps, seed * 100 + t)
        adapters.append(lora)
        heads.append(head)
        logs[task.name] = log
    individual = {task.name: accuracy(net, heads[t], {k: B @ A for k, (A, B) in adapters[t].items()},
                                      task.splits["test"]) for t, task in enumerate(tasks)}
    indiv_dev = {task.name: accuracy(net, heads[t], {k: B @ A for k, (A, B) in adapters[t].items()},
                                     task.splits["dev"]) for t, task in enumerate(tasks)}
    # anchor: the unmerged base with each task's head (no adapter), normalized like the merges
    base_norm = float(np.mean([accuracy(net, heads[t], {}, task.splits["test"]) / individual[task.name]
                               for t, task in enumerate(tasks)]))
    merged = {}
    for label in spaces:  # "circulant@64" = the circulant space with a 64-row sketch
        space, opts = _label_opts(label, sketch_size)
        for rule in rules:
            t0 = time.perf_counter()
            unit = {name: merge_layer([ad[name][0] for ad in adapters], [ad[name][1] for ad in adapters],
                                      space=space, rule=rule, seed=seed, layer_index=i, opts=opts)
                    for i, name in enumerate(LAYERS)}
            merge_s = time.perf_counter() - t0
            best = None
            for lam in lambdas:  # the merge is linear in λ for every rule but DARE's rescale: scale B
                deltas = {k: lam * (B @ A) for k, (A, B) in unit.items()}
                val = np.mean([accuracy(net, heads[t], deltas, task.splits["dev"]) / indiv_dev[task.name]
                               for t, task in enumerate(tasks)])
                if best is None or val > best[0] + 1e-12:
                    best = (val, lam, deltas)
            _, lam, deltas = best
            hits = {task.name: correct(net, heads[t], deltas, task.splits["test"])
                    for t, task in enumerate(tasks)}
            per_task = {k: float(v.mean()) for k, v in hits.items()}
            norm = float(np.mean([per_task[k] / individual[k] for k in individual]))
            # per test example: its normalized correctness averaged over the tasks (every task
            # scores the same test images), whose mean over examples is ``norm_acc``
            per_example = np.mean([hits[k] / individual[k] for k in individual], axis=0)
            merged[(label, rule)] = {"norm_acc": norm, "lambda": lam, "merge_s": merge_s,
                                     "per_task": per_task, "per_example": per_example}
    return {"individual": individual, "merged": merged, "adapters": adapters, "base_norm_acc": base_norm,
            "lora_logs": logs}
