"""mtgrpo: Multi-Task GRPO (ICML 2026, arXiv 2602.05547) — improvement-aware task weights (IWU) and
a ratio-preserving sampler (RPS) for multi-task RL post-training.

Importing the package is light; torch is imported by the submodules that need it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mtgrpo")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0+unknown"

_LAZY = {
    "TrainConfig": "config", "TinyPolicyConfig": "config",
    "TaskWeighter": "core", "RatioPreservingSampler": "core", "grpo_advantages": "core",
    "clipped_pg_loss": "core", "zero_gradient_mask": "core", "iwu_gradient": "core",
    "inflation": "core", "delta_m": "core",
    "METHODS": "baselines", "MethodSpec": "baselines", "SecBandit": "baselines",
    "Task": "tasks", "make_synthetic": "tasks", "get_verifier": "tasks",
    "MTGRPOTrainer": "trainer", "Policy": "trainer",
    "load_task": "io", "load_hf_policy": "io", "wrap_hf": "io", "build_tiny": "io",
    "sft_warmstart": "io", "save_policy": "io",
    "write_reasoning_gym": "gym", "reasoning_gym_verifier": "gym",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mtgrpo' has no attribute {name!r}")


__all__ = ["__version__", *_LAZY]
