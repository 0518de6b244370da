"""Tasks: ``TaskSpec`` (a black box on a box, minimised), validation and evaluation in the unified
[0, 1] box. Decision vectors live in [0, 1]^D; a sample is clipped to the box and mapped to the
task's bounds before evaluation (MToP's ``Evaluation`` [C]); the unclipped vector is what the
boundary penalty sees."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from icml26_shared import UserError


@dataclass(frozen=True)
class TaskSpec:
    """One task: ``fn`` maps ``[n, dim]`` real points to ``[n]`` objective values (minimised).
    ``lower``/``upper`` are scalars or per-dimension arrays; ``f_opt`` the known optimum (for the
    ``error`` metric); ``cv`` an optional ``[n, dim] → [n]`` constraint violation (≥ 0)."""

    dim: int
    fn: Callable[[np.ndarray], Any]
    lower: Any = 0.0
    upper: Any = 1.0
    f_opt: float | None = None
    name: str | None = None
    cv: Callable[[np.ndarray], Any] | None = None

    def label(self, index: int) -> str:
        return self.name or f"task {index}"

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo = np.broadcast_to(np.asarray(self.lower, float), (self.dim,))
        hi = np.broadcast_to(np.asarray(self.upper, float), (self.dim,))
        return lo, hi


def check_tasks(tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """Validate a task list; a problem raises ``UserError`` naming the task (name, else index)."""
    tasks = list(tasks)
    if not tasks:
        raise UserError("no tasks given")
    for i, t in enumerate(tasks):
        if not isinstance(t, TaskSpec):
            raise UserError(f"task {i}: expected a mesret.TaskSpec, got {type(t).__name__}")
        lab = t.label(i)
        if isinstance(t.dim, bool) or not isinstance(t.dim, (int, np.integer)) or t.dim < 1:
            raise UserError(f"{lab}: dim must be an integer >= 1, got {t.dim!r}")
        if not callable(t.fn):
            raise UserError(f"{lab}: fn is not callable")
        try:
            lo, hi = t.bounds()
        except ValueError:
            raise UserError(f"{lab}: lower/upper must be scalars or have {t.dim} entries") from None
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise UserError(f"{lab}: bounds must be finite")
        if np.any(lo >= hi):
            raise UserError(f"{lab}: lower must be < upper in every dimension")
    return tasks


def to_real(task: TaskSpec, X_unit: np.ndarray) -> np.ndarray:
    lo, hi = task.bounds()
    return lo + np.clip(X_unit, 0.0, 1.0) * (hi - lo)


def evaluate(task: TaskSpec, index: int, X_unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(f, cv)`` of the unit-box samples ``X_unit`` (rows); wrong shapes raise ``UserError``."""
    Xr = to_real(task, X_unit)
    f = _vector(task.fn(Xr), len(Xr), task.label(index), "fn")
    f = np.where(np.isnan(f), np.inf, f)  # a NaN objective ranks last [R]
    cv = np.zeros(len(Xr)) if task.cv is None else np.maximum(
        _vector(task.cv(Xr), len(Xr), task.label(index), "cv"), 0.0)
    return f, cv


def check_first_generation(task: TaskSpec, index: int, f: np.ndarray) -> None:
    """A task whose first generation has no finite objective value cannot be ranked or rewarded:
    refuse it (``UserError`` naming it) instead of spending its budget on a blind search."""
    if not np.any(np.isfinite(f)):
        raise UserError(f"{task.label(index)}: fn returned no finite value on its first {len(f)} "
                        "samples (all NaN/inf); check the objective")


def _vector(out: Any, n: int, label: str, what: str) -> np.ndarray:
    arr = np.asarray(out, dtype=float).reshape(-1) if np.ndim(out) <= 1 else np.asarray(out, float)
    if arr.shape != (n,):
        raise UserError(f"{label}: {what} must map [n, dim] to [n] values, got shape {np.shape(out)}")
    return arr
