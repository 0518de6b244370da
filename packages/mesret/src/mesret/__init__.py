"""MES-RET: many-task evolution strategy with reward-weighted evaluation and transfer."""

from importlib.metadata import version

from .algorithm import MESRET, Result
from .baselines import ALGOS, optimize
from .config import MESRETConfig
from .policy import SemanticLayout, policy_suite
from .suites import cec17_mix, wcci20
from .tasks import TaskSpec

__version__ = version("mesret")
__all__ = ["ALGOS", "MESRET", "MESRETConfig", "Result", "SemanticLayout", "TaskSpec", "__version__",
           "cec17_mix", "optimize", "policy_suite", "wcci20"]
