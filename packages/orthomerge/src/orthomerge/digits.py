"""The CPU benchmark [R]: a 64→128→128 MLP body trained on scikit-learn digits (10-way), five
derived tasks with frozen random heads, and OFT / full fine-tuned experts written to disk in the
formats users have (a peft OFT adapter folder; a safetensors checkpoint).

The body is evaluated functionally from a state dict (``l1.weight``, ``l1.bias``, ``l2.weight``,
``l2.bias``), so every merge is scored from exactly the tensors it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from icml26_shared.io import dumps_json

from . import core

IN, HID = 64, 128
TARGETS = ("l1", "l2")
TASKS = {  # name -> (classes, label map, input map)  [R] (design note §6.1)
    "parity": (2, lambda y: y % 2, None),
    "high": (2, lambda y: (y >= 5).astype(np.int64), None),
    "mod3": (3, lambda y: y % 3, None),
    "rot90": (10, lambda y: y, "rot90"),
    "perm": (10, lambda y: (3 * y + 7) % 10, None),
}


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(IN, HID), nn.Linear(HID, HID)

    def forward(self, x):
        return F.relu(self.l2(F.relu(self.l1(x))))


def features(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    h = F.relu(x @ sd["l1.weight"].T + sd["l1.bias"])
    return F.relu(h @ sd["l2.weight"].T + sd["l2.bias"])


@dataclass
class Split:
    X: dict[str, torch.Tensor]  # "train" / "dev" / "test" -> standardised inputs
    y: dict[str, np.ndarray]


def load_split(seed: int) -> Split:
    """Digits split 60/20/20 (stratified, per seed); standardised with train statistics."""
    from sklearn.model_selection import train_test_split

    from icml26_shared.data import load_sklearn

    X, y = load_sklearn("digits")
    X = X.astype(np.float32)
    Xtr, Xrest, ytr, yrest = train_test_split(X, y, test_size=0.4, random_state=seed, stratify=y)
    Xdev, Xte, ydev, yte = train_test_split(Xrest, yrest, test_size=0.5, random_state=seed, stratify=yrest)
    mu, sd = Xtr.mean(0), Xtr.std(0) + 1e-3
    # the rot90 task's images are rotated before standardising (8×8 pixels)
    out_X, out_y = {}, {}
    for name, (a, b) in {"train": (Xtr, ytr), "dev": (Xdev, ydev), "test": (Xte, yte)}.items():
        out_X[name] = torch.from_numpy((a - mu) / sd)
        out_X[name + "/rot90"] = torch.from_numpy((np.rot90(a.reshape(-1, 8, 8), 1, axes=(1, 2))
                                                  .reshape(-1, 64) - mu) / sd)
        out_y[name] = b.astype(np.int64)
    return Split(out_X, out_y)


def task_data(split: Split, task: str, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    if task == "base":
        return split.X[part], torch.from_numpy(split.y[part])
    _, label, inp = TASKS[task]
    X = split.X[f"{part}/{inp}"] if inp else split.X[part]
    return X, torch.from_numpy(label(split.y[part]))


def accuracy(sd, head: nn.Linear, X, y) -> float:
    with torch.no_grad():
        return float((head(features({k: v.float() for k, v in sd.items()}, X)).argmax(1) == y).float().mean())


def _train(params, loss_fn, steps: int, lr: float, n: int, seed: int) -> None:
    opt = torch.optim.Adam(params, lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, n, (128,), generator=g)
        opt.zero_grad()
        loss_fn(idx).backward()
        opt.step()


def train_base(split: Split, steps: int, seed: int) -> tuple[dict, nn.Linear]:
    torch.manual_seed(seed)
    body, head = Body(), nn.Linear(HID, 10)
    X, y = task_data(split, "base", "train")
    _train(list(body.parameters()) + list(head.parameters()),
           lambda i: F.cross_entropy(head(body(X[i])), y[i]), steps, 3e-3, len(y), seed)
    return {k: v.detach().clone() for k, v in body.state_dict().items()}, head.requires_grad_(False)


def task_head(task: str, seed: int) -> nn.Linear:
    """A frozen random head per task (the expert must move the body to fit it) [R]."""
    g = torch.Generator().manual_seed(10_000 * seed + sum(map(ord, task)))
    head = nn.Linear(HID, TASKS[task][0])
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=g) * (3.0 / HID ** 0.5))
        head.bias.zero_()
    return head.requires_grad_(False)


def oft_body(base: dict, vecs: dict[str, torch.Tensor], block: int) -> dict:
    """Body weights W0·R(vec)ᵀ, peft's exact Cayley path (differentiable)."""
    sd = dict(base)
    for t in TARGETS:
        R = core.block_diag(core.cayley(core.skew_from_vec(vecs[t], block), "peft"))
        sd[f"{t}.weight"] = base[f"{t}.weight"] @ R.T
    return sd


def train_oft_expert(base, split, task, steps, seed, block, out: Path) -> Path:
    """Train OFT generators on l1/l2 (frozen head) and write them as a peft OFT adapter."""
    torch.manual_seed(seed)
    head = task_head(task, seed)
    vecs = {t: torch.zeros(base[f"{t}.weight"].shape[1] // block, core.n_params(block), requires_grad=True)
            for t in TARGETS}
    X, y = task_data(split, task, "train")
    _train(list(vecs.values()), lambda i: F.cross_entropy(head(features(oft_body(base, vecs, block), X[i])), y[i]),
           steps, 1e-2, len(y), seed)
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({f"base_model.model.{t}.oft_R.weight": v.detach().contiguous() for t, v in vecs.items()},
              str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out / "adapter_config.json").write_text(dumps_json(oft_config(block), indent=2))
    return out


def oft_config(block: int) -> dict:
    return {"peft_type": "OFT", "task_type": None, "base_model_name_or_path": None, "r": 0,
            "oft_block_size": block, "target_modules": list(TARGETS), "module_dropout": 0.0,
            "bias": "none", "init_weights": True, "coft": False, "eps": 6e-05, "block_share": False,
            "use_cayley_neumann": False, "num_cayley_neumann_terms": 5, "fan_in_fan_out": False,
            "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
            "inference_mode": True, "exclude_modules": None, "revision": None}


def train_full_expert(base, split, task, steps, seed, out: Path) -> Path:
    """Fine-tune every body tensor (frozen head) and write a safetensors checkpoint."""
    torch.manual_seed(seed)
    head = task_head(task, seed)
    body = Body()
    body.load_state_dict(base)
    X, y = task_data(split, task, "train")
    _train(list(body.parameters()), lambda i: F.cross_entropy(head(body(X[i])), y[i]), steps, 1e-3, len(y), seed)
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in body.state_dict().items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def save_base(base: dict, out: Path) -> Path:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in base.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    return out
