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


def train_oft_expert(base, split, task, steps, seed, block, out: Path, neumann: bool = False) -> Path:
    """Train a peft OFT adapter on l1/l2 through ``get_peft_model`` (frozen head) and save it with
    ``save_pretrained``: peft's exact Cayley path, or its default Neumann series (5 terms)."""
    import warnings

    from peft import OFTConfig, get_peft_model

    torch.manual_seed(seed)
    head = task_head(task, seed)
    body = Body()
    body.load_state_dict(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = get_peft_model(body, OFTConfig(r=0, oft_block_size=block, target_modules=list(TARGETS),
                                            use_cayley_neumann=neumann, module_dropout=0.0))
    X, y = task_data(split, task, "train")
    _train([p for p in pm.parameters() if p.requires_grad],
           lambda i: F.cross_entropy(head(pm(X[i])), y[i]), steps, 1e-2, len(y), seed)
    pm.save_pretrained(str(out))
    return out


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
