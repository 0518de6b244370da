"""Policy search across heterogeneous classic-control tasks on gymnax environments [R].

``SemanticLayout`` is the authors' EMaT-Gym parameter alignment [C]: every policy is
obs → h → h → act with tanh, flattened as [b1 (h), W2 (h×h), b2 (h) | W1 (obs×h), W3 (h×act),
b3 (act)], so the first h + h² + h coordinates are the same hidden-layer parameters in every task;
``layout="naive"`` is the ordinary [W1, b1, W2, b2, W3, b3] flattening, where coordinate j means
different things in different tasks.

The environments are gymnax's (the ``mesret[gymnax]`` extra; JAX): CartPole-v1, Acrobot-v1,
Pendulum-v1 and MountainCarContinuous-v0. A batch of parameter vectors is rolled out jitted and
vmapped over the population and the seeded start states, for a fixed horizon; an episode's return
stops at its first ``done`` [R]. Discrete actions are the greedy argmax of the policy's outputs;
continuous ones its first output squashed by tanh into the action box [R].
"""

from __future__ import annotations

import functools

import numpy as np

from icml26_shared import UserError

from .tasks import TaskSpec

ENVS = {  # obs, act, discrete, (return of a poor policy, return of a good one) for normalisation [R]
    "CartPole-v1": (4, 2, True, (0.0, 200.0)),
    "Acrobot-v1": (6, 3, True, (-200.0, -80.0)),
    "Pendulum-v1": (3, 1, False, (-1500.0, -150.0)),
    "MountainCarContinuous-v0": (2, 1, False, (-20.0, 90.0)),
}


