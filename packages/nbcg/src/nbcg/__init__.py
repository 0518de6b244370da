"""NBCG: Nash-Bargained Causal Game for long-tailed multi-label text classification (reconstructed)."""

from importlib.metadata import version

from .config import NBCGConfig, SEMConfig, SynthConfig

__version__ = version("nbcg")
__all__ = ["NBCGClassifier", "NBCGConfig", "SEMConfig", "SynthConfig", "__version__"]


def __getattr__(name: str):   # the estimator imports scikit-learn: loaded on first use
    if name == "NBCGClassifier":
        from .estimator import NBCGClassifier

        return NBCGClassifier
    raise AttributeError(f"module 'nbcg' has no attribute {name!r}")
