"""circumerge: merge LoRA adapters into one LoRA adapter — CircuMerge (shared circulant sketch,
reconstructed from the ICML 2026 abstract) beside Core Space, KnOTS and full-space merging."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("circumerge")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0+unknown"

__all__ = ["MergeConfig", "__version__", "effective_rank", "inspect_adapters", "merge_adapters",
           "merge_layer", "merge_lora", "RULES", "SPACES", "register_space"]


def __getattr__(name: str):  # lazy: `import circumerge` stays light, torch loads on first use
    if name == "MergeConfig":
        from .config import MergeConfig
        return MergeConfig
    if name in ("merge_layer", "SPACES", "register_space"):
        from . import spaces
        return getattr(spaces, name)
    if name == "RULES":  # the rules live once, in the core (shared with orthomerge)
        from icml26_shared.merge import RULES
        return RULES
    if name == "effective_rank":
        from .core import effective_rank
        return effective_rank
    if name in ("merge_lora", "merge_adapters", "inspect_adapters"):
        from . import adapters
        return getattr(adapters, name)
    raise AttributeError(f"module 'circumerge' has no attribute {name!r}")
