"""Training runs shared by several tests. Compilation and the smoke runs are most of this package's
test time, so each is done once per session.

``smoke_reproduction``: one ``reproduce --scale smoke --seed 0`` run (``icml26_shared.runner.
run_one``, as the contract test runs it) with ``train.train_seeds`` observed: the LEO and PQN
runs it trains (``experiments.smoke_config``: the 5x5 gridworld, a width-128 MLP, 24 updates in
chunks of 8, seeds 0 and 1, LLVM's optimisation off) are recorded with the run states handed
on after each chunk — the values do not change (``on_chunk`` only reads them). The contract
test's first run *is* this run (``test_contract.py``; its second runs there), and
``smoke_run(algo)`` returns its LEO and PQN runs, so the learning, resume, checkpoint and
BatchRenorm tests read the contract's own training instead of repeating it. Other algorithms
(the ``slow`` loop test) are trained on first use with the same settings.
"""

from functools import cache

import jax
import numpy as np
import pytest
from leo_craftax import train
from leo_craftax.experiments import SETTINGS, smoke_config

SMOKE_SEEDS = (0, 1)  # reproduce --scale smoke --seed 0 trains seeds 0 and 1
SMOKE_CHUNK = SETTINGS["smoke"]["chunk"]  # updates per compiled segment call, as reproduce runs
_RECORDED: dict[str, dict] = {}


def _numpy(out: dict, states: list, seeds) -> dict:
    return {**jax.tree.map(np.asarray, out), "states": states, "seeds": tuple(seeds)}


@cache
def _smoke_run(algo: str) -> dict:
    if algo in _RECORDED:
        return _RECORDED[algo]
    states = []
    out = train.train_seeds(smoke_config(algo), SMOKE_SEEDS, fast_compile=True, chunk=SMOKE_CHUNK,
                            on_chunk=states.append)
    return _numpy(out, states, SMOKE_SEEDS)


@pytest.fixture(scope="session")
def smoke_reproduction(tmp_path_factory):
    """``(Results, path of its results.json)`` of one ``reproduce --scale smoke --seed 0``,
    whose LEO and PQN training runs are recorded for ``smoke_run``."""
    from icml26_shared import registry
    from icml26_shared.runner import run_one

    real = train.train_seeds

    def observed(cfg, seeds, env=None, **kw):
        states, user = [], kw.pop("on_chunk", None)

        def on_chunk(state):
            states.append(state)
            if user is not None:
                user(state)

        out = real(cfg, seeds, env, on_chunk=on_chunk, **kw)
        if (cfg == smoke_config(cfg.algo) and tuple(seeds) == SMOKE_SEEDS and env is None
                and kw.get("fast_compile") and kw.get("chunk") == SMOKE_CHUNK):
            _RECORDED[cfg.algo] = _numpy(out, states, seeds)
        return out

    out_dir = tmp_path_factory.mktemp("smoke-a")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "train_seeds", observed)
        res = run_one(registry.get("leo-craftax"), "smoke", out_dir, seed=0, catch=False)
    assert set(_RECORDED) == {"leo", "pqn"}, sorted(_RECORDED)  # the smoke scale's two arms
    return res, out_dir / "leo-craftax" / "results.json"


@pytest.fixture(scope="session")
def smoke_run(smoke_reproduction):
    """``smoke_run(algo)``: ``{"params", "metrics", "success", "timings"}`` of both smoke seeds
    (``"seeds"``) as numpy, and ``"states"``: the run states ``train_seeds`` handed to
    ``on_chunk`` (after 8 and 16 of the 24 updates). LEO and PQN: the smoke reproduction's runs."""
    return _smoke_run
