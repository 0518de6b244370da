"""ESP: training-free multi-token prediction by embedding-space probing (lossless tree decoding).

The public API is imported lazily, so that ``esp-decode --help`` never imports torch."""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("esp-decode")
except PackageNotFoundError:  # a source tree on PYTHONPATH (the GPU image of CI/gpu-check)
    __version__ = "0+unknown"
_API = {"ESPDecoder": "esp", "ESPDrafter": "esp", "HybridDrafter": "esp", "ESPConfig": "config",
        "PLDConfig": "config", "LADEConfig": "config", "STANDConfig": "config", "generate": "decode",
        "Drafter": "decode", "make_drafter": "baselines", "DRAFTERS": "baselines", "Tree": "core",
        "build_tree": "core", "item_visibility": "core", "tree_attention_mask": "core",
        "verify_greedy": "core", "verify_sampling": "core", "Eagle2Config": "config", "Eagle2Drafter": "eagle",
        "load_head": "eagle"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(f".{_API[name]}", __name__), name)
    raise AttributeError(f"module 'esp_decode' has no attribute {name!r}")
