"""Every algorithm's update on a fixed batch of gridworld transitions: its targets prepared once
(``prepare``, as the loop does), then gradient steps on them (``sgd_step``) must lower the loss
from its first value — fails if the update is broken (the gradient's sign flipped, no step, a
loss that does not reach the parameters). LEO and PQN also learn end to end (test_train.py);
the four others train through the loop in ``test_every_algorithm_trains_through_the_loop``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.algos import build_algo
from leo_craftax.experiments import smoke_config
from leo_craftax.train import FAST_COMPILE, env_from_config, make_optimizer, sgd_step

ALGOS = ("pqn_her", "ppo_gc", "dual_leo_pqn", "dual_leo_ppo")  # LEO, PQN: test_smoke_runs_learn
STEPS = 30


def _fit(algo: str, key):
    """Losses of ``STEPS`` gradient steps on one batch of 4 x 64 random-action transitions."""
    cfg = smoke_config(algo)
    env = env_from_config(cfg)
    k, a = env.goal_set.num_goals, env.num_actions
    spec = build_algo(cfg, k, a)
    tx = make_optimizer(cfg, spec.minibatch_size)
    r_env, r_init, r_roll, r_prep = jax.random.split(key, 4)
    obs, state = jax.vmap(env.reset)(jax.random.split(r_env, 64))
    params = spec.init(r_init, obs[:1])
    goal = jnp.arange(64) % k

    def step(c, r):
        obs, state = c
        r_act, r_env = jax.random.split(r)
        action, extras = spec.policy(r_act, params, obs, goal, 1.0)  # random actions (ε = 1)
        nxt, state, done = jax.vmap(env.step)(jax.random.split(r_env, 64), state, action)
        tr = {"obs": obs, "action": action, "next_obs": nxt, "done": done, "goal": goal,
              "achieved": jax.vmap(env.goal_set.achieved)(nxt), **extras}
        return (nxt, state), tr

    _, traj = jax.lax.scan(step, (obs, state), jax.random.split(r_roll, 4))
    data = {**traj, **spec.prepare(params, traj, r_prep)}
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:])[: spec.minibatch_size], data)

    def sgd(c, _):
        p, o, loss, _ = sgd_step(spec, tx, *c, flat)
        return (p, o), loss

    _, losses = jax.lax.scan(sgd, (params, tx.init(params["params"])), None, STEPS)
    return losses


@pytest.fixture(scope="module")
def losses():
    """Every algorithm's losses, from one compiled program (``FAST_COMPILE``)."""
    key = jax.random.PRNGKey(0)
    fit = jax.jit(lambda r: {algo: _fit(algo, r) for algo in ALGOS})
    return jax.tree.map(np.asarray, fit.lower(key).compile(FAST_COMPILE)(key))


@pytest.mark.parametrize("algo", ALGOS)
def test_update_lowers_the_loss_on_a_fixed_batch(algo, losses):
    loss = losses[algo]
    assert np.all(np.isfinite(loss)) and loss[0] > 0, loss
    assert loss[-1] < 0.7 * loss[0], loss
