"""A 2-device sharded update on CPU equals the 1-device update (run in a subprocess: the device
count must be set before JAX starts)."""

import os
import subprocess
import sys
import textwrap

import pytest

CODE = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    assert len(jax.devices()) == 2, jax.devices()
    from leo_craftax.algos import build_algo
    from leo_craftax.config import gridworld_cpu
    from leo_craftax.parallel import data_mesh, sharded_sgd_step
    from leo_craftax.train import FAST_COMPILE, make_optimizer, sgd_step, make_train
    for algo in ALGOS:
        cfg = gridworld_cpu(algo, env_size=5, total_timesteps=64 * 16 * 2, width=32, layers=1)
        k, a, n, d = 12, 4, 64, 10
        spec = build_algo(cfg, k, a)
        tx = make_optimizer(cfg, n)
        def setup(key):  # one compiled program, not one per operation
            r = jax.random.split(key, 6)
            mb = {"obs": jax.random.normal(r[0], (n, d)),
                  "action": jax.random.randint(r[1], (n,), 0, a),
                  "y_all": jax.random.uniform(r[2], (n, k)), "y": jax.random.uniform(r[3], (n,)),
                  "g": jax.random.randint(r[4], (n,), 0, k)}
            params = spec.init(r[5], mb["obs"][:1])
            return params, tx.init(params["params"]), mb
        fast = FAST_COMPILE  # the same program, a fraction of the compile time
        params, opt, mb = jax.jit(setup, compiler_options=fast)(jax.random.PRNGKey(0))
        step = jax.jit(lambda p, o, b: sgd_step(spec, tx, p, o, b))
        one = step.lower(params, opt, mb).compile(fast)(params, opt, mb)
        mesh = data_mesh(2)
        two = sharded_sgd_step(spec, tx, mesh).lower(params, opt, mb).compile(fast)(params, opt, mb)
        assert all(len(x.sharding.device_set) == 2 for x in jax.tree.leaves(two[0]))  # replicated
        for x, y in zip(jax.tree.leaves(one[:3]), jax.tree.leaves(two[:3])):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=1e-6)
    if FULL_TRAIN:
        cfg = gridworld_cpu("leo", env_size=5, total_timesteps=64 * 16 * 3, num_devices=2)
        a = jax.jit(make_train(cfg))(jax.random.PRNGKey(1))
        b = jax.jit(make_train(cfg, mesh=data_mesh(2)))(jax.random.PRNGKey(1))
        for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"])):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-3, atol=1e-4)
    print("SHARDED-OK")
""")


def _run(algos, full_train):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    code = f"ALGOS = {algos!r}\nFULL_TRAIN = {full_train!r}\n" + CODE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0 and "SHARDED-OK" in out.stdout, out.stderr[-3000:]


def test_two_device_sharded_update_equals_one_device():
    _run(("leo",), False)


@pytest.mark.slow  # the fast test above covers the sharded update itself
def test_two_device_sharded_training_matches():
    _run(("leo", "pqn"), True)
