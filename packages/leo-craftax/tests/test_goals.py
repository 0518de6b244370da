"""Goal predicates on hand-built observations and states; gridworld invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.craftax_goals import craftax_classic_goal_set, craftax_goal_set
from leo_craftax.envs import GoalSet, Gridworld
from leo_craftax.train import FAST_COMPILE

from icml26_shared import UserError


def test_gridworld_predicate_walls_and_episode_length():
    env = Gridworld(size=6, wall_prob=0.3, map_seed=2, max_steps=200)
    assert env.goal_set.num_goals == int(env.free.sum())
    achieved = jax.jit(lambda pos: env.goal_set.achieved(env._obs(pos)),
                       compiler_options=FAST_COMPILE)
    for g, (r, c) in enumerate(np.asarray(env.cells)):
        ach = np.asarray(achieved(jnp.array([r, c])))
        assert ach[g] and ach.sum() == 1
    _, state = jax.jit(env.reset, static_argnums=1, compiler_options=FAST_COMPILE)(
        jax.random.PRNGKey(0), False)
    step = jax.jit(env.step, compiler_options=FAST_COMPILE)
    done_at = None
    for t in range(200):
        _, state, done = step(jax.random.PRNGKey(t), state, t * 7 % 4)
        assert env.free[tuple(np.asarray(state["pos"]))], "entered a wall"
        if bool(done):
            done_at = t + 1
            break
    assert done_at == 200


def _classic_obs(inventory=None, block=None, mob=None):
    from craftax.craftax_classic.constants import BlockType

    m = np.zeros((7, 9, len(BlockType) + 4), np.float32)
    m[..., BlockType.GRASS.value] = 1
    if block is not None:
        (r, c), b = block
        m[r, c] = 0
        m[r, c, b] = 1
    if mob is not None:
        (r, c), k = mob
        m[r, c, len(BlockType) + k] = 1
    inv = np.zeros(12, np.float32)
    for i, n in (inventory or {}).items():
        inv[i] = n / 10.0
    return jnp.asarray(np.concatenate([m.ravel(), inv, np.zeros(10, np.float32)]))


def test_craftax_classic_goals_on_hand_built_observations():
    gs = craftax_classic_goal_set()
    assert gs.num_goals == 136 and len(set(gs.names)) == 136
    achieved = jax.jit(gs.achieved, compiler_options=FAST_COMPILE)

    def on(obs):
        return {gs.names[i] for i in np.nonzero(np.asarray(achieved(obs)))[0]}

    # grass all around the player (centre 3, 4)
    grass = {f"block_map/GRASS_{d}" for d in ("left", "right", "up", "down")}
    assert on(_classic_obs()) == grass
    assert on(_classic_obs(inventory={0: 3, 6: 1})) == grass | {"inventory/wood_3", "tools/wood_pickaxe"}
    tree_left = on(_classic_obs(block=((3, 3), 5)))
    assert "block_map/TREE_left" in tree_left and "block_map/GRASS_left" not in tree_left
    assert "mob_map/cow_down" in on(_classic_obs(mob=((4, 4), 1)))
    assert "mob_map/cow_down" not in on(_classic_obs(mob=((5, 4), 1)))  # two cells away


def test_craftax_goal_set_counts_and_levels():
    from craftax.craftax.constants import OBS_DIM

    gs = craftax_goal_set()
    assert gs.num_goals == 512 and len(set(gs.names)) == 512
    n_map = OBS_DIM[0] * OBS_DIM[1] * 83
    obs = np.zeros(8268, np.float32)
    obs[n_map + 0] = np.sqrt(23) / 10.0   # 23 wood
    obs[n_map + 11] = 2 / 4.0             # stone pickaxe
    obs[n_map + 43 + 5] = 0.1             # dungeon level 1
    obs[n_map + 16 + 6 + 7] = 0.3         # strength 3
    on = {gs.names[i] for i in np.nonzero(np.asarray(jax.jit(gs.achieved, compiler_options=FAST_COMPILE)(obs)))[0]}
    assert on == {"inventory/wood_20-24", "tools/stone_pickaxe", "dungeon_level/dlvl_1",
                  "intrinsics/strength_3"}


def test_goal_set_from_predicates():
    gs = GoalSet.from_predicates({"pos": lambda o: o[0] > 0, "big": lambda o: o.sum() > 2})
    np.testing.assert_array_equal(gs.achieved(jnp.array([1.0, 2.0])), [True, True])
    np.testing.assert_array_equal(gs.achieved(jnp.array([-1.0, 0.5])), [False, False])
    with pytest.raises(UserError, match="at least one predicate"):
        GoalSet.from_predicates({})


def test_craftax_classic_goals_match_a_real_reset_state():
    from craftax.craftax_classic.constants import BlockType
    from leo_craftax.craftax_goals import _DELTAS, CLASSIC_BLOCKS, DIRECTIONS
    from leo_craftax.envs import CraftaxGC

    env = CraftaxGC(classic=True)

    def reset(r):
        obs, state = env.reset(r)
        return obs, state, env.goal_set.achieved(obs)

    key = jax.random.PRNGKey(0)  # one program, compiled fast (same values)
    obs, state, ach = jax.jit(reset).lower(key).compile(FAST_COMPILE)(key)
    on = {env.goal_set.names[i] for i in np.nonzero(np.asarray(ach))[0]}
    pos = np.asarray(state.player_position)
    want = set()
    for d, name in zip(_DELTAS, DIRECTIONS, strict=True):
        b = int(state.map[pos[0] + d[0], pos[1] + d[1]])
        if b in CLASSIC_BLOCKS:
            want.add(f"block_map/{BlockType(b).name}_{name}")
    assert {n for n in on if n.startswith("block_map/")} == want and want
    assert not any(n.startswith(("inventory/", "tools/")) for n in on)  # empty inventory at reset


class _Chain:
    """A minimal gymnax-API environment: position 0..4 on a line, actions left / right."""

    default_params = None

    def action_space(self, params):
        return type("D", (), {"n": 2})()

    def observation_space(self, params):
        return type("B", (), {"shape": (5,)})()

    def reset_env(self, rng, params):
        return jax.nn.one_hot(0, 5), {"x": jnp.int32(0), "t": jnp.int32(0)}

    def step_env(self, rng, state, action, params):
        x = jnp.clip(state["x"] + 2 * action - 1, 0, 4)
        s = {"x": x, "t": state["t"] + 1}
        return jax.nn.one_hot(x, 5), s, jnp.float32(0), s["t"] >= 10, {}


def test_any_gymnax_env_gets_a_goal_set_from_predicates():
    from leo_craftax.envs import GymnaxGC

    gs = GoalSet.from_predicates({f"x={i}": (lambda o, i=i: o[i] > 0.5) for i in range(5)})
    env = GymnaxGC(_Chain(), gs, max_steps=10)
    assert (env.num_actions, env.obs_dim, env.max_steps) == (2, 5, 10)
    obs, state = env.reset(jax.random.PRNGKey(0))
    for _ in range(3):
        obs, state, done = env.step(jax.random.PRNGKey(0), state, 1)
    np.testing.assert_array_equal(gs.achieved(obs), [False, False, False, True, False])
    assert not bool(done)
