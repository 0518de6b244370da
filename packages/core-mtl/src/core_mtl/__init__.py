"""CORE-MTL: Causal Orthogonal Representations for Multi-Task Learning (ICML 2026).

Light at import (the CLI's ``--help`` must not import torch); the public API loads on first use:
``CoreMTL``, ``MTAN``, ``train``, ``TrainConfig``, ``linear_cka``, ``aggregate``, ``make_split``.
"""

from importlib import import_module
from importlib.metadata import version

__version__ = version("core-mtl")

_API = {"CoreMTL": "model", "MTAN": "model", "train": "train", "Batch": "train",
        "TrainConfig": "config", "ModelConfig": "config", "TaskSpec": "config",
        "linear_cka": "losses", "aggregate": "baselines", "make_split": "synthetic",
        "render": "core", "sh_shading": "core"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(f".{_API[name]}", __name__), name)
    raise AttributeError(f"module 'core_mtl' has no attribute {name!r}")
