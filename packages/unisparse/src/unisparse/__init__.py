"""unisparse: training-free sparse prefill attention via multi-granularity composite tokens
(UniSparse, ICML 2026) and the estimators it is compared with, behind one block-mask interface.

Attributes load lazily so that ``import unisparse`` (and the CLI's ``--help``) stays free of torch.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("unisparse")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0+unknown"

_LAZY = {
    "METHODS": "baselines", "register": "baselines", "SparseConfig": "config",
    "attention_recall": "core", "block_density": "core", "relative_error": "core",
    "patch": "io", "unpatch": "io", "estimate_block_mask": "sparse",
    "sparse_prefill_attention": "sparse",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'unisparse' has no attribute {name!r}")
