"""Training runs shared by several tests. Compilation is most of this package's test time (one
set of XLA programs per algorithm and size), so each program is compiled once per session:
``smoke_run(algo)`` trains ``algo`` at the registered ``reproduce --scale smoke`` sizes
(``experiments.smoke_config``: the 5x5 gridworld, a width-128 MLP, 24 updates in chunks of 8,
two seeds) through ``train_seeds`` with LLVM's optimisation off, as ``reproduce`` does — so the
contract test's two smoke runs, the learning tests, the resume, checkpoint and BatchRenorm tests
share one compiled program set per algorithm.
"""

from functools import cache

import jax
import numpy as np
import pytest
from leo_craftax.experiments import SETTINGS, smoke_config
from leo_craftax.train import train_seeds

SMOKE_SEEDS = (0, 1)  # reproduce --scale smoke --seed 0 trains seeds 0 and 1


SMOKE_CHUNK = SETTINGS["smoke"]["chunk"]  # updates per compiled segment call, as reproduce runs


@cache
def _smoke_run(algo: str) -> dict:
    states = []
    out = train_seeds(smoke_config(algo), SMOKE_SEEDS, fast_compile=True, chunk=SMOKE_CHUNK,
                      on_chunk=states.append)
    return {**jax.tree.map(np.asarray, out), "states": states, "seeds": SMOKE_SEEDS}


@pytest.fixture(scope="session")
def smoke_run():
    """``smoke_run(algo)``: ``{"params", "metrics", "success", "timings"}`` of both smoke seeds
    (``"seeds"``), and ``"states"``: the run states ``train_seeds`` handed to ``on_chunk`` (after 8 and 16 of
    the 24 updates)."""
    return _smoke_run
