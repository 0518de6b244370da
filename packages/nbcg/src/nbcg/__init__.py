"""NBCG: Nash-Bargained Causal Game for long-tailed multi-label text classification (reconstructed)."""

from importlib.metadata import version

from .config import NBCGConfig, SEMConfig, SynthConfig

__version__ = version("nbcg")
__all__ = ["NBCGConfig", "SEMConfig", "SynthConfig", "__version__"]
