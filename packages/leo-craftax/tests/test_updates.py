"""Every algorithm's update on a fixed batch of transitions: its targets prepared once
(``prepare``, as the loop does), then 60 gradient steps on them (``sgd_step``) must lower the
loss below 0.7 of its first value (one torso layer: two thirds of the two-layer compile; measured
0.35-0.43 of it, and 2.5-7x above it with the optimiser's step negated) — fails if the update is
broken (the gradient's sign flipped, no step, a loss that does not reach the parameters). LEO and PQN also learn end to end (test_train.py);
the four others train through the loop in ``test_every_algorithm_trains_through_the_loop``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.algos import build_algo
from leo_craftax.experiments import smoke_config
from leo_craftax.train import FAST_COMPILE, env_from_config, make_optimizer, sgd_step

ALGOS = ("pqn_her", "ppo_gc", "dual_leo_pqn", "dual_leo_ppo")  # LEO, PQN: test_smoke_runs_learn
STEPS = 60
T, E = 4, 64  # the batch: T steps of E environments


def _fit(algo: str, key, k: int, a: int, d: int):
    """Losses of ``STEPS`` gradient steps on one batch of T x E transitions at the smoke sizes:
    random observations (the smoke gridworld's width), actions from the policy at ε = 1 (with
    PPO's log-probabilities and values), random episode ends and achieved goals. A synthetic
    batch rather than a rollout: the environment's step is the loop's (test_train.py), and
    leaving it out of this program saves about a third of its compile time."""
    cfg = smoke_config(algo, layers=1)  # one torso layer: the same update, 2/3 of the compile
    spec = build_algo(cfg, k, a)
    tx = make_optimizer(cfg, spec.minibatch_size)
    r = jax.random.split(key, 7)
    obs = jax.random.normal(r[0], (T + 1, E, d))
    goal = jnp.broadcast_to(jnp.arange(E) % k, (T, E))
    params = spec.init(r[1], obs[0, :1])
    action, extras = spec.policy(r[2], params, obs[:T].reshape(T * E, d), goal.reshape(-1), 1.0)
    traj = {"obs": obs[:T], "next_obs": obs[1:], "action": action.reshape(T, E), "goal": goal,
            "done": jax.random.bernoulli(r[3], 0.1, (T, E)),
            "achieved": jax.random.bernoulli(r[4], 2.0 / k, (T, E, k)),
            "achieved_s": jax.random.bernoulli(r[6], 2.0 / k, (T, E, k)),
            **jax.tree.map(lambda x: x.reshape(T, E, *x.shape[1:]), extras)}
    data = {**traj, **spec.prepare(params, traj, r[5])}
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)
    if spec.rows > 1:  # PQN + HER: a row per (transition, goal column), as the loop lays them
        i = jnp.arange(T * E * spec.rows)
        flat = {key: x[i // spec.rows, i % spec.rows] if key in spec.row_keys else x[i // spec.rows]
                for key, x in flat.items()}
    flat = jax.tree.map(lambda x: x[: spec.minibatch_size], flat)

    def sgd(c, _):
        p, o, loss, _ = sgd_step(spec, tx, *c, flat)
        return (p, o), loss

    _, losses = jax.lax.scan(sgd, (params, tx.init(params["params"])), None, STEPS)
    return losses


@pytest.fixture(scope="module")
def losses():
    """Every algorithm's losses, from one compiled program (``FAST_COMPILE``)."""
    env = env_from_config(smoke_config("leo"))
    sizes = env.goal_set.num_goals, env.num_actions, env.obs_dim
    key = jax.random.PRNGKey(0)
    fit = jax.jit(lambda r: {algo: _fit(algo, r, *sizes) for algo in ALGOS})
    return jax.tree.map(np.asarray, fit.lower(key).compile(FAST_COMPILE)(key))


@pytest.mark.parametrize("algo", ALGOS)
def test_update_lowers_the_loss_on_a_fixed_batch(algo, losses):
    loss = losses[algo]
    assert np.all(np.isfinite(loss)) and loss[0] > 0, loss
    assert loss[-1] < 0.7 * loss[0], loss
