"""The JAX backend (extra ``mesret[jax]``): one CMA-ES generation of *every* task in one jitted,
vmapped call — tasks padded to the largest dimension with masks, the task axis sharded over the
available devices with ``jax.sharding`` — and a generations-per-second comparison with the NumPy
reference. In 0.1.0 ``optimize(..., backend="jax")`` checks that every task function is
JAX-traceable and evaluates it jitted; the MES-RET outer loop itself is the NumPy reference [R].
"""

from __future__ import annotations

import numpy as np

from icml26_shared import UserError

from . import core


def _jax():
    try:
        import jax
    except ImportError:
        raise UserError("backend jax needs JAX: pip install 'mesret[jax]'") from None
    from icml26_shared.data import cache_dir

    try:
        jax.config.update("jax_compilation_cache_dir", str(cache_dir("jax")))
    except Exception:  # an older JAX without the persistent cache
        pass
    return jax


def check_jax_tasks(tasks) -> None:
    """Every task function must trace under JAX (a NumPy function fails): UserError naming it."""
    jax = _jax()
    import jax.numpy as jnp

    for i, t in enumerate(tasks):
        try:
            out = jax.eval_shape(t.fn, jax.ShapeDtypeStruct((2, t.dim), jnp.float32))
        except Exception as exc:  # NumPy code on a tracer raises one of many types
            raise UserError(f"{t.label(i)}: backend jax needs a JAX-traceable fn ([n, dim] -> [n] with "
                            f"jax.numpy); tracing failed with {type(exc).__name__}") from None
        if tuple(out.shape) != (2,):
            raise UserError(f"{t.label(i)}: fn must map [n, dim] to [n], got shape {tuple(out.shape)}")


def jit_tasks(tasks):
    """The same tasks with their functions compiled by ``jax.jit`` (the ES loop stays NumPy)."""
    from dataclasses import replace

    jax = _jax()
    return [replace(t, fn=jax.jit(t.fn)) for t in tasks]


def stack_constants(dims, lam: int) -> dict[str, np.ndarray]:
    """Per-task CMA-ES constants (``core.cma_constants``) stacked along the task axis."""
    ks = [core.cma_constants(int(d), lam, separable=False) for d in dims]
    out = {f: np.array([getattr(k, f) for k in ks], float) for f in
           ("mueff", "chiN", "hth", "cs", "damps", "cc", "c1", "cmu")}
    out["weights"] = np.stack([k.weights for k in ks])
    return out


def make_generation(fn, dims, lam: int):
    """``step(state, Z, gen) -> (state, f)`` for T tasks with dimensions ``dims`` padded to Dmax.
    ``fn(X [T, λ, Dmax], mask [T, Dmax]) -> [T, λ]`` evaluates the unit-box samples; ``state`` is
    ``(m [T,D], sigma [T], C [T,D,D], ps, pc, B [T,D,D], Dd [T,D])``."""
    jax = _jax()
    import jax.numpy as jnp

    dims = np.asarray(dims)
    Dmax = int(dims.max())
    mask = jnp.asarray(np.arange(Dmax)[None, :] < dims[:, None], dtype=float)
    K = {k: jnp.asarray(v) for k, v in stack_constants(dims, lam).items()}
    eye = jnp.eye(Dmax)

    def one(m, sigma, C, ps, pc, B, Dd, Z, f, msk, k, gen):
        X = m + sigma * (Z * msk) @ ((B * Dd) @ B.T)  # C^½ z, as core.sample_normal
        bound = jnp.sum((X - jnp.clip(X, -0.05, 1.05)) ** 2, axis=1)
        order = jnp.lexsort((f, jnp.where(bound > 0, bound, 0.0)))
        mu = k["weights"].shape[0]
        sel = X[order[:mu]]
        dm = (k["weights"] @ sel - m) / sigma
        m2 = k["weights"] @ sel
        ps = (1 - k["cs"]) * ps + jnp.sqrt(k["cs"] * (2 - k["cs"]) * k["mueff"]) * (
            ((B / Dd) @ B.T) @ dm) * msk
        hsig = jnp.linalg.norm(ps) / jnp.sqrt(1 - (1 - k["cs"]) ** (2 * (gen + 1))) < k["hth"]
        pc = (1 - k["cc"]) * pc + hsig * jnp.sqrt(k["cc"] * (2 - k["cc"]) * k["mueff"]) * dm
        art = (sel - m) / sigma
        delta = (1 - hsig) * k["cc"] * (2 - k["cc"])
        C = ((1 - k["c1"] - k["cmu"]) * C + k["c1"] * (jnp.outer(pc, pc) + delta * C)
             + k["cmu"] * (art.T * k["weights"]) @ art)
        m2d = msk[:, None] * msk[None, :]
        C = m2d * C + (1 - m2d) * eye  # padded coordinates stay an identity block
        sigma = sigma * jnp.exp(k["cs"] / k["damps"] * (jnp.linalg.norm(ps) / k["chiN"] - 1))
        vals, B = jnp.linalg.eigh(C, symmetrize_input=False)
        padded = jnp.sum((B * (1 - msk)[:, None]) ** 2, axis=0) > 0.5  # the identity block's vectors
        order = jnp.lexsort((vals, padded))  # real eigenpairs first, ascending, as in NumPy
        vals, B = vals[order], B[:, order]
        return m2, sigma, C, ps, pc, B, jnp.sqrt(jnp.maximum(vals, 1e-300))

    def sample(m, sigma, B, Dd, Z):
        S = jnp.einsum("tde,te,tfe->tdf", B, Dd, B)  # C^½ per task, as core.sample_normal
        return m[:, None, :] + sigma[:, None, None] * jnp.einsum("tld,tde->tle", Z * mask[:, None, :], S)

    def step(state, Z, gen):
        m, sigma, C, ps, pc, B, Dd = state
        X = sample(m, sigma, B, Dd, Z)
        f = fn(jnp.clip(X, 0.0, 1.0), mask)
        new = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None))(
            m, sigma, C, ps, pc, B, Dd, Z, f, mask, K, gen)
        return new, f

    return jax.jit(step), mask


