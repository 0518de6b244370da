"""The JAX backend equals the NumPy reference given the same normal draws, sharded over two (forced
host) devices as on one; a NumPy-only objective is refused. One subprocess (x64, 2 host devices)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

SCRIPT = textwrap.dedent("""
    import json, numpy as np, jax, jax.numpy as jnp
    from mesret import core
    from mesret.jax_backend import init_state, make_generation, shard_tasks

    dims, lam = [3, 5, 5, 4], 8
    shift = np.array([0.2, 0.7, 0.4, 0.6, 0.3])
    def fn(X, mask):  # per-task ellipsoid on the task's own coordinates
        return jnp.sum(((X - shift) * mask[:, None, :]) ** 2 * jnp.arange(1, 6), axis=-1)
    step, _ = make_generation(fn, dims, lam)
    state = init_state(dims, lam, 0.3, seed=1)
    rng = np.random.default_rng(2)
    Zs = [rng.standard_normal((4, lam, 5)) for _ in range(3)]
    out = {}
    for name, st in (("one", tuple(jnp.asarray(a) for a in state)),
                     ("two", shard_tasks(tuple(jnp.asarray(a) for a in state), jax.devices()[:2]))):
        for g, Z in enumerate(Zs):
            st, _ = step(st, jnp.asarray(Z), g)
        out[name] = [np.asarray(a) for a in st]
    # NumPy reference, task by task, same draws
    diffs = []
    for t, n in enumerate(dims):
        k = core.cma_constants(n, lam)
        m, s, C = state[0][t, :n], 0.3, np.eye(n)
        ps, pc, B, D = np.zeros(n), np.zeros(n), np.eye(n), np.ones(n)
        for g, Z in enumerate(Zs):
            X = core.sample_normal(m, s, B, D, Z[t, :, :n], False)
            f = np.sum((np.clip(X, 0, 1) - shift[:n]) ** 2 * np.arange(1, 6)[:n], axis=1)
            order = core.rank_samples(X, f, np.zeros(lam), 0.0)
            m, s, C, ps, pc = core.cma_update(k, m, s, C, ps, pc, B, D, X[order], g)
            B, D, ok = core.eigen(C)
        j = out["one"]
        diffs.append(max(np.abs(j[0][t, :n] - m).max(), abs(j[1][t] - s), np.abs(j[2][t, :n, :n] - C).max(),
                         np.abs(j[3][t, :n] - ps).max(), np.abs(j[4][t, :n] - pc).max()))
    shard = max(float(np.abs(a - b).max()) for a, b in zip(out["one"], out["two"]))
    print("RESULT=" + json.dumps(dict(ref=float(max(diffs)), shard=shard, devices=len(jax.devices()),
                                      moved=float(np.abs(out["one"][0] - state[0]).max()))))
""")


def test_jax_equals_numpy_and_sharding_is_invisible():
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.split("RESULT=")[1])
    assert r["devices"] == 2
    assert r["moved"] > 1e-3  # the generations really changed the state
    assert r["ref"] < 1e-10, r
    assert r["shard"] < 1e-12, r
