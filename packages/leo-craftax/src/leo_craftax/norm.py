"""Input normalisation: Batch Renormalization (Ioffe 2017, arXiv 1702.03275), the paper's
``--norm_input`` layer [C: purejaxgcrl ``models/batch_renorm.py``], written from its definition.

Training mode, per feature, with batch statistics μ_B, σ_B = √(var_B + ε) and running μ, σ:

    r = sg(clip(σ_B / σ, 1/r_max, r_max)),   d = sg(clip((μ_B − μ) / σ, −d_max, d_max))
    x̂ = (x − μ_B) / σ_B · r + d,             y = γ·x̂ + β

(``sg`` = stop-gradient: the gradient is r times batch norm's), then the running statistics move
towards the batch's with ``momentum``. During the first ``warmup_steps`` training calls r = 1,
d = 0 (plain batch norm while the running statistics settle) [C: 1000 steps, fixed r_max = 3,
d_max = 5, momentum 0.999, ε = 1e-3]. Evaluation mode normalises with the running statistics,
(x − μ) / σ, so one transition's value does not depend on the rest of its batch.

Variables live in flax's ``batch_stats`` collection (``mean``, ``var``, ``steps``); apply with
``train=True, mutable=["batch_stats"]`` to update them.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from .config import NORMS  # noqa: F401  (batchrenorm | none)


class BatchRenorm(nn.Module):
    momentum: float = 0.999     # [C]
    epsilon: float = 1e-3       # [C]
    r_max: float = 3.0          # [C]
    d_max: float = 5.0          # [C]
    warmup_steps: int = 1000    # [C] training calls of plain batch norm (r = 1, d = 0)
    use_scale: bool = True
    use_bias: bool = True

    @nn.compact
    def __call__(self, x, train: bool = False):
        feat = (x.shape[-1],)
        axes = tuple(range(x.ndim - 1))
        ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros(feat, jnp.float32))
        ra_var = self.variable("batch_stats", "var", lambda: jnp.ones(feat, jnp.float32))
        steps = self.variable("batch_stats", "steps", lambda: jnp.zeros((), jnp.int32))
        ra_std = jnp.sqrt(ra_var.value + self.epsilon)
        if train:
            mean = jnp.mean(x, axes)
            var = jnp.mean(jnp.square(x - mean), axes)
            std = jnp.sqrt(var + self.epsilon)
            r = jax.lax.stop_gradient(jnp.clip(std / ra_std, 1.0 / self.r_max, self.r_max))
            d = jax.lax.stop_gradient(jnp.clip((mean - ra_mean.value) / ra_std,
                                               -self.d_max, self.d_max))
            warm = steps.value >= self.warmup_steps
            r, d = jnp.where(warm, r, 1.0), jnp.where(warm, d, 0.0)
            y = (x - mean) / std * r + d
            if not self.is_initializing():
                m = self.momentum
                ra_mean.value = m * ra_mean.value + (1 - m) * jax.lax.stop_gradient(mean)
                ra_var.value = m * ra_var.value + (1 - m) * jax.lax.stop_gradient(var)
                steps.value = steps.value + 1
        else:
            y = (x - ra_mean.value) / ra_std
        if self.use_scale:
            y = y * self.param("scale", nn.initializers.ones, feat)
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, feat)
        return y


class InputNorm(nn.Module):
    """``batchrenorm`` (the paper's) | ``none``."""

    kind: str = "batchrenorm"
    opts: tuple = ()           # BatchRenorm fields, e.g. (("momentum", 0.99),)

    @nn.compact
    def __call__(self, x, train: bool = False):
        if self.kind == "batchrenorm":
            return BatchRenorm(**dict(self.opts), name="brn")(x, train)
        if self.kind == "none":
            return x
        raise ValueError(f"unknown norm {self.kind!r}")


def split_vars(variables: dict, name: str) -> dict:
    """One network's ``{"params", "batch_stats"}`` out of a composite (e.g. Dual LEO's actor)."""
    return {"params": variables["params"][name],
            "batch_stats": variables["batch_stats"].get(name, {})}


def init_vars(net: nn.Module, rng, *args) -> dict:
    """``{"params": ..., "batch_stats": ...}`` (the latter ``{}`` without BatchRenorm)."""
    v = net.init(rng, *args)
    return {"params": v["params"], "batch_stats": dict(v.get("batch_stats", {}))}


def apply_eval(net: nn.Module, variables: dict, *args, **kw):
    """Acting, targets and evaluation: the running statistics (``train=False``)."""
    return net.apply(_as_flax(variables), *args, **kw)


def apply_train(net: nn.Module, variables: dict, *args, **kw):
    """The loss pass: batch statistics, returns ``(output, new batch_stats)``."""
    out, upd = net.apply(_as_flax(variables), *args, train=True, mutable=["batch_stats"], **kw)
    return out, dict(upd.get("batch_stats", {}))


def _as_flax(variables: dict) -> dict:
    return {k: v for k, v in variables.items() if k == "params" or v}
