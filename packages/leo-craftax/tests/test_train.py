"""A short gridworld run learns (same seeds, deterministic); checkpoints reload and evaluate; every
algorithm trains a few updates. Most runs are the session's shared ones (``conftest.py``)."""

import jax
import numpy as np
import pytest
from leo_craftax.algos import build_algo
from leo_craftax.io import load_checkpoint, save_checkpoint
from leo_craftax.train import env_from_config, evaluate


def test_short_run_improves_success_deterministically():
    """LEO, 24 updates on the 5x5 map (0.3.0's test, unchanged: its own program, seed 3); fails if
    its update is broken (a flipped TD target, no per-goal termination: success stays low)."""
    from leo_craftax.config import gridworld_cpu
    from leo_craftax.train import make_train

    cfg = gridworld_cpu("leo", env_size=5, total_timesteps=64 * 16 * 24, num_evals=1,
                        test_repeats=2)
    train = jax.jit(make_train(cfg))
    a, b = (jax.tree.map(np.asarray, train(jax.random.PRNGKey(3))) for _ in range(2))
    success = a["success"].mean(-1)
    assert success[-1] > success[0] + 0.2, success
    np.testing.assert_array_equal(a["success"], b["success"])
    np.testing.assert_array_equal(a["metrics"]["loss"], b["metrics"]["loss"])
    assert int(a["metrics"]["goals_seen"][-1]) == env_from_config(cfg).goal_set.num_goals


def test_checkpoint_roundtrip_evaluates_the_same(smoke_run, configs, tmp_path):
    cfg = configs[0]("leo")
    params = jax.tree.map(lambda x: x[0], smoke_run("leo")["params"])
    env = env_from_config(cfg)
    path = save_checkpoint(tmp_path / "leo.msgpack", cfg, params, env.goal_set.names)
    back_cfg, back, _ = load_checkpoint(path, cfg, env.goal_set.names)
    assert back_cfg == cfg
    spec = build_algo(cfg, env.goal_set.num_goals, env.num_actions)
    ev = jax.jit(lambda p: evaluate(spec, p, env, jax.random.PRNGKey(0), 2, env.max_steps))
    np.testing.assert_array_equal(np.asarray(ev(back)), np.asarray(ev(params)))


def test_stacked_seed_checkpoint_picks_each_seed(smoke_run, configs, tmp_path):
    cfg = configs[0]("leo")
    out = smoke_run("leo")
    env = env_from_config(cfg)
    path = save_checkpoint(tmp_path / "two.msgpack", cfg, out["params"], env.goal_set.names,
                           seeds=[7, 8])
    for i, s in enumerate((7, 8)):
        _, params, meta = load_checkpoint(path, seed=s)
        assert meta["seed"] == s and meta["seeds"] == [7, 8]
        jax.tree.map(lambda x, y, i=i: np.testing.assert_array_equal(x, y[i]), params, out["params"])
    assert not np.array_equal(out["params"]["params"]["head"]["dense"]["kernel"][0],
                              out["params"]["params"]["head"]["dense"]["kernel"][1])
    with pytest.raises(Exception, match="holds seeds"):
        load_checkpoint(path, seed=9)


@pytest.mark.parametrize("algo", ["leo", "pqn", "pqn_her", "ppo_gc", "dual_leo_pqn",
                                  "dual_leo_ppo"])
def test_every_algorithm_trains(algo, smoke_run, tiny_run, configs):
    """A few updates of each algorithm through the shared loop: LEO and PQN at the smoke sizes
    (the contract's programs), the others at tiny sizes (compile time rules)."""
    smoke = algo in ("leo", "pqn")
    cfg = configs[0](algo) if smoke else configs[1](algo)
    out = smoke_run(algo) if smoke else jax.tree.map(lambda x: x[None], tiny_run(algo))
    loss = out["metrics"]["loss"]
    assert loss.shape == (out["success"].shape[0], cfg.num_updates)
    assert np.all(np.isfinite(loss)) and np.all(loss > 0)
    assert out["success"].shape[1:] == (2, env_from_config(cfg).goal_set.num_goals)
    if algo.startswith("dual"):  # the teacher learns beside the actor
        assert np.all(out["metrics"]["leo_loss"] > 0)
        assert np.all(out["metrics"]["distill"] > 0)
