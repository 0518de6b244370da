"""Goal sets and goal-conditioned environments (pure JAX, functional).

Every environment here follows one small protocol (``GCEnv``)::

    reset(rng) -> (obs, state)
    step(rng, state, action) -> (next_obs, next_state, done)     # no automatic reset
    obs_dim, num_actions, max_steps, goal_set

``step`` returns the *true* next observation, so that the goals achieved at an episode's last
step are seen by the learner; ``auto_reset_step`` adds the reset. A ``GoalSet`` maps an
observation to ``bool[K]`` (which of the K goals it achieves) — the per-goal reward and the
per-goal termination of LEO [C: purejaxgcrl ``goal_achieved``].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26_shared import UserError

ENV_NAMES = ("gridworld", "craftax-classic", "craftax")


@dataclass(frozen=True)
class GoalSet:
    """A finite set of K named goals and a vectorised predicate ``achieved(obs) -> bool[K]``.

    ``achieved`` takes one observation; use ``jax.vmap`` for batches.
    """

    names: tuple[str, ...]
    achieved: Callable[[jax.Array], jax.Array]

    @property
    def num_goals(self) -> int:
        return len(self.names)

    @classmethod
    def from_predicates(cls, predicates: dict[str, Callable[[jax.Array], jax.Array]]) -> GoalSet:
        """A goal set for any environment from named predicates ``obs -> bool`` (one per goal)."""
        if not predicates:
            raise UserError("a goal set needs at least one predicate")
        fns = tuple(predicates.values())

        def achieved(obs):
            return jnp.stack([jnp.asarray(f(obs), bool) for f in fns])

        return cls(tuple(predicates), achieved)

    @classmethod
    def from_masks(cls, names: Sequence[str], masks: np.ndarray,
                   featurize: Callable[[jax.Array], jax.Array]) -> GoalSet:
        """Goals as binary masks over binary features (``[K, D]``): goal k is achieved when any
        feature it names is on — purejaxgcrl's ``goal_achieved`` (a union over one-hot slots)."""
        masks = jnp.asarray(masks, jnp.float32)
        if masks.shape[0] != len(names):
            raise ValueError(f"{masks.shape[0]} masks for {len(names)} names")

        def achieved(obs):
            return (masks @ featurize(obs).astype(jnp.float32)) > 0

        return cls(tuple(names), achieved)


# --- gridworld -----------------------------------------------------------------------------------

_MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int32)  # up, down, left, right


def make_gridworld_map(size: int, wall_prob: float, seed: int) -> np.ndarray:
    """``bool[size, size]`` free cells: walls drawn with ``wall_prob`` [C: gridworld wall threshold],
    then only the largest 4-connected free region is kept so that every goal is reachable [R]."""
    rng = np.random.default_rng(seed)
    free = rng.random((size, size)) >= wall_prob
    label = -np.ones((size, size), int)
    best, best_n, n_lab = -1, 0, 0
    for r0, c0 in zip(*np.nonzero(free), strict=True):
        if label[r0, c0] >= 0:
            continue
        stack, count = [(r0, c0)], 0
        label[r0, c0] = n_lab
        while stack:
            r, c = stack.pop()
            count += 1
            for dr, dc in _MOVES:
                rr, cc = r + dr, c + dc
                if 0 <= rr < size and 0 <= cc < size and free[rr, cc] and label[rr, cc] < 0:
                    label[rr, cc] = n_lab
                    stack.append((rr, cc))
        if count > best_n:
            best, best_n = n_lab, count
        n_lab += 1
    return label == best


