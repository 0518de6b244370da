"""The authors' live success rate (``live_success_rates_aggregate/all`` [C]): first-try success
of the goals commanded during training, counts decayed by 0.999 per update, averaged over all
goals. A toy with known first tries gives the hand-computed decayed average; three real rollouts
of ``train_parts`` hand on the decayed counts (and rate) their own first tries imply."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.core import LIVE_SUCCESS_DECAY, live_rate, live_step
from leo_craftax.experiments import smoke_config
from leo_craftax.train import FAST_COMPILE, train_parts

_live_step = jax.jit(live_step, static_argnums=4)  # one compile for the toy's steps


def _run(steps, k, completed, succ, fail):
    for goal, hit, done in steps:
        s, f, completed = _live_step(jnp.array(goal), jnp.array(hit), jnp.array(done), completed,
                                     k)
        succ, fail = succ + s, fail + f
    return completed, succ * LIVE_SUCCESS_DECAY, fail * LIVE_SUCCESS_DECAY


def test_toy_first_tries_give_the_hand_computed_decayed_average():
    k, d = 3, 0.999
    z = jnp.zeros(k)
    # update 1, two envs.
    # env 0: goal 0 achieved at t0 (first try: success of 0), then goal 2 achieved (a second
    #        goal: not counted), then the episode ends on goal 1 (not counted either).
    # env 1: goal 1 fails (the episode ends at t1: failure of 1); the new episode's goal 2 is
    #        achieved on the step the episode ends (t2): counted as success and failure of 2.
    u1 = [([0, 1], [True, False], [False, False]),
          ([2, 1], [True, False], [False, True]),
          ([1, 2], [False, True], [True, True])]
    completed, succ, fail = _run(u1, k, jnp.zeros(2, jnp.int32), z, z)
    np.testing.assert_allclose(succ, [d, 0, d])
    np.testing.assert_allclose(fail, [0, d, d])
    np.testing.assert_array_equal(completed, [0, 0])
    rate1 = np.mean([d / (d + 1e-7), 0 / (d + 1e-7), d / (2 * d + 1e-7)])  # (1 + 0 + 1/2) / 3
    assert float(live_rate(succ, fail)) == pytest.approx(rate1, rel=1e-6)
    # update 2: env 0's goal 1 fails (episode end), env 1's goal 1 succeeds: goal 1 has one
    # success (new) against one failure decayed twice
    u2 = [([1, 1], [False, True], [True, False])]
    completed, succ, fail = _run(u2, k, completed, succ, fail)
    np.testing.assert_allclose(succ, [d * d, d, d * d])
    np.testing.assert_allclose(fail, [0, d * d + d, d * d])
    np.testing.assert_array_equal(completed, [0, 1])
    want = np.mean([1.0, d / (d * d + 2 * d), 0.5])  # goal 0 never failed; goal 1 1 of 3 (decayed)
    assert float(live_rate(succ, fail)) == pytest.approx(want, rel=1e-5)
    # without the decay goal 1's rate would be 1/3 exactly: the decay is seen
    assert abs(d / (d * d + 2 * d) - 1 / 3) > 1e-4


def _numpy_live(batches, t, e, k, decay):
    """The rate after each update, recomputed from the rollouts' own goals, hits and dones."""
    completed, succ, fail, rates, counts = np.zeros(e, int), np.zeros(k), np.zeros(k), [], []
    for b in batches:
        goal = b["goal"].reshape(t, e)
        done = b["done"].reshape(t, e)
        hit = np.take_along_axis(b["achieved"].reshape(t, e, k), goal[..., None], -1)[..., 0]
        for i in range(t):
            first = completed == 0
            np.add.at(succ, goal[i][hit[i] & first], 1.0)
            np.add.at(fail, goal[i][done[i] & first], 1.0)
            completed = np.where(done[i], 0, completed + hit[i])
        succ, fail = succ * decay, fail * decay
        rates.append(np.mean(succ / (succ + fail + 1e-7)))
        counts.append(np.stack([succ, fail]))
    return np.array(rates), np.array(counts)


def test_real_rollouts_count_their_own_first_tries():
    """Three rollouts of the real loop (``collect``: the counters live in its carry, which every
    arm shares; no gradient step, to keep the test cheap — ``test_train.py`` checks that the
    update's ``live_success`` metric is the rate of the carry's counters)."""
    t, e = 8, 16
    cfg = smoke_config("leo", layers=1, width=32, num_envs=e, num_steps=t, minibatch_size=t * e,
                       num_epochs=1)
    parts = train_parts(cfg)

    def run(rng):
        def body(carry, _):
            carry, batch, _ = parts.collect(carry)
            return carry, ({key: batch[key] for key in ("goal", "done", "achieved")},
                           live_rate(*carry[-1][1:]), jnp.stack(carry[-1][1:]))

        return jax.lax.scan(body, parts.init(rng)[0], None, 3)[1]

    key = jax.random.PRNGKey(0)
    stacked, rates, counts = jax.tree.map(np.asarray,
                                          jax.jit(run).lower(key).compile(FAST_COMPILE)(key))
    batches = [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(3)]
    k = batches[0]["achieved"].shape[-1]
    want, want_counts = _numpy_live(batches, t, e, k, LIVE_SUCCESS_DECAY)
    assert 0 < want[-1] < 1  # first tries both won and lost in these rollouts
    np.testing.assert_allclose(rates, want, rtol=1e-5, atol=1e-6)
    # the decayed counts the carry hands on (undecayed ones differ by 0.1% and more)
    np.testing.assert_allclose(counts, want_counts, rtol=1e-6, atol=1e-6)
