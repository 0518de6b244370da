"""Data parallelism over devices with ``jax.sharding``: minibatches (and, in ``make_train(...,
mesh=...)``, the environments) are split along a ``"data"`` mesh axis and the parameters are
replicated; XLA inserts the gradient all-reduce. On CPU, test it with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set before JAX starts."""

from __future__ import annotations

from functools import partial

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .algos import AlgoSpec
from .train import sgd_step


def data_mesh(num_devices: int | None = None) -> Mesh:
    devices = jax.devices()
    n = num_devices or len(devices)
    if n > len(devices):
        from icml26_shared import UserError

        raise UserError(f"{n} devices requested, {len(devices)} available")
    return Mesh(devices[:n], ("data",))


def sharded_sgd_step(spec: AlgoSpec, tx, mesh: Mesh):
    """``jit(sgd_step)`` with the minibatch split over ``mesh`` and everything else replicated."""
    repl = NamedSharding(mesh, PartitionSpec())
    data = NamedSharding(mesh, PartitionSpec("data"))
    return jax.jit(partial(sgd_step, spec, tx), in_shardings=(repl, repl, data),
                   out_shardings=(repl, repl, repl, repl))
