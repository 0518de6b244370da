"""Training runs shared by several tests. Compilation is most of this package's test time (one
XLA program per algorithm and size), so each program is compiled once per session:

- ``smoke_cfg(algo)`` is the registered ``reproduce --scale smoke`` configuration, trained
  through ``train_seeds`` (``compiled_train``'s in-process cache): the contract test's two smoke
  runs, the checkpoint and BatchRenorm tests and the LEO / PQN rows of the every-algorithm test
  run one compiled program per algorithm;
- ``tiny_run(algo)`` is a few updates at tiny sizes for the other algorithms, compiled with
  LLVM's optimisation off (``FAST``): the same XLA program and the same values (checked on LEO:
  identical losses), half the compile time.
"""

from functools import cache

import jax
import numpy as np
import pytest
from leo_craftax.config import gridworld_cpu
from leo_craftax.experiments import SETTINGS
from leo_craftax.train import make_train, train_seeds

FAST = {"xla_backend_optimization_level": 0}
SMOKE = SETTINGS["smoke"]
SMOKE_SEEDS = (0, 1)  # reproduce --scale smoke --seed 0 trains seeds 0 and 1


def smoke_cfg(algo: str, **kw):
    return gridworld_cpu(algo, env_size=SMOKE["size"], total_timesteps=SMOKE["steps"],
                         num_evals=SMOKE["evals"], **kw)


@cache
def _smoke_run(algo: str) -> dict:
    """Both smoke seeds of ``algo`` (the contract test compiles the same program for LEO / PQN)."""
    return jax.tree.map(np.asarray, train_seeds(smoke_cfg(algo), SMOKE_SEEDS))


def tiny_cfg(algo: str, **kw):
    return gridworld_cpu(algo, env_size=4, total_timesteps=16 * 8 * 2, num_envs=16, num_steps=8,
                         minibatch_size=64, ppo_minibatch_size=64, width=16, layers=1,
                         goal_embed=8, num_epochs=1, test_repeats=1, test_steps=8, **kw)


@cache
def _tiny_run(algo: str) -> dict:
    """Two updates of ``algo`` (one seed) at tiny sizes."""
    out = jax.jit(make_train(tiny_cfg(algo)), compiler_options=FAST)(jax.random.PRNGKey(0))
    return jax.tree.map(np.asarray, out)


@pytest.fixture(scope="session")
def smoke_run():
    """``smoke_run(algo)``: ``{"params", "metrics", "success"}`` of both smoke seeds."""
    return _smoke_run


@pytest.fixture(scope="session")
def tiny_run():
    """``tiny_run(algo)``: ``{"params", "metrics", "success"}`` of one tiny run."""
    return _tiny_run


@pytest.fixture(scope="session")
def configs():
    """``(smoke_cfg, tiny_cfg)``: the configurations behind the two fixtures above."""
    return smoke_cfg, tiny_cfg
