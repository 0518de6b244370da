"""PQN + HER as the authors' pqn.py does it: every transition keeps its commanded goal and gets
N appended goals — round(N·p) drawn among the goals seen so far, the rest achieved at s — and
the loss's minibatches are drawn over the (1 + N)·T·E rows. Fails if goals are replaced instead
of appended, if the positive goal is read at s' or the random one among unseen goals."""

import jax
import numpy as np
import pytest
from leo_craftax.baselines import her_goals
from leo_craftax.config import ALGO_DEFAULTS, TrainConfig, craftax_config
from leo_craftax.experiments import smoke_config
from leo_craftax.train import FAST_COMPILE, env_from_config, train_parts

T, E = 4, 16


def test_her_goals_keep_the_commanded_goal_and_append_seen_and_achieved_ones():
    t, e, k = 6, 50, 12
    rng = np.random.default_rng(0)
    goal = rng.integers(0, k, (t, e)).astype(np.int32)
    achieved_s = rng.random((t, e, k)) < 0.2
    achieved_s[0, :5] = False  # nothing achieved at s: the commanded goal stands in
    seen = np.zeros(k, bool)
    seen[[1, 4, 9]] = True

    def all_kinds(r):
        return {(nr, npos, g): her_goals(r, goal, achieved_s, seen, nr, npos, g)
                for nr, npos in ((1, 1), (2, 0), (0, 3)) for g in ("transition", "trajectory")}

    out = jax.jit(all_kinds, compiler_options=FAST_COMPILE)(jax.random.PRNGKey(0))
    for (nr, npos, gran), goals in out.items():
        goals = np.asarray(goals)
        assert goals.shape == (t, e, 1 + nr + npos)
        assert np.array_equal(goals[..., 0], goal)                    # kept, not replaced
        rand, pos = goals[..., 1:1 + nr], goals[..., 1 + nr:]
        assert np.isin(rand, [1, 4, 9]).all()                          # among the seen goals
        src = np.broadcast_to(achieved_s[-1:], achieved_s.shape) if gran == "trajectory" else achieved_s
        fallback = np.broadcast_to(goal[-1:], goal.shape) if gran == "trajectory" else goal
        for j in range(npos):
            hit = np.take_along_axis(src, pos[..., j:j + 1], -1)[..., 0]
            none = ~src.any(-1)
            assert np.all(hit | none) and np.all(pos[..., j][none] == fallback[none])
        if gran == "trajectory":  # every step: the last step's appended goals
            assert (goals[..., 1:] == goals[-1:, :, 1:]).all()
        elif nr:
            assert len(np.unique(rand)) == 3                           # drawn, not fixed


def test_mixed_split_rounds_as_numpy():
    cfg = TrainConfig(algo="pqn_her")
    assert cfg.her_split == (1, 1) and cfg.her_rows == 3
    assert cfg.replace(her_random_proportion=0.75).her_split == (2, 0)  # the grid file's 0.75
    assert cfg.replace(her_mode="positive", her_relabelled_goals=4).her_split == (0, 4)
    assert cfg.replace(her_mode="all").her_rows == 1 and TrainConfig(algo="pqn").her_rows == 1


def test_defaults_are_the_scripts():
    """pqn.py's argument defaults and the README's PQN + HER command [C]."""
    her = craftax_config("pqn_her")
    assert (her.num_envs, her.num_steps, her.minibatch_size, her.lr, her.gamma, her.num_epochs,
            her.eps_start, her.eps_finish, her.eps_decay, her.her_mode, her.her_relabelled_goals,
            her.her_random_proportion, her.her_granularity, her.env.name) == (
        1024, 2, 2048, 1e-4, 0.995, 1, 0.2, 0.01, 0.5, "mixed", 2, 0.5, "transition",
        "craftax-classic")
    pqn = craftax_config("pqn")
    assert (pqn.num_steps, pqn.minibatch_size, pqn.lr, pqn.gamma, pqn.num_epochs, pqn.eps_decay) \
        == (2, 256, 2e-4, 0.995, 1, 0.5)
    leo = craftax_config("leo")
    assert (leo.num_steps, leo.minibatch_size, leo.lr, leo.gamma, leo.num_epochs, leo.eps_decay) \
        == (32, 512, 2e-4, 0.99, 2, 0.2)
    assert set(ALGO_DEFAULTS) == {"pqn", "pqn_her"}
    # 3 minibatches of 2,048 per update: (1 + 2) x 2 x 1024 rows
    assert her.num_steps * her.num_envs * her.her_rows // her.minibatch_size == 3


@pytest.fixture(scope="module")
def her_update():
    cfg = smoke_config("pqn_her", layers=1, num_envs=E, num_steps=T, minibatch_size=T * E,
                       num_epochs=1)
    parts = train_parts(cfg)
    env = env_from_config(cfg)

    def run(rng):
        carry, _ = parts.init(rng)
        carry, batch, r_epochs = parts.collect(carry)
        _, _, loss, _ = parts.learn(carry[0], carry[1], batch, r_epochs)
        return batch, jax.vmap(env.goal_set.achieved)(batch["obs"]), carry[5], loss

    key = jax.random.PRNGKey(1)
    out = jax.jit(run).lower(key).compile(FAST_COMPILE)(key)
    return cfg, env, jax.tree.map(np.asarray, out)


def test_the_loop_appends_goals_and_draws_minibatches_over_every_row(her_update):
    cfg, env, (batch, achieved_s, seen, loss) = her_update
    n = T * E
    assert batch["g"].shape == (n, 3) and batch["y"].shape == (n, 3)
    assert np.array_equal(batch["g"][:, 0], batch["goal"])      # the commanded goal, kept
    assert seen[batch["g"][:, 1]].all()                          # random: among seen goals
    pos = batch["g"][:, 2]
    assert np.take_along_axis(achieved_s, pos[:, None], -1).all()  # positive: achieved at s
    # the relabelled targets: reward 1 where the row's goal is achieved at s'
    hit = np.take_along_axis(batch["achieved"], batch["g"], -1)
    assert np.all(batch["y"][hit] == 1.0) and np.all(batch["y"][~hit] < 1.0)
    assert loss.shape == (1, 3) and np.isfinite(loss).all()    # 3 minibatches of T·E rows
    assert "achieved_s" not in batch                             # consumed by prepare
