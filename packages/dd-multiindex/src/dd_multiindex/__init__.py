"""Dataset distillation on multi-index models: a harness for the Θ̃(r²d + L) memory law.

The public API is imported lazily (``import dd_multiindex`` stays free of torch until a name is
used), so the CLI's ``--help`` and the registry stay light.
"""

from importlib import import_module
from importlib.metadata import version

__version__ = version("dd-multiindex")

_API = {
    "MultiIndexTeacher": "core", "TwoStageLearner": "core", "DistilledSet": "core", "Slope": "core",
    "alignment": "core", "principal_angles": "core", "memory_of": "core", "fit_slopes": "core",
    "distilled_directions": "core", "stage2_inputs": "core", "mse": "core",
    "DISTILLERS": "distill", "gradient_matching": "distill", "performance_matching": "distill",
    "distill_labels": "distill", "BASELINES": "baselines",
    "sweep": "runs", "make_spec": "runs", "parse_grid": "runs",
    "save_distilled": "io", "load_distilled": "io", "reproduce": "experiments",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(f".{_API[name]}", __name__), name)
    raise AttributeError(f"module 'dd_multiindex' has no attribute {name!r}")