class Gridworld:
    """N×N gridworld with random walls; 4 actions; goals = every free cell [C: envs/gridworld].

    Observation: one-hot row ‖ one-hot column of the agent (2N floats) [R: the authors feed the
    (x, y) position]. Episodes last ``max_steps`` (200 [C]); training episodes start at a random
    timestep [C] (``random_start_time``) so that resets are spread out.
    """

    def __init__(self, size: int = 10, wall_prob: float = 0.3, map_seed: int = 0,
                 max_steps: int = 200, random_start_time: bool = True):
        if size < 2:
            raise UserError(f"gridworld size must be >= 2 (got {size})")
        if not 0.0 <= wall_prob < 1.0:
            raise UserError(f"wall probability must be in [0, 1) (got {wall_prob})")
        self.size, self.max_steps = size, max_steps
        self.random_start_time = random_start_time
        self.free = make_gridworld_map(size, wall_prob, map_seed)
        cells = np.argwhere(self.free).astype(np.int32)  # row-major order
        self.cells = jnp.asarray(cells)
        self._free = jnp.asarray(self.free)
        self.obs_dim, self.num_actions = 2 * size, 4
        names = tuple(f"cell/{r}_{c}" for r, c in cells)
        self.goal_set = GoalSet(names, self._achieved)

    def position(self, obs: jax.Array) -> jax.Array:
        return jnp.stack([jnp.argmax(obs[: self.size]), jnp.argmax(obs[self.size:])])

    def _achieved(self, obs):
        return jnp.all(self.cells == self.position(obs)[None, :], axis=-1)

    def _obs(self, pos):
        n = self.size
        return jnp.concatenate([jax.nn.one_hot(pos[0], n), jax.nn.one_hot(pos[1], n)])

    def reset(self, rng, start_time: bool | None = None):
        r1, r2 = jax.random.split(rng)
        pos = self.cells[jax.random.randint(r1, (), 0, self.cells.shape[0])]
        rand_t = self.random_start_time if start_time is None else start_time
        t = jax.random.randint(r2, (), 0, self.max_steps) if rand_t else jnp.int32(0)
        return self._obs(pos), {"pos": pos, "t": t}

    def step(self, rng, state, action):
        new = jnp.clip(state["pos"] + jnp.asarray(_MOVES)[action], 0, self.size - 1)
        new = jnp.where(self._free[new[0], new[1]], new, state["pos"])
        t = state["t"] + 1
        return self._obs(new), {"pos": new, "t": t}, t >= self.max_steps


class GymnaxGC:
    """Any environment with the gymnax API (``reset_env(rng, params)``, ``step_env(rng, state,
    action, params)``, ``action_space``, ``observation_space``, ``default_params``) plus a
    ``GoalSet`` — e.g. ``GoalSet.from_predicates`` — becomes a goal-conditioned environment."""

    def __init__(self, env: Any, goal_set: GoalSet, params: Any = None, max_steps: int | None = None):
        self.env, self.goal_set = env, goal_set
        self.params = params if params is not None else env.default_params
        if max_steps is None:
            max_steps = int(getattr(self.params, "max_steps_in_episode",
                                    getattr(self.params, "max_timesteps", 1000)))
        self.max_steps = int(max_steps)
        self.num_actions = int(env.action_space(self.params).n)
        self.obs_dim = int(np.prod(env.observation_space(self.params).shape))

    def reset(self, rng, start_time: bool | None = None):
        obs, state = self.env.reset_env(rng, self.params)
        return jnp.ravel(obs).astype(jnp.float32), state

    def step(self, rng, state, action):
        """``(obs, state, done)``: the episode ends when it terminates or is truncated.
        gymnax ≥ 1.0's ``step_env`` returns ``(obs, state, reward, terminated, info)`` and leaves
        the time limit to ``is_truncated(state, params)``; gymnax < 1.0 and Craftax put the time
        limit inside ``done``; an environment returning ``(obs, state, reward, terminated,
        truncated, info)`` ends its episode on either flag."""
        out = self.env.step_env(rng, state, action, self.params)
        obs, state, done = out[0], out[1], jnp.asarray(out[3], bool)
        if len(out) >= 6:
            done = done | jnp.asarray(out[4], bool)
        elif hasattr(self.env, "is_truncated"):
            done = done | jnp.asarray(self.env.is_truncated(state, self.params), bool)
        return jnp.ravel(obs).astype(jnp.float32), state, done


