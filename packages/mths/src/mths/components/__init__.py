"""The component library that evolved programs (and the classic baselines) are built from.

``engine.ils`` is the task-agnostic loop (initialisation / main loop / post-processing of the
authors' ALGORITHM template [C]); ``tsp``, ``cvrp``, ``fssp`` and ``bpp`` hold each task's
constructors, improvement operators, perturbations and key functions. The set of components and
the grammar over them are reconstructed [R] (design note section 6.1).
"""

from .engine import ils, solve

__all__ = ["ils", "solve"]
