"""The offline "mini Model Jungle" [R]: one Model Tree of digits MLPs (64→h→h→10) fine-tuned from a
common ancestor, each child on a random subset of the classes, all children trained at once with
batched matmuls (``torch.bmm``). The label of a child is the multi-hot subset it was trained on.

Nuisances (so that the benchmark is not at ceiling): each child has its own learning rate
(log-uniform), number of steps, input-noise level, batch order and seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .config import ZooConfig

LAYERS = ("fc1", "fc2", "fc3")  # weight names: <layer>.weight [out, in], <layer>.bias [out]


@dataclass
class Zoo:
    """Stacked child weights ``{"fc2.weight": [M, h, h], ...}``, multi-hot labels ``[M, K]``, the
    split of model indices and the per-child nuisances."""

    weights: dict[str, torch.Tensor]
    labels: np.ndarray
    split: dict[str, np.ndarray]
    nuisances: dict[str, np.ndarray]
    config: ZooConfig

    def layer(self, name: str, part: str) -> torch.Tensor:
        key = name if name.endswith((".weight", ".bias")) else name + ".weight"
        return self.weights[key][self.split[part]]

    def part_labels(self, part: str) -> np.ndarray:
        return self.labels[self.split[part]]


def _digits(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    from icml26_shared.data import load_sklearn

    X, y = load_sklearn("digits")
    return torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def _init_mlp(sizes: list[int], g: torch.Generator) -> dict[str, torch.Tensor]:
    params = {}
    for name, (fan_in, fan_out) in zip(LAYERS, zip(sizes[:-1], sizes[1:]), strict=True):
        bound = 1.0 / math.sqrt(fan_in)
        params[name + ".weight"] = (torch.rand(fan_out, fan_in, generator=g) * 2 - 1) * bound
        params[name + ".bias"] = (torch.rand(fan_out, generator=g) * 2 - 1) * bound
    return params


def _forward(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Batched MLP: ``x [M, B, 64]`` with stacked params ``[M, out, in]`` → logits ``[M, B, 10]``."""
    h = x
    for i, name in enumerate(LAYERS):
        h = torch.baddbmm(params[name + ".bias"].unsqueeze(1), h, params[name + ".weight"].transpose(1, 2))
        if i < len(LAYERS) - 1:
            h = torch.relu(h)
    return h


def train_ancestor(cfg: ZooConfig, seed: int) -> dict[str, torch.Tensor]:
    """The ancestor: full-batch Adam on all digits classes (seeded)."""
    X, y = _digits(seed)
    g = torch.Generator().manual_seed(seed)
    params = {k: v.unsqueeze(0).requires_grad_() for k, v in
              _init_mlp([X.shape[1], cfg.hidden, cfg.hidden, cfg.n_classes], g).items()}
    opt = torch.optim.Adam(params.values(), lr=cfg.ancestor_lr)
    for _ in range(cfg.ancestor_steps):
        opt.zero_grad()
        F.cross_entropy(_forward(params, X.unsqueeze(0))[0], y).backward()
        opt.step()
    return {k: v.detach()[0] for k, v in params.items()}


