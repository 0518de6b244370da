"""mvprobe: tell what an undocumented checkpoint was trained on from one layer's weights —
MVProbe (four standardised probe views, ICML 2026), ProbeX, ProbeX x4, StatNN and flat baselines
behind one trainer, with an offline mini Model Jungle."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mvprobe")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0+unknown"

_LAZY = {
    "MVProbe": "core", "branch_norm_report": "core", "theorem3_ratio": "core",
    "theorem3_monte_carlo": "core", "theorem1_pair": "core", "standardize": "core",
    "ProbeConfig": "config", "TrainConfig": "config", "ZooConfig": "config",
    "METHODS": "baselines", "ProbeX": "baselines", "StatNN": "baselines", "build": "baselines",
    "register": "baselines", "fit": "train", "metrics": "train",
    "WeightDataset": "io", "read_layer": "io", "save_probe": "io", "load_probe": "io",
    "build_index": "index", "load_cache": "index", "make_model_zoo": "zoo",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):  # lazy: `import mvprobe` stays light, torch loads on first use
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mvprobe' has no attribute {name!r}")
