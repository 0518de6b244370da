"""CDAL: Causal Disentangled Anchor Learning for fair multi-view clustering (ICML 2026).

Heavy pieces import lazily: ``from fair_cdal import CDAL`` loads scikit-learn, ``import fair_cdal``
does not.
"""

from importlib import import_module
from importlib.metadata import version

__version__ = version("fair-cdal")
__all__ = ["CDAL", "__version__", "load_nutrimouse", "load_uci_mfeat", "metrics"]

_LAZY = {"CDAL": ("estimator", "CDAL"), "load_nutrimouse": ("io", "load_nutrimouse"),
         "load_uci_mfeat": ("io", "load_uci_mfeat"), "metrics": ("metrics", None)}


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        m = import_module(f".{mod}", __name__)
        return m if attr is None else getattr(m, attr)
    raise AttributeError(f"module 'fair_cdal' has no attribute {name!r}")
