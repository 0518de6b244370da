"""gymnax environments through ``GymnaxGC``: truncation ends an episode, and a real gymnax
environment (gymnax ≥ 1.0: the time limit comes from ``is_truncated``) trains; skipped where
the ``gymnax`` extra is not installed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.envs import GoalSet, GymnaxGC


class _Truncating:
    """A gymnax-API environment that never terminates and is truncated after 3 steps, returning
    ``(obs, state, reward, terminated, truncated, info)``."""

    default_params = None

    def action_space(self, params):
        return type("D", (), {"n": 2})()

    def observation_space(self, params):
        return type("B", (), {"shape": (1,)})()

    def reset_env(self, rng, params):
        return jnp.zeros(1), jnp.int32(0)

    def step_env(self, rng, state, action, params):
        t = state + 1
        return jnp.ones(1) * t, t, jnp.float32(0), jnp.bool_(False), t >= 3, {}


def test_truncation_ends_an_episode():
    gs = GoalSet.from_predicates({"t>=2": lambda o: o[0] >= 2})
    env = GymnaxGC(_Truncating(), gs, max_steps=3)
    _, state = env.reset(jax.random.PRNGKey(0))
    dones = []
    for _ in range(3):
        _, state, done = env.step(jax.random.PRNGKey(0), state, 0)
        dones.append(bool(done))
    assert dones == [False, False, True]  # the truncated flag (index 4) ends it


def test_a_real_gymnax_environment_trains_and_truncates():
    gymnax = pytest.importorskip("gymnax")
    from leo_craftax.config import TrainConfig
    from leo_craftax.train import train_seeds

    base, params = gymnax.make("MountainCar-v0")
    params = params.replace(max_steps_in_episode=20)
    # goals on the car's position (obs[0]) and velocity (obs[1])
    gs = GoalSet.from_predicates({"left": lambda o: o[0] < -0.6, "right": lambda o: o[0] > -0.4,
                                  "moving right": lambda o: o[1] > 0.005,
                                  "moving left": lambda o: o[1] < -0.005})
    env = GymnaxGC(base, gs, params)
    assert env.max_steps == 20
    _, state = env.reset(jax.random.PRNGKey(0))
    dones = []
    for i in range(20):  # a car that never reaches the flag: only the time limit ends it
        _, state, done = env.step(jax.random.PRNGKey(i), state, 1)
        dones.append(bool(done))
    assert dones == [False] * 19 + [True]
    cfg = TrainConfig(algo="leo", total_timesteps=16 * 8 * 4, num_envs=16, num_steps=8,
                      minibatch_size=64, width=32, layers=1, reset_ratio=1, test_repeats=1,
                      test_steps=20, num_evals=1, brn_warmup=2, brn_momentum=0.9)
    out = train_seeds(cfg, [0], env, fast_compile=True)
    success = np.asarray(out["success"])
    assert success.shape == (1, 2, 4) and np.isfinite(success).all()
    assert np.isfinite(np.asarray(out["metrics"]["loss"])).all()
