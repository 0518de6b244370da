"""crossq: compressed late-interaction (ColBERT-style) retrieval with context-conditioned token
codes (CrossQ, ICML 2026). Not the CrossQ reinforcement-learning algorithm.

Public names are imported lazily so that ``import crossq`` (and ``crossq --help``) stays light.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("crossq")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

_LAZY = {
    "Codec": "codecs", "get_codec": "codecs", "CODECS": "codecs",
    "CrossQuantizer": "core", "ContextEncoder": "core", "maxsim": "core",
    "adc_tables": "core", "adc_token_scores": "core", "listwise_kl": "core", "margin_loss": "core",
    "fit_crossq": "train", "build_training_set": "train",
    "Index": "index", "write_index": "index",
    "build_index": "indexer", "search_texts": "indexer",
    "save_codec_model": "indexer", "load_codec_model": "indexer",
    "LateInteractionEncoder": "encoder",
    "EncoderConfig": "config", "CrossQConfig": "config",
    "read_corpus": "io", "read_qrels": "io", "read_run": "io", "write_run": "io", "evaluate": "io",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'crossq' has no attribute {name!r}")
