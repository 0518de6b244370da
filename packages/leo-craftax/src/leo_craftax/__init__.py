"""leo-craftax: goal-conditioned agents that Learn Everything all at Once (LEO), in JAX/Flax.

Heavy modules (JAX, Flax, Craftax) load on first use of the names below.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("leo-craftax")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0+unknown"

_LAZY = {
    "TrainConfig": "config", "EnvConfig": "config", "gridworld_cpu": "config",
    "GoalSet": "envs", "Gridworld": "envs", "CraftaxGC": "envs", "GymnaxGC": "envs", "make_env": "envs",
    "LEONetwork": "core", "AllGoalsQHead": "core", "GoalConditionedQ": "core",
    "all_goals_td_targets": "core", "goal_td_target": "core", "leo_loss": "core",
    "q_for_goal": "core", "q_grouped": "core", "make_train": "train", "train_parts": "train",
    "train_seeds": "train", "evaluate": "train",
    "build_algo": "algos", "register": "algos", "save_checkpoint": "io",
    "load_checkpoint": "io", "craftax_classic_goal_set": "craftax_goals",
    "craftax_goal_set": "craftax_goals", "speed_table": "bench", "train_step_table": "bench",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