class SemanticLayout:
    """Pack / unpack the flat parameter vector of an obs → h → h → act tanh MLP."""

    def __init__(self, obs: int, act: int, hidden: int = 8, layout: str = "semantic"):
        if layout not in ("semantic", "naive"):
            raise ValueError(f"layout must be semantic or naive, got {layout!r}")
        self.obs, self.act, self.h, self.layout = obs, act, hidden, layout
        h = hidden
        shapes = {"b1": (h,), "W2": (h, h), "b2": (h,), "W1": (obs, h), "W3": (h, act), "b3": (act,)}
        order = ["b1", "W2", "b2", "W1", "W3", "b3"] if layout == "semantic" else ["W1", "b1", "W2", "b2", "W3", "b3"]
        self.slices, start = {}, 0
        for name in order:
            size = int(np.prod(shapes[name]))
            self.slices[name] = (slice(start, start + size), shapes[name])
            start += size
        self.dim = start

    def unpack(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """``theta`` [..., dim] → parameter arrays with the same leading axes."""
        lead = theta.shape[:-1]
        return {k: theta[..., s].reshape(*lead, *shape) for k, (s, shape) in self.slices.items()}

    def pack(self, params: dict[str, np.ndarray]) -> np.ndarray:
        lead = params["b1"].shape[:-1]
        out = np.empty((*lead, self.dim))
        for k, (s, _) in self.slices.items():
            out[..., s] = params[k].reshape(*lead, -1)
        return out

    def act_fn(self, theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
        p = self.unpack(theta)
        h1 = np.tanh(np.einsum("bo,boh->bh", obs, p["W1"]) + p["b1"])
        h2 = np.tanh(np.einsum("bh,bhk->bk", h1, p["W2"]) + p["b2"])
        return np.einsum("bh,bha->ba", h2, p["W3"]) + p["b3"]


def _gymnax():
    try:
        import gymnax
        import jax
    except ImportError:
        raise UserError("the policy suite needs gymnax: pip install 'mesret[gymnax]'") from None
    return gymnax, jax


def _bucket(n: int) -> int:
    """Pad a batch to the next power of two (at least 8), so jit compiles a handful of shapes."""
    return max(8, 1 << (int(n) - 1).bit_length())


@functools.cache
def _rollout_fn(env_name: str, obs_dim: int, act_dim: int, hidden: int, layout: str, horizon: int):
    """The jitted ``(theta [n, dim], start keys [k]) -> (returns [n, k], steps [n, k])`` of one
    environment and policy shape, built once per process (every task, arm and seed reuses it)."""
    gymnax, jax = _gymnax()
    import jax.numpy as jnp

    env, params = gymnax.make(env_name)
    space = env.action_space(params)
    discrete = ENVS[env_name][2]
    lay = SemanticLayout(obs_dim, act_dim, hidden, layout)

    def act(th, obs):
        p = {k: th[s].reshape(shape) for k, (s, shape) in lay.slices.items()}
        h1 = jnp.tanh(obs @ p["W1"] + p["b1"])
        out = jnp.tanh(h1 @ p["W2"] + p["b2"]) @ p["W3"] + p["b3"]
        if discrete:
            return jnp.argmax(out)
        return space.low + (space.high - space.low) * (jnp.tanh(out[0]) + 1.0) / 2.0

    def episode(th, key):
        obs, state = env.reset(key, params)

        def step(carry, _):
            obs, state, total, alive, n = carry
            obs, state, r, done, _ = env.step_env(key, state, act(th, obs), params)  # no auto-reset
            total = total + jnp.where(alive, r, 0.0)
            n = n + alive
            return (obs, state, total, alive & ~done, n), None

        init = (obs, state, jnp.float32(0.0), jnp.bool_(True), jnp.int32(0))
        (_, _, total, _, n), _ = jax.lax.scan(step, init, None, length=horizon)
        return total, n

    return jax.jit(jax.vmap(jax.vmap(episode, (None, 0)), (0, None)))


class PolicyTask:
    """Minimise −(mean return over the seeded start states) of a batch of flat parameter vectors,
    each rolled out in the gymnax environment ``env`` for at most ``horizon`` steps."""

    def __init__(self, env: str, layout: SemanticLayout, horizon: int = 200, starts: int = 2, seed: int = 0):
        self.env, self.layout, self.horizon, self.n_starts, self.seed = env, layout, int(horizon), int(starts), int(seed)
        self.steps = 0  # env steps spent (all rollouts, until each one's first done)
        self._fn = self._keys = None

    def __getstate__(self):  # the jitted rollout is rebuilt in a new process
        return {**self.__dict__, "_fn": None, "_keys": None}

    def _build(self):
        _, jax = _gymnax()
        self._keys = jax.random.split(jax.random.PRNGKey(self.seed), self.n_starts)
        self._fn = _rollout_fn(self.env, self.layout.obs, self.layout.act, self.layout.h, self.layout.layout,
                               self.horizon)

    def returns(self, theta: np.ndarray) -> np.ndarray:
        if self._fn is None:
            self._build()
        theta = np.asarray(theta, np.float32)
        n = len(theta)
        pad = np.zeros((_bucket(n), theta.shape[1]), np.float32)
        pad[:n] = theta
        total, steps = (np.asarray(a)[:n] for a in self._fn(pad, self._keys))
        self.steps += int(steps.sum())
        return total.astype(float).mean(axis=1)

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        return -self.returns(np.atleast_2d(np.asarray(theta, float)))


def normalised_return(env: str, ret: float) -> float:
    low, high = ENVS[env][3]
    return (ret - low) / (high - low)


def policy_suite(envs=tuple(ENVS), layout: str = "semantic", hidden: int = 8, horizon: int = 200,
                 seed: int = 0) -> list[TaskSpec]:
    """One ``TaskSpec`` per environment; parameters in [−5, 5] (the unified box mapped as in
    EMaT-Gym [C]). Needs gymnax (the ``mesret[gymnax]`` extra)."""
    _gymnax()
    out = []
    for env in envs:
        obs, act, _, _ = ENVS[env]
        lay = SemanticLayout(obs, act, hidden, layout)
        out.append(TaskSpec(lay.dim, PolicyTask(env, lay, horizon, seed=seed), -5.0, 5.0, name=env))
    return out
