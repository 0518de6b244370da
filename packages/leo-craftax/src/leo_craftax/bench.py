"""Update throughput of LEO vs all-goals relabelling as the number of goals K grows.

One "update" = the TD targets of a minibatch of B transitions for every goal, plus one gradient
step on them. LEO: one pass of the all-goals network on s' and one on s. All-goals relabelling
(PQN + HER ``all``): a goal-conditioned network evaluated once per (transition, goal) pair, i.e.
B·K rows on s' and on s. Same torso for both; timed side by side, interleaved
(``icml26_shared.eval.compare``)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from .algos import build_algo
from .config import TrainConfig
from .train import make_optimizer, sgd_step


def _batch(rng, k: int, b: int, d: int, a: int) -> dict:
    r = jax.random.split(rng, 4)
    obs = jax.random.normal(r[0], (1, b, d))
    return {"obs": obs, "next_obs": jax.random.normal(r[1], (1, b, d)),
            "action": jax.random.randint(r[2], (1, b), 0, a),
            "done": jnp.zeros((1, b), bool),
            "achieved": jax.random.uniform(r[3], (1, b, k)) < 1.0 / k,
            "goal": jnp.zeros((1, b), jnp.int32)}


def make_update(algo: str, k: int, *, batch: int = 64, obs_dim: int = 64, num_actions: int = 4,
                width: int = 128, layers: int = 2, seed: int = 0):
    """A jitted ``update()`` (closure over its state) for ``algo`` = ``leo`` | ``her_all``."""
    cfg = TrainConfig(algo="leo" if algo == "leo" else "pqn_her", her_mode="all", width=width,
                      layers=layers, num_envs=batch, num_steps=1, minibatch_size=batch,
                      total_timesteps=batch)
    spec = build_algo(cfg, k, num_actions)
    tx = make_optimizer(cfg, batch)
    r1, r2 = jax.random.split(jax.random.PRNGKey(seed))
    traj = _batch(r1, k, batch, obs_dim, num_actions)
    params = spec.init(r2, traj["obs"][0, :1])
    state = {"params": params, "opt": tx.init(params)}

    @jax.jit
    def step(params, opt, traj, rng):
        data = {**traj, **spec.prepare(params, traj, rng)}
        mb = jax.tree.map(lambda x: x[0], data)
        p, o, loss, _ = sgd_step(spec, tx, params, opt, mb)
        return p, o, loss

    def update():
        p, o, loss = step(state["params"], state["opt"], traj, r1)
        jax.block_until_ready(loss)
        state["params"], state["opt"] = p, o

    return update


def flop_model_speedup(k: int, *, obs_dim: int = 64, width: int = 128, layers: int = 2,
                       num_actions: int = 4, embed: int = 64) -> float:
    """Predicted HER-all / LEO cost ratio from multiply-adds per transition [R]:
    LEO = torso(D) + W·K·|A| (one pass, a K·|A| head); HER-all = K·(torso(D + E) + W·|A|)."""
    torso = (layers - 1) * width * width
    leo = obs_dim * width + torso + width * k * num_actions
    her = k * ((obs_dim + embed) * width + torso + width * num_actions)
    return her / leo


def speed_table(ks: Sequence[int], *, batch: int = 64, repeats: int = 5, **kw) -> list[dict]:
    """Per K: median seconds per update of LEO and of all-goals relabelling, their ratio, and the
    ratio the multiply-add model predicts."""
    from icml26_shared.eval import compare

    rows = []
    for k in ks:
        fns = {"leo": make_update("leo", k, batch=batch, **kw),
               "her_all": make_update("her_all", k, batch=batch, **kw)}
        t = compare(fns, warmup=1, repeats=repeats)
        rows.append({"K": k, "leo_s": t["leo"].median, "her_all_s": t["her_all"].median,
                     "speedup": t["her_all"].median / t["leo"].median,
                     "flop_model": flop_model_speedup(k, **{n: v for n, v in kw.items()
                                                            if n in ("obs_dim", "width", "layers",
                                                                     "num_actions")})})
    return rows
