"""LEO's maths: the all-goals TD target and loss equal per-goal relabelling, goal by goal."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.core import (
    LEONetwork,
    all_goals_td_targets,
    epsilon,
    goal_td_target,
    leo_loss,
    q_for_goal,
    q_grouped,
    sample_goals,
    td_loss,
)
from leo_craftax.envs import Gridworld
from leo_craftax.norm import apply_eval, init_vars
from leo_craftax.train import FAST_COMPILE as FAST  # same values, a fraction of the compile time

GAMMA = 0.9


@pytest.fixture(scope="module")
def batch():
    env = Gridworld(size=5, wall_prob=0.2, map_seed=1, max_steps=200)
    k = env.goal_set.num_goals
    net = LEONetwork(k, 4, width=32, layers=2)

    def make(key):  # one compiled program instead of one per operation
        r = jax.random.split(key, 5)
        obs, st = jax.vmap(env.reset)(jax.random.split(r[0], 48))
        action = jax.random.randint(r[1], (48,), 0, 4)
        nxt, _, _ = jax.vmap(env.step)(jax.random.split(r[2], 48), st, action)
        done = jax.random.uniform(r[3], (48,)) < 0.25
        params = init_vars(net, r[4], obs)  # {"params", "batch_stats"} (BatchRenorm on the input)
        return params, obs, action, nxt, done, apply_eval(net, params, obs * 100.0)

    key = jax.random.PRNGKey(0)
    params, obs, action, nxt, done, q_far = jax.jit(make, compiler_options=FAST)(key)
    return env, net, params, obs, action, nxt, done, q_far


def test_all_goals_target_equals_per_goal_relabelled_target(batch):
    env, net, params, obs, action, nxt, done, _ = batch
    k = env.goal_set.num_goals

    def both():
        achieved = jax.vmap(env.goal_set.achieved)(nxt)
        y_all = all_goals_td_targets(achieved, done, apply_eval(net, params, nxt), GAMMA)

        def relabelled(g):
            # goal g alone: its own predicate (the agent stands on cell g) and its head slice
            hit = jnp.all(jax.vmap(env.position)(nxt) == env.cells[g], -1)
            return goal_td_target(hit, done, q_for_goal(net, params, nxt, jnp.full(nxt.shape[0], g)),
                                  GAMMA)

        return y_all, jax.vmap(relabelled, out_axes=1)(jnp.arange(k))

    y_all, y_goal = jax.jit(both, compiler_options=FAST)()
    assert y_all.shape == (48, k) and 0 < float((y_all > 0).mean()) < 1
    np.testing.assert_allclose(y_all, y_goal, rtol=1e-6, atol=1e-6)


def test_grouped_head_slices_equal_the_full_head(batch):
    """Evaluation's LEO path (``q_grouped``: row group k reads goal k's slice only) gives the
    full all-goals head's values for the commanded goals."""
    env, net, params, obs, *_ = batch
    k = env.goal_set.num_goals
    reps = obs.shape[0] // k
    rows = obs[: k * reps] * jnp.linspace(0.5, 2.0, k * reps)[:, None]  # distinct rows

    def both():
        full = apply_eval(net, params, rows)[jnp.arange(k * reps), jnp.repeat(jnp.arange(k), reps)]
        return full, q_grouped(net, params, rows.reshape(k, reps, -1)).reshape(k * reps, -1)

    full, grouped = jax.jit(both, compiler_options=FAST)()
    np.testing.assert_allclose(grouped, full, rtol=1e-5, atol=1e-6)
    assert float(jnp.std(full)) > 0


def test_all_goals_loss_equals_mean_of_per_goal_losses(batch):
    env, net, params, obs, action, nxt, done, _ = batch
    k = env.goal_set.num_goals

    def leo(p, y_all):
        return leo_loss(apply_eval(net, {**params, "params": p}, obs), action, y_all)

    def goal_by_goal(p, y_all):  # K separate relabelled losses, one goal-conditioned pass each
        def one(g):
            return td_loss(q_for_goal(net, {**params, "params": p}, obs, jnp.full(obs.shape[0], g)),
                           action, y_all[:, g])
        return jax.lax.map(one, jnp.arange(k)).mean()

    def both(p):
        achieved = jax.vmap(env.goal_set.achieved)(nxt)
        y_all = all_goals_td_targets(achieved, done, apply_eval(net, params, nxt), GAMMA)
        return jax.value_and_grad(leo)(p, y_all), jax.value_and_grad(goal_by_goal)(p, y_all)

    (l1, g1), (l2, g2) = jax.jit(both, compiler_options=FAST)(params["params"])
    assert float(l1) == pytest.approx(float(l2), rel=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_per_goal_termination_masks_only_achieved_goals():
    q_next = np.full((2, 3, 4), 0.5, np.float32)
    q_next[:, :, 2] = 0.8
    achieved = np.array([[False, True, False], [False, False, False]])
    done = np.array([False, True])
    y = jax.jit(all_goals_td_targets, static_argnums=3, compiler_options=FAST)(achieved, done,
                                                                                q_next, 0.99)
    np.testing.assert_allclose(y[0], [0.99 * 0.8, 1.0, 0.99 * 0.8], rtol=1e-6)  # only goal 1 ends
    np.testing.assert_allclose(y[1], [0.0, 0.0, 0.0])  # episode end: every goal's target = r_g


def test_q_values_lie_in_unit_interval(batch):
    q = batch[-1]  # the network on observations scaled by 100 (saturating pre-activations)
    assert q.shape[-1] == 4 and float(q.min()) >= 0.0 and float(q.max()) <= 1.0


def test_epsilon_schedule():
    assert float(epsilon(0, 100)) == pytest.approx(0.2)
    assert float(epsilon(10, 100)) == pytest.approx(0.105)
    for u in (20, 50, 99):
        assert float(epsilon(u, 100)) == pytest.approx(0.01)


def test_goals_are_sampled_only_among_seen_goals():
    seen = np.zeros(50, bool)
    seen[[3, 17, 41]] = True
    both = jax.jit(lambda r, s: (sample_goals(r, s, 2000), sample_goals(r, s, 2000, only_seen=False)),
                   compiler_options=FAST)
    goals, any_goals = both(jax.random.PRNGKey(0), seen)
    assert set(np.unique(goals).tolist()) == {3, 17, 41}
    assert len(np.unique(any_goals)) > 40
