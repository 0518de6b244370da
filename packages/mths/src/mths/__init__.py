"""MTHS: Multi-Task Hierarchical Search for automated heuristic design."""

from importlib.metadata import version

__version__ = version("mths")
__all__ = ["__version__"]
