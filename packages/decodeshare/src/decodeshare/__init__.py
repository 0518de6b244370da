"""DecodeShare: the shared subspace of LLM decode-time decisions.

Light at import time: the torch-based hooks are loaded on first use of their names."""

from importlib import import_module
from importlib.metadata import version

from .config import AblationConfig, CollectConfig, SteerConfig, SubspaceConfig
from .core import (
    SharedFit,
    alpha_match,
    choose_k,
    energy,
    fit_shared,
    k_match,
    null_perm,
    null_scramble,
    principal_angles,
    rank_quality,
    repair,
    steering_overlap,
)

__version__ = version("decodeshare")

_LAZY = {"DecodeOnlyIntervention": "hooks", "PhaseIntervention": "hooks", "StateRecorder": "hooks",
         "collect_decode_states": "hooks", "find_decoder_layers": "hooks", "prepare": "readout",
         "score": "readout", "Protocol": "protocol", "load_model": "io", "read_tasks": "io"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)


__all__ = ["AblationConfig", "CollectConfig", "SharedFit", "SteerConfig", "SubspaceConfig", "__version__",
           "alpha_match", "choose_k", "energy", "fit_shared", "k_match", "null_perm", "null_scramble",
           "principal_angles", "rank_quality", "repair", "steering_overlap", *_LAZY]
