"""GCIB: Graph Contrastive Information Bottleneck for multi-behaviour recommendation.

Public API (imports torch on first use of the model helpers)::

    from gcib import MultiBehaviorData, TrainConfig, leave_one_out, inject_noise, synthetic
    from gcib import load_ml100k, read_interactions, method_config, train, evaluate
"""

from importlib.metadata import version

from .baselines import METHODS, method_config
from .config import TrainConfig
from .data import MultiBehaviorData, Split, inject_noise, leave_one_out, synthetic

__version__ = version("gcib")


def __getattr__(name: str):  # lazy: torch / pandas only when asked for
    if name in ("train", "evaluate", "keep_probabilities", "kept_mask", "GCIBModel"):
        from . import model

        return getattr(model, name)
    if name in ("read_interactions", "read_recbole_inter", "load_ml100k", "read_mbgcn_dir", "read_cml_dir"):
        from . import io

        return getattr(io, name)
    if name == "denoise_metrics":
        from .denoise import denoise_metrics

        return denoise_metrics
    raise AttributeError(name)


__all__ = ["METHODS", "GCIBModel", "MultiBehaviorData", "Split", "TrainConfig", "__version__", "denoise_metrics",
           "evaluate", "inject_noise", "keep_probabilities", "kept_mask", "leave_one_out", "load_ml100k",
           "method_config", "read_cml_dir", "read_interactions", "read_mbgcn_dir", "read_recbole_inter",
           "synthetic", "train"]
