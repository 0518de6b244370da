"""BatchRenorm against its definition (Ioffe 2017), and its statistics threaded through training."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.norm import BatchRenorm
from leo_craftax.norm import apply_eval as _apply_eval
from leo_craftax.norm import apply_train as _apply_train
from leo_craftax.norm import init_vars as _init_vars
from leo_craftax.train import FAST_COMPILE

X = np.array([[1.0, 10.0], [2.0, 14.0], [4.0, 6.0], [5.0, 2.0]], np.float32)  # 4 rows, 2 features
EPS = 1e-3

# each a compiled program per module (modules hash by their fields), not one per operation
apply_train = jax.jit(_apply_train, static_argnums=0, compiler_options=FAST_COMPILE)
apply_eval = jax.jit(_apply_eval, static_argnums=0, compiler_options=FAST_COMPILE)
init_vars = jax.jit(_init_vars, static_argnums=0, compiler_options=FAST_COMPILE)


def _vars(brn, mean, var, steps):
    v = init_vars(brn, jax.random.PRNGKey(0), X)
    v["batch_stats"] = {"mean": jnp.asarray(mean), "var": jnp.asarray(var),
                        "steps": jnp.int32(steps)}
    return v


def test_training_output_equals_hand_computed_renormalisation():
    brn = BatchRenorm(warmup_steps=0, momentum=0.9)
    mu, var = np.array([2.0, 9.0]), np.array([4.0, 16.0])
    y, stats = apply_train(brn, _vars(brn, mu, var, 5), X)
    x = np.asarray(X)
    mb, vb = x.mean(0), x.var(0)                       # [3, 8], [2.5, 20]
    sb, s = np.sqrt(vb + EPS), np.sqrt(var + EPS)
    r = np.clip(sb / s, 1 / 3, 3)
    d = np.clip((mb - mu) / s, -5, 5)
    np.testing.assert_allclose(y, (x - mb) / sb * r + d, rtol=1e-5, atol=1e-6)
    assert not np.allclose(r, 1) and not np.allclose(d, 0)  # a case where renorm matters
    np.testing.assert_allclose(stats["mean"], 0.9 * mu + 0.1 * mb, rtol=1e-6)
    np.testing.assert_allclose(stats["var"], 0.9 * var + 0.1 * vb, rtol=1e-6)
    assert int(stats["steps"]) == 6


def test_r_and_d_are_clipped():
    brn = BatchRenorm(warmup_steps=0, r_max=1.5, d_max=0.25)
    mu, var = np.array([-20.0, 50.0]), np.array([0.01, 1e4])
    y, _ = apply_train(brn, _vars(brn, mu, var, 0), X)
    x = np.asarray(X)
    mb, sb = x.mean(0), np.sqrt(x.var(0) + EPS)
    want = (x - mb) / sb * np.array([1.5, 1 / 1.5]) + np.array([0.25, -0.25])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_rmax_one_dmax_zero_is_batch_norm_and_so_is_the_warm_up():
    x = np.asarray(X)
    bn = (x - x.mean(0)) / np.sqrt(x.var(0) + EPS)
    stats = (np.array([7.0, -3.0]), np.array([0.5, 9.0]))
    brn = BatchRenorm(warmup_steps=0, r_max=1.0, d_max=0.0)
    np.testing.assert_allclose(apply_train(brn, _vars(brn, *stats, 50), X)[0], bn, rtol=1e-5, atol=1e-6)
    warm = BatchRenorm(warmup_steps=10)  # step 3 < 10: r = 1, d = 0 whatever the running stats
    np.testing.assert_allclose(apply_train(warm, _vars(warm, *stats, 3), X)[0], bn, rtol=1e-5, atol=1e-6)
    assert not np.allclose(apply_train(warm, _vars(warm, *stats, 10), X)[0], bn, atol=1e-2)


def test_evaluation_uses_running_statistics():
    brn = BatchRenorm()
    mu, var = np.array([1.0, -2.0]), np.array([4.0, 0.25])
    v = _vars(brn, mu, var, 2000)
    y = apply_eval(brn, v, X)
    np.testing.assert_allclose(y, (np.asarray(X) - mu) / np.sqrt(var + EPS), rtol=1e-5, atol=1e-6)
    # one row alone gets the same output: no dependence on the rest of the batch
    np.testing.assert_allclose(apply_eval(brn, v, X[:1]), y[:1], rtol=1e-6)


def test_gradient_does_not_flow_through_r_and_d():
    """With r, d stop-gradients, dL/dx = r · (batch norm's dL/dx); were they differentiated,
    r·x̂ + d = (x − μ)/σ would have the plain (running-statistics) gradient instead."""
    mu, var = np.array([2.0, 9.0]), np.array([4.0, 16.0])
    w = jnp.array([[0.3, -1.0], [2.0, 0.5], [-0.7, 1.2], [1.1, 0.1]])
    brn = BatchRenorm(warmup_steps=0)
    bn = BatchRenorm(warmup_steps=0, r_max=1.0, d_max=0.0)
    v_brn, v_bn = _vars(brn, mu, var, 0), _vars(bn, mu, var, 0)
    grads = jax.jit(lambda x: (
        jax.grad(lambda x: jnp.sum(w * _apply_train(brn, v_brn, x)[0]))(x),
        jax.grad(lambda x: jnp.sum(w * _apply_train(bn, v_bn, x)[0]))(x)),
        compiler_options=FAST_COMPILE)
    g_brn, g_bn = grads(X)
    x = np.asarray(X)
    r = np.clip(np.sqrt(x.var(0) + EPS) / np.sqrt(var + EPS), 1 / 3, 3)
    np.testing.assert_allclose(g_brn, r * np.asarray(g_bn), rtol=1e-4, atol=1e-6)
    g_plain = np.broadcast_to(np.asarray(w) / np.sqrt(var + EPS), x.shape)
    assert not np.allclose(g_brn, g_plain, atol=1e-3)


@pytest.mark.parametrize("algo", ["leo", "pqn"])
def test_training_updates_running_statistics_and_checkpoints_them(algo, smoke_run, tmp_path):
    """LEO and PQN (a goal-conditioned network) at the smoke sizes, two seeds: the shared runs."""
    from leo_craftax.experiments import smoke_config
    from leo_craftax.io import load_checkpoint, save_checkpoint
    from leo_craftax.train import env_from_config

    cfg = smoke_config(algo)
    out = smoke_run(algo)
    assert cfg.norm == "batchrenorm"
    brn = out["params"]["batch_stats"]["encoder"]["input_norm"]["brn"]
    sgd_steps = cfg.num_updates * (cfg.num_steps * cfg.num_envs // cfg.minibatch_size) * cfg.num_epochs
    assert np.all(brn["steps"] == sgd_steps)  # 24 updates x 4 minibatches x 2 epochs
    assert np.all(np.abs(brn["mean"]).max(-1) > 0)  # moved from its zero initialisation
    names = env_from_config(cfg).goal_set.names
    seeds = list(range(len(brn["steps"])))
    path = save_checkpoint(tmp_path / "c.msgpack", cfg, out["params"], names, seeds=seeds)
    for i in seeds:
        _, back, _ = load_checkpoint(path, seed=i)
        jax.tree.map(lambda x, y, i=i: np.testing.assert_array_equal(x, y[i]), back, out["params"])