def init_state(dims, lam: int, sigma0: float, seed: int):
    rng = np.random.default_rng(seed)
    T, Dmax = len(dims), int(max(dims))
    mask = np.arange(Dmax)[None, :] < np.asarray(dims)[:, None]
    m = np.where(mask, rng.uniform(size=(T, lam, Dmax)).mean(axis=1), 0.0)
    eye = np.broadcast_to(np.eye(Dmax), (T, Dmax, Dmax)).copy()
    return (m, np.full(T, sigma0), eye, np.zeros((T, Dmax)), np.zeros((T, Dmax)), eye.copy(), np.ones((T, Dmax)))


def shard_tasks(state, devices=None):
    """Place the task axis of every state array across ``devices`` (all by default)."""
    jax = _jax()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = list(devices or jax.devices())
    T = state[0].shape[0]
    while T % len(devices):  # the task axis must split evenly: use the largest device count that does
        devices = devices[:-1]
    mesh = Mesh(np.array(devices), ("tasks",))
    return tuple(jax.device_put(a, NamedSharding(mesh, PartitionSpec("tasks"))) for a in state)


def rastrigin_batch(X, mask):
    """A JAX many-task objective for timing: per task a shifted Rastrigin on its own coordinates."""
    import jax.numpy as jnp

    z = (X - 0.4) * 10.24 * mask[:, None, :]
    return jnp.sum(z**2 - 10 * jnp.cos(2 * jnp.pi * z) + 10, axis=-1)


def generations_per_second(T: int, D: int, gens: int, seed: int) -> dict[str, float]:
    """Generations (of one task) per second: NumPy reference loop vs the jitted batched step, timed
    side by side with ``icml26_shared.eval.compare`` (compilation excluded by the warm-up)."""
    jax = _jax()
    from threadpoolctl import threadpool_limits

    from icml26_shared.eval import compare

    from .algorithm import TaskCMA
    from .config import default_popsize

    lam = default_popsize(D)
    dims = [D] * T
    step, _ = make_generation(rastrigin_batch, dims, lam)
    state = shard_tasks(tuple(jax.numpy.asarray(a) for a in init_state(dims, lam, 0.3, seed)))
    key = jax.random.PRNGKey(seed)

    def run_jax():
        s, k = state, key
        for g in range(gens):
            k, sub = jax.random.split(k)
            s, _ = step(s, jax.random.normal(sub, (T, lam, D)), g)
        jax.block_until_ready(s)

    rng = np.random.default_rng(seed)
    es = [TaskCMA(D, lam, 0.3, False, rng) for _ in range(T)]

    def run_numpy():
        with threadpool_limits(1, "blas"):  # the reference at its fastest on tiny matrices
            _numpy_rounds()

    def _numpy_rounds():
        for _ in range(gens):
            for e in es:
                X = e.sample(rng.standard_normal((lam, D)))
                z = (np.clip(X, 0, 1) - 0.4) * 10.24
                f = np.sum(z**2 - 10 * np.cos(2 * np.pi * z) + 10, axis=1)
                e.update(X[core.rank_samples(X, f, np.zeros(lam), 0.0)])

    tm = compare({"numpy": run_numpy, "jax": run_jax}, warmup=1, repeats=3)
    return {k: T * gens / v.median for k, v in tm.items()}
