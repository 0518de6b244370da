"""FLAM: Factored Latent Action world models."""

from importlib.metadata import version

__version__ = version("flam-wm")
__all__ = ["__version__"]