class CraftaxGC(GymnaxGC):
    """A Craftax environment (PyPI ``craftax``) with its goal set: Craftax-Classic (136 goals) or
    Craftax (512 goals) [C: envs/craftax/craftax_goals.py]. ``obs="symbolic"`` (the paper's) or
    ``"pixels"`` (``Craftax-Classic-Pixels-v1`` / ``Craftax-Pixels-v1``): then the observation
    is the flat RGB image followed by the symbolic observation of the same state, which only the
    goal set reads (the conv encoder sees the image part alone) [R]."""

    def __init__(self, classic: bool = True, max_steps: int | None = None, obs: str = "symbolic"):
        from craftax.craftax_env import make_craftax_env_from_name

        from .craftax_goals import craftax_classic_goal_set, craftax_goal_set

        self.pixels = obs == "pixels"
        kind = "Pixels" if self.pixels else "Symbolic"
        self.name = f"Craftax-Classic-{kind}-v1" if classic else f"Craftax-{kind}-v1"
        env = make_craftax_env_from_name(self.name, auto_reset=False)
        params = env.default_params
        if max_steps is not None:
            params = params.replace(max_timesteps=int(max_steps))
        gs = craftax_classic_goal_set() if classic else craftax_goal_set()
        if self.pixels:
            if classic:
                from craftax.craftax_classic.renderer import render_craftax_symbolic
            else:
                from craftax.craftax.renderer import render_craftax_symbolic
            self._symbolic = render_craftax_symbolic
            n_pix = int(np.prod(env.observation_space(params).shape))
            gs = GoalSet(gs.names, lambda o, a=gs.achieved, n=n_pix: a(o[n:]))
        super().__init__(env, gs, params, int(params.max_timesteps))
        if self.pixels:
            self.image_shape = tuple(env.observation_space(params).shape)
            sym = jax.eval_shape(lambda: self._symbolic(self.env.reset_env(
                jax.random.PRNGKey(0), self.params)[1]))
            self.obs_dim += int(np.prod(sym.shape))

    def _with_symbolic(self, obs, state):
        if not self.pixels:
            return obs
        return jnp.concatenate([obs, jnp.ravel(self._symbolic(state)).astype(jnp.float32)])

    def reset(self, rng, start_time: bool | None = None):
        obs, state = super().reset(rng, start_time)
        return self._with_symbolic(obs, state), state

    def step(self, rng, state, action):
        obs, state, done = super().step(rng, state, action)
        return self._with_symbolic(obs, state), state, done


def auto_reset_step(env: Any, rng, state, action):
    """One step with reset: ``(next_obs, obs_to_act_on, state, done)``; ``next_obs`` is the true
    next observation (before any reset), the one goals and rewards are read from."""
    r_step, r_reset = jax.random.split(rng)
    next_obs, next_state, done = env.step(r_step, state, action)
    reset_obs, reset_state = env.reset(r_reset)
    obs_act = jnp.where(done, reset_obs, next_obs)
    state = jax.tree.map(lambda a, b: jnp.where(done, a, b), reset_state, next_state)
    return next_obs, obs_act, state, done


def optimistic_reset_step(env: Any, rng, states, actions, reset_ratio: int):
    """``auto_reset_step`` over a batch of E environments with optimistic resets [C: the Craftax
    baselines' optimistic-reset wrapper; this implementation is ours]: each step draws only
    E / ``reset_ratio`` fresh start states (a Craftax reset generates a whole world) and hands
    them to the environments that ended, the i-th ending environment (in index order) getting
    fresh state i mod E/ratio — distinct starts as long as at most E/ratio end at once, which
    the optimism is about. ``reset_ratio = 1`` is one reset per environment, as
    ``auto_reset_step``. Returns ``(next_obs, obs_to_act_on, states, done)``, each ``[E, ...]``."""
    e = actions.shape[0]
    n_fresh = e // min(reset_ratio, e)
    r_step, r_reset, r_perm = jax.random.split(rng, 3)
    next_obs, next_state, done = jax.vmap(env.step)(jax.random.split(r_step, e), states, actions)
    fresh_obs, fresh_state = jax.vmap(env.reset)(jax.random.split(r_reset, n_fresh))
    if n_fresh == e:
        idx = jnp.arange(e)
    else:  # the fresh states in a random order, so which env gets which start is not fixed
        idx = jax.random.permutation(r_perm, n_fresh)[(jnp.cumsum(done) - 1) % n_fresh]

    def pick(fresh, stepped):
        taken = fresh[idx]
        mask = done.reshape(e, *([1] * (stepped.ndim - 1)))
        return jnp.where(mask, taken, stepped)

    obs_act = pick(fresh_obs, next_obs)
    states = jax.tree.map(pick, fresh_state, next_state)
    return next_obs, obs_act, states, done


def make_env(name: str, *, size: int = 10, wall_prob: float = 0.3, map_seed: int = 0,
             max_steps: int | None = None, obs: str = "symbolic") -> Any:
    """``gridworld`` | ``craftax-classic`` | ``craftax`` (``obs``: symbolic | pixels on Craftax)."""
    if name == "gridworld":
        return Gridworld(size, wall_prob, map_seed, max_steps or 200)
    if name == "craftax-classic":
        return CraftaxGC(classic=True, max_steps=max_steps, obs=obs)
    if name == "craftax":
        return CraftaxGC(classic=False, max_steps=max_steps, obs=obs)
    raise UserError(f"unknown env {name!r} (choose one of {', '.join(ENV_NAMES)})")
