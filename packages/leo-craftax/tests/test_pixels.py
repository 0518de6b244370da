"""The conv encoder on pixels: it reads the image part of the observation only, every network
takes it, and (slow) a few updates on Craftax-Classic-Pixels run end to end."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.config import EnvConfig, TrainConfig, image_shape
from leo_craftax.core import GoalConditionedQ, LEONetwork
from leo_craftax.norm import apply_eval, apply_train, init_vars
from leo_craftax.train import FAST_COMPILE

from icml26_shared import UserError

SHAPE = (11, 9, 3)


def _obs(rng, n, tail=5):
    img = jax.random.uniform(rng, (n, math.prod(SHAPE)))
    return jnp.concatenate([img, jnp.zeros((n, tail))], -1)  # image ‖ symbolic (goals only)


@pytest.mark.parametrize("net", [LEONetwork(6, 4, 16, 1, image_shape=SHAPE),
                                 GoalConditionedQ(6, 4, 16, 1, embed=4, image_shape=SHAPE)])
def test_conv_encoder_reads_the_image_only(net):
    obs = _obs(jax.random.PRNGKey(0), 8)
    args = () if isinstance(net, LEONetwork) else (jnp.arange(8) % 6,)
    other_tail = obs.at[:, math.prod(SHAPE):].set(7.0)  # the symbolic part is not seen
    other_img = obs.at[:, :10].add(1.0)

    def run():  # one compiled program (FAST_COMPILE: same values, faster compile)
        v = init_vars(net, jax.random.PRNGKey(1), obs, *args)
        q = [apply_eval(net, v, o, *args) for o in (obs, other_tail, other_img)]
        return v, q, apply_train(net, v, obs, *args)[1]

    v, (q, q_tail, q_img), stats = jax.jit(run).lower().compile(FAST_COMPILE)()
    assert "conv0" in v["params"]["encoder"] and "conv1" in v["params"]["encoder"]
    assert q.shape[0] == 8 and q.shape[-1] == 4
    np.testing.assert_array_equal(q_tail, q)
    assert not np.allclose(q_img, q)
    assert stats["encoder"]["input_norm"]["brn"]["mean"].shape == (3,)  # per colour channel


def test_pixel_config():
    cfg = TrainConfig(env=EnvConfig("craftax-classic", obs="pixels")).validate()
    assert image_shape(cfg.env) == (63, 63, 3)
    assert image_shape(EnvConfig("craftax-classic")) is None
    with pytest.raises(UserError, match="pixel"):
        TrainConfig(env=EnvConfig("gridworld", obs="pixels")).validate()
    with pytest.raises(UserError, match="observation"):
        TrainConfig(env=EnvConfig("craftax", obs="rgb")).validate()


@pytest.mark.slow
def test_craftax_classic_pixels_trains_a_few_updates():
    from leo_craftax.train import env_from_config, make_train

    cfg = TrainConfig(algo="leo", env=EnvConfig("craftax-classic", obs="pixels"),
                      total_timesteps=16 * 4 * 2, num_envs=16, num_steps=4, minibatch_size=32,
                      width=32, layers=1, num_epochs=1, test_repeats=1, test_steps=4)
    env = env_from_config(cfg)
    assert env.image_shape == image_shape(cfg.env)
    assert env.obs_dim == 63 * 63 * 3 + 1345
    obs, state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    from craftax.craftax_classic.renderer import render_craftax_symbolic
    from leo_craftax.craftax_goals import craftax_classic_goal_set

    want = craftax_classic_goal_set().achieved(jnp.ravel(render_craftax_symbolic(state)))
    np.testing.assert_array_equal(env.goal_set.achieved(obs), want)
    out = jax.jit(make_train(cfg, env))(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(out["metrics"]["loss"])))
    assert out["success"].shape == (2, 136)
