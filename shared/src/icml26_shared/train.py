"""Training helpers every package needs, framework-agnostic (plain Python numbers in, no torch).

``EarlyStopping`` replaces the hand-written patience loops: feed it the dev metric after each
evaluation, stop when it says so, and record ``stopped_at`` with the learning curve
(``Results.add_curve(..., stopped_at=es.stopped_at)``) so the report can flag a run that stopped at
a transient dip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["EarlyStopping"]


@dataclass
class EarlyStopping:
    """Stop when the monitored value has not improved by more than ``min_delta`` for ``patience``
    consecutive evaluations.

    ``mode="max"`` for metrics (accuracy, HR@10), ``"min"`` for losses. ``min_steps`` evaluations
    are always made before stopping is allowed (a warm-up that rides out early noise).
    ``step(value, at=None) -> bool`` returns True when training should stop; ``improved`` says
    whether the last value was a new best (save a checkpoint then), ``best`` / ``best_at`` hold the
    best value and the step it came at, ``stopped_at`` the step where stopping fired (None while
    running). NaN never counts as an improvement.
    """

    patience: int = 5
    min_delta: float = 0.0
    mode: Literal["max", "min"] = "max"
    min_steps: int = 0
    best: float | None = None
    best_at: float | None = None
    stopped_at: float | None = None
    improved: bool = False
    _bad: int = field(default=0, repr=False)
    _count: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {self.mode!r}")
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        if self.min_delta < 0 or not math.isfinite(self.min_delta):
            raise ValueError(f"min_delta must be a finite number >= 0, got {self.min_delta}")

    def is_better(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.mode == "max":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def step(self, value: float, at: float | None = None) -> bool:
        """Record one evaluation (``at``: its step, epoch or update count; default the number of
        evaluations so far). Returns True when training should stop."""
        value = float(value)
        self._count += 1
        at = float(self._count if at is None else at)
        self.improved = self.is_better(value)
        if self.improved:
            self.best, self.best_at, self._bad = value, at, 0
        else:
            self._bad += 1
        stop = self._bad >= self.patience and self._count >= self.min_steps
        if stop and self.stopped_at is None:
            self.stopped_at = at
        return stop

    @property
    def should_stop(self) -> bool:
        return self.stopped_at is not None

    def state_dict(self) -> dict[str, Any]:
        return {"patience": self.patience, "min_delta": self.min_delta, "mode": self.mode,
                "min_steps": self.min_steps, "best": self.best, "best_at": self.best_at,
                "stopped_at": self.stopped_at, "improved": self.improved, "bad": self._bad,
                "count": self._count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self._bad, self._count = int(state.pop("bad")), int(state.pop("count"))
        for key, value in state.items():
            if not hasattr(self, key):
                raise KeyError(f"unknown EarlyStopping state {key!r}")
            setattr(self, key, value)
        self.__post_init__()
