"""MC2: evaluating and steering modality preference in multimodal LLMs (arXiv 2505.20977).

Light at import: the torch-based pieces (toy VLM, adapters, steering hook, protocol) are imported
from their modules: ``from mc2_bench.protocol import evaluate``.
"""

from importlib.metadata import version

from .core import (
                   MC2Item,
                   letter_to_modality,
                   options,
                   preference_direction,
                   preference_metrics,
                   prompt_text,
)

__version__ = version("mc2-bench")
__all__ = ["MC2Item", "__version__", "letter_to_modality", "options", "preference_direction",
           "preference_metrics", "prompt_text"]
