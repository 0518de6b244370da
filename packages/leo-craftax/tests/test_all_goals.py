"""LEO learns every goal from each transition, in the real loop: one update of ``train_parts``
(its rollout and targets, ``collect``, then its gradient step through ``LEOParts.loss``,
``learn``) must move the Q-values of goals that no transition of the batch commands toward
their relabelled targets. With the loss on the commanded goal only, or the gradient stopped on
every other goal's column (the loss value unchanged), those goals' head columns get no gradient
and do not move at all (tests/mutants.toml: ``commanded-goal-only``,
``commanded-goal-gradient-only``)."""

import jax
import numpy as np
import pytest
from leo_craftax.algos import leo_network
from leo_craftax.core import LEONetwork
from leo_craftax.experiments import smoke_config
from leo_craftax.norm import apply_eval
from leo_craftax.train import FAST_COMPILE, env_from_config, train_parts

T, E = 4, 16  # one batch of 64 transitions, one minibatch, one epoch: a single gradient step


def _head_q(variables, h, k):
    """The all-goals head on fixed features ``h [N, H]``: ``[N, K, A]`` (sigmoid values)."""
    dense = variables["params"]["head"]["dense"]
    z = h @ dense["kernel"] + dense["bias"]
    return jax.nn.sigmoid(z.reshape(h.shape[0], k, -1))


@pytest.fixture(scope="module")
def one_update():
    cfg = smoke_config("leo", layers=1, num_envs=E, num_steps=T, minibatch_size=T * E,
                       num_epochs=1)
    parts = train_parts(cfg)
    env = env_from_config(cfg)
    k = env.goal_set.num_goals
    net = leo_network(cfg, k, env.num_actions)

    def run(rng):
        carry, _ = parts.init(rng)
        carry, batch, r_epochs = parts.collect(carry)
        before = carry[0]
        after, _, loss, _ = parts.learn(before, carry[1], batch, r_epochs)
        # the head's change alone, on the features of the parameters that acted: the per-goal
        # part of the network (the torso is shared by every goal)
        h = apply_eval(net, before, batch["obs"], method=LEONetwork.features)
        return batch, _head_q(before, h, k), _head_q(after, h, k), loss

    key = jax.random.PRNGKey(3)
    out = jax.jit(run).lower(key).compile(FAST_COMPILE)(key)
    return (k, *jax.tree.map(np.asarray, out))


def test_one_update_moves_goals_no_transition_commands_toward_their_targets(one_update):
    k, batch, q0, q1, loss = one_update
    assert loss.shape == (1, 1) and np.isfinite(loss).all()  # one gradient step
    a = batch["action"]
    rows = np.arange(a.shape[0])
    y = batch["y_all"]                                 # [N, K] the all-goals TD targets
    before, after = q0[rows, :, a], q1[rows, :, a]     # Q(s, g, a_taken), [N, K]
    others = np.setdiff1d(np.arange(k), batch["goal"])  # goals no transition commands
    assert len(others) >= 4, (k, np.unique(batch["goal"]))  # 7 of the 16 here
    dq = (after - before)[:, others]
    err = (y - before)[:, others]
    # they move at all (off: exactly 0, no gradient reaches their head columns; here the step
    # is one RAdam step of lr 3e-3, measured 3e-5 at most, ~500 float32 ulps of a value near 0.5)
    assert np.abs(dq).max() > 3e-6, np.abs(dq).max()
    # ... toward their targets: the change correlates with the error, and the error shrinks
    assert (dq * err).sum() > 0, (dq * err).sum()
    assert np.mean((y - after)[:, others] ** 2) < np.mean(err ** 2)
    # goal by goal: most never-commanded goals' squared error falls
    per_goal = np.mean((y - after)[:, others] ** 2, 0) < np.mean(err ** 2, 0)
    assert per_goal.mean() > 0.8, per_goal
