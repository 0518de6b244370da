"""OrthoMerge (ICML 2026): model merging on the orthogonal group.

The public API is imported lazily (``orthomerge.cayley`` loads torch on first use), so that
``orthomerge --help`` and the icml26 registry stay light.
"""

from importlib import import_module
from importlib.metadata import version

__version__ = version("orthomerge")
_API = {
    "DecoupleConfig": "config", "OFTMergeConfig": "config",
    "RotationError": "core", "cayley": "core", "cayley_neumann": "core", "hyperspherical_energy": "core",
    "inverse_cayley": "core", "merge_skew": "core", "procrustes_right": "core", "skew_from_vec": "core",
    "spectral_norm": "core", "vec_from_skew": "core", "orthogonality_error": "core",
    "diagnose": "merging", "merge_oft_adapters": "merging", "oft_dense": "merging",
    "orthogonal_residual_merge": "merging", "orthogonality": "merging", "merge_deltas": "baselines",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(f".{_API[name]}", __name__), name)
    raise AttributeError(f"module 'orthomerge' has no attribute {name!r}")
