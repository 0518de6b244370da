"""A short gridworld run learns (same seed, deterministic); checkpoints reload and evaluate."""

import jax
import numpy as np
import pytest
from leo_craftax.algos import build_algo
from leo_craftax.config import gridworld_cpu
from leo_craftax.io import load_checkpoint, save_checkpoint
from leo_craftax.train import env_from_config, evaluate, make_train

CFG = gridworld_cpu("leo", env_size=5, total_timesteps=64 * 16 * 24, num_evals=1, test_repeats=2)


@pytest.fixture(scope="module")
def runs():
    train = jax.jit(make_train(CFG))
    rng = jax.random.PRNGKey(3)
    return train(rng), train(rng)


def test_short_run_improves_success_deterministically(runs):
    a, b = runs
    success = np.asarray(a["success"]).mean(-1)
    assert success[-1] > success[0] + 0.2, success
    np.testing.assert_array_equal(np.asarray(a["success"]), np.asarray(b["success"]))
    np.testing.assert_array_equal(np.asarray(a["metrics"]["loss"]), np.asarray(b["metrics"]["loss"]))
    assert int(a["metrics"]["goals_seen"][-1]) == env_from_config(CFG).goal_set.num_goals


def test_checkpoint_roundtrip_evaluates_the_same(runs, tmp_path):
    out, _ = runs
    env = env_from_config(CFG)
    path = save_checkpoint(tmp_path / "leo.msgpack", CFG, out["params"], env.goal_set.names)
    cfg, params, _ = load_checkpoint(path, CFG, env.goal_set.names)
    assert cfg == CFG
    spec = build_algo(cfg, env.goal_set.num_goals, env.num_actions)
    ev = jax.jit(lambda p: evaluate(spec, p, env, jax.random.PRNGKey(0), 2, env.max_steps))
    np.testing.assert_array_equal(np.asarray(ev(params)), np.asarray(ev(out["params"])))


@pytest.mark.parametrize("algo", ["pqn", "pqn_her", "ppo_gc", "dual_leo_pqn", "dual_leo_ppo"])
def test_every_algorithm_trains(algo):
    """A few updates of each algorithm through the shared loop (tiny sizes: compile time rules)."""
    cfg = gridworld_cpu(algo, env_size=4, total_timesteps=16 * 8 * 2, num_envs=16, num_steps=8,
                        minibatch_size=64, ppo_minibatch_size=64, width=16, layers=1, goal_embed=8,
                        num_epochs=1, test_repeats=1, test_steps=8,
                        **({"her_mode": "all", "her_all_chunk": 3} if algo == "pqn_her" else {}))
    out = jax.jit(make_train(cfg))(jax.random.PRNGKey(0))
    loss = np.asarray(out["metrics"]["loss"])
    assert loss.shape == (2,) and np.all(np.isfinite(loss)) and np.all(loss > 0)
    assert out["success"].shape == (2, env_from_config(cfg).goal_set.num_goals)
    if algo.startswith("dual"):  # the teacher learns beside the actor
        assert np.all(np.asarray(out["metrics"]["leo_loss"]) > 0)
        assert np.all(np.asarray(out["metrics"]["distill"]) > 0)


def test_stacked_seed_checkpoint_picks_each_seed(tmp_path):
    out = jax.jit(jax.vmap(make_train(CFG)))(jax.random.split(jax.random.PRNGKey(0), 2))
    env = env_from_config(CFG)
    path = save_checkpoint(tmp_path / "two.msgpack", CFG, out["params"], env.goal_set.names,
                           seeds=[7, 8])
    for i, s in enumerate((7, 8)):
        _, params, meta = load_checkpoint(path, seed=s)
        assert meta["seed"] == s and meta["seeds"] == [7, 8]
        want = jax.tree.map(lambda x, i=i: np.asarray(x[i]), out["params"])
        jax.tree.map(np.testing.assert_array_equal, params, want)
    with pytest.raises(Exception, match="holds seeds"):
        load_checkpoint(path, seed=9)
