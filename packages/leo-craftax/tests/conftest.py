"""Training runs shared by several tests. Compilation is most of this package's test time (one
set of XLA programs per algorithm and size), so each program is compiled once per session:
``smoke_run(algo)`` trains ``algo`` at the registered ``reproduce --scale smoke`` sizes
(``experiments.smoke_config``: the 5x5 gridworld, a width-32 MLP, 64 updates, two seeds) through
``train_seeds`` with LLVM's optimisation off, as ``reproduce`` does — so the contract test's two
smoke runs, the learning tests of all six algorithms, the checkpoint and BatchRenorm tests share
one compiled program set per algorithm.
"""

from functools import cache

import jax
import numpy as np
import pytest
from leo_craftax.experiments import smoke_config
from leo_craftax.train import train_seeds

SMOKE_SEEDS = (0, 1)  # reproduce --scale smoke --seed 0 trains seeds 0 and 1


@cache
def _smoke_run(algo: str) -> dict:
    out = train_seeds(smoke_config(algo), SMOKE_SEEDS, fast_compile=True)
    return jax.tree.map(np.asarray, out)


@pytest.fixture(scope="session")
def smoke_run():
    """``smoke_run(algo)``: ``{"params", "metrics", "success", "timings"}`` of both smoke seeds."""
    return _smoke_run
