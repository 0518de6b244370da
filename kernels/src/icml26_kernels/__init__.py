"""icml26-kernels: Triton GPU kernels, each beside a PyTorch reference that is also the CPU path.

Dispatch (one rule for every op): Triton on CUDA tensors, the reference otherwise;
``ICML26_KERNELS=reference|triton`` forces either (an impossible request raises).
"""

from importlib.metadata import PackageNotFoundError, version

from ._dispatch import backend_for
from .block_sparse_attention import block_sparse_attention
from .token_logprobs import token_logprobs

try:
    __version__ = version("icml26-kernels")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0+unknown"

__all__ = ["__version__", "backend_for", "block_sparse_attention", "token_logprobs"]
