"""icml26-shared: the thin, framework-agnostic core of the icml26 monorepo.

Importing this package imports only the standard library and NumPy.
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import UserError, check, cli_entry
from .registry import MethodDescriptor, Paper, discover
from .results import Claim, ClaimCheck, EnvInfo, Results, Row, mean_spread

try:
    __version__ = version("icml26-shared")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "Claim", "ClaimCheck", "EnvInfo", "MethodDescriptor", "Paper", "Results", "Row", "UserError",
    "__version__", "check", "cli_entry", "discover", "mean_spread",
]