def make_model_zoo(cfg: ZooConfig | None = None, *, ancestor: dict[str, torch.Tensor] | None = None,
                   progress=None) -> Zoo:
    """Build one Model Tree: ``cfg.n_models`` children of one ancestor (deterministic in ``cfg.seed``)."""
    cfg = cfg or ZooConfig()
    X, y = _digits(cfg.seed)
    ancestor = ancestor or train_ancestor(cfg, cfg.seed)
    rng = np.random.default_rng(cfg.seed + 1)
    M, K = cfg.n_models, cfg.n_classes
    labels = np.zeros((M, K), dtype=np.float32)
    for i in range(M):
        labels[i, rng.choice(K, cfg.subset_size, replace=False)] = 1.0
    lo, hi = np.log(cfg.lr[0]), np.log(cfg.lr[1])
    nuis = {"lr": np.exp(rng.uniform(lo, hi, M)).astype(np.float32),
            "steps": rng.integers(cfg.steps[0], cfg.steps[1] + 1, M),
            "input_noise": rng.uniform(*cfg.input_noise, M).astype(np.float32)}
    g = torch.Generator().manual_seed(cfg.seed + 2)
    params = {}
    for k, v in ancestor.items():
        p = v.unsqueeze(0).repeat(M, *([1] * v.dim())).clone()
        if cfg.weight_noise > 0:
            p = p + cfg.weight_noise * v.std() * torch.randn(p.shape, generator=g)
        params[k] = p.requires_grad_()
    # each child draws its batches from its own classes: a class uniformly, then one of its examples
    by_class = [torch.nonzero(y == c).flatten() for c in range(K)]
    counts = torch.tensor([len(ix) for ix in by_class])
    table = torch.stack([ix[torch.arange(int(counts.max())) % len(ix)] for ix in by_class])  # [K, nmax]
    subsets = torch.tensor(np.stack([np.flatnonzero(r) for r in labels]))  # [M, s]
    lr = torch.tensor(nuis["lr"]).view(M, 1, 1)
    steps = torch.tensor(nuis["steps"])
    noise = torch.tensor(nuis["input_noise"]).view(M, 1, 1)
    state = {k: (torch.zeros_like(p), torch.zeros_like(p)) for k, p in params.items()}
    b1, b2, eps = 0.9, 0.999, 1e-8  # Adam, written out so each child has its own lr and stop step
    for t in range(1, int(steps.max()) + 1):
        pick = torch.randint(cfg.subset_size, (M, cfg.batch), generator=g)
        cls = torch.gather(subsets, 1, pick)
        j = torch.randint(1 << 30, (M, cfg.batch), generator=g) % counts[cls]
        xb = X[table[cls, j]] + noise * torch.randn(M, cfg.batch, X.shape[1], generator=g)
        loss = F.cross_entropy(_forward(params, xb).flatten(0, 1), y[table[cls, j]].flatten(),
                               reduction="sum") / cfg.batch
        grads = torch.autograd.grad(loss, list(params.values()))
        active = (steps >= t).float()
        with torch.no_grad():
            for (k, p), gr in zip(params.items(), grads, strict=True):
                m, v = state[k]
                m.mul_(b1).add_(gr, alpha=1 - b1)
                v.mul_(b2).addcmul_(gr, gr, value=1 - b2)
                upd = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
                shape = (M,) + (1,) * (p.dim() - 1)
                p.sub_(upd * lr.view(shape) * active.view(shape))
        if progress is not None:
            progress(t, int(steps.max()))
    weights = {k: p.detach() for k, p in params.items()}
    # function-preserving nuisance: permute the first hidden layer's neurons of some children
    # (rows of fc1, columns of fc2); the row-Gram view of fc2 is exactly invariant to it
    perm_rng = np.random.default_rng(cfg.seed + 4)
    permuted = perm_rng.random(M) < cfg.permute_hidden
    for i in np.flatnonzero(permuted):
        pi = torch.from_numpy(perm_rng.permutation(cfg.hidden))
        weights["fc1.weight"][i] = weights["fc1.weight"][i][pi]
        weights["fc1.bias"][i] = weights["fc1.bias"][i][pi]
        weights["fc2.weight"][i] = weights["fc2.weight"][i][:, pi]
    nuis["permuted"] = permuted
    n_tr, n_va, _ = cfg.split_sizes()
    order = np.random.default_rng(cfg.seed + 3).permutation(M)
    split = {"train": np.sort(order[:n_tr]), "val": np.sort(order[n_tr:n_tr + n_va]),
             "test": np.sort(order[n_tr + n_va:])}
    return Zoo(weights, labels, split, nuis, cfg)


def child_state_dict(zoo: Zoo, i: int) -> dict[str, torch.Tensor]:
    """Child ``i`` as an ordinary state dict (what ``zoo build`` writes as safetensors)."""
    return {k: v[i].contiguous() for k, v in zoo.weights.items()}


def child_accuracy(zoo: Zoo, idx: np.ndarray) -> np.ndarray:
    """Accuracy of children ``idx`` on the digits of their own classes (a sanity report)."""
    X, y = _digits(zoo.config.seed)
    with torch.no_grad():
        params = {k: v[idx] for k, v in zoo.weights.items()}
        pred = _forward(params, X.unsqueeze(0).expand(len(idx), -1, -1)).argmax(-1)
    own = torch.tensor(zoo.labels[idx])[:, y] > 0  # [n, N]: example in the child's subset
    correct = (pred == y).float() * own
    return (correct.sum(1) / own.sum(1)).numpy()


def write_zoo(cfg: ZooConfig, out) -> dict:
    """``zoo build``: children as ``children/child_NNNN.safetensors`` plus ``train.jsonl``,
    ``val.jsonl`` and ``test.jsonl`` (``{"path", "labels"}``, class names "0".."9"), written into
    a temporary folder and renamed into place."""
    from safetensors.torch import save_file

    from icml26_shared.io import atomic_dir, dumps_json

    from .io import EXISTS, check_new_output

    out = check_new_output(out)
    zoo = make_model_zoo(cfg)
    with atomic_dir(out, exists_error=EXISTS) as tmp:
        (tmp / "children").mkdir()
        for i in range(cfg.n_models):
            save_file(child_state_dict(zoo, i), str(tmp / "children" / f"child_{i:04d}.safetensors"))
        for part, idx in zoo.split.items():
            lines = [dumps_json({"path": f"children/child_{i:04d}.safetensors",
                                 "labels": [str(c) for c in np.flatnonzero(zoo.labels[i])]}, indent=None)
                     for i in idx]
            (tmp / f"{part}.jsonl").write_text("\n".join(lines) + "\n")
    return {"models": cfg.n_models, **{p: len(ix) for p, ix in zoo.split.items()}}
