"""A deterministic multi-task "tabular policy" simulator for the task-weight dynamics [R, design
note §6.1]: each task k has an accuracy J_k that grows with the share z_k of updates it receives,
J_k ← J_k + η_k · z_k · (1 − J_k), and the improvement signal is that growth. It shows the paper's
Fig. 2 failure (strict minimax collapses onto the current worst task) against IWU in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .core import TaskWeighter


@dataclass
class SimTrace:
    z: np.ndarray  # [steps, K]
    J: np.ndarray  # [steps, K]
    improvement: np.ndarray  # [steps, K]


def simulate(J0, rates, mode: str = "iwu", lam: float = 0.2, steps: int = 500, learn: bool = True,
             improvement_scale: float = 1.0, lr: float = 0.025, weight_decay: float = 0.0,
             improvement_clip: float = 0.1) -> SimTrace:
    """Run ``steps`` weight updates. ``learn=False`` freezes J (the improvement still depends on z:
    a task given more of the batch improves more, with headroom 1 − J)."""
    J = np.asarray(J0, np.float64).copy()
    rates = np.asarray(rates, np.float64)
    w = TaskWeighter(len(J), lam=lam, lr=lr, weight_decay=weight_decay,
                     improvement_clip=improvement_clip, acc_ema=0.0, mode=mode)
    zs, Js, Is = [], [], []
    for _ in range(steps):
        z = w.z
        gain = rates * z * (1 - J)
        w.observe_accuracy(J)
        w.update(improvement_scale * gain)
        if learn:
            J = J + gain
        zs.append(z)
        Js.append(J.copy())
        Is.append(gain)
    return SimTrace(np.array(zs), np.array(Js), np.array(Is))
