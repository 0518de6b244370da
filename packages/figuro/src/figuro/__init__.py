"""FiGuRO: shared and private intrinsic dimension by fidelity-guided rank optimisation.

Reconstructed from the ICML 2026 abstract (arXiv 2608.10857); see the README for what is
faithful and what is ours. Torch is imported only when an estimator is used.
"""

from importlib.metadata import version

__version__ = version("figuro")
__all__ = ["FiGuRO", "LowRankLinear", "RankController", "simulate", "__version__"]


def __getattr__(name):
    if name == "FiGuRO":
        from .estimator import FiGuRO

        return FiGuRO
    if name in ("LowRankLinear", "RankController", "simulate"):
        from . import core

        return getattr(core, name)
    raise AttributeError(name)
