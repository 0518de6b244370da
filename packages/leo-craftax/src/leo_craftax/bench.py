"""Throughput of LEO vs all-goals relabelling as the number of goals K grows, in two units.

**Per update** (``speed_table``): one "update" = the TD targets of one minibatch of B
transitions for every goal, plus one gradient step on them — no acting, no other minibatch or
epoch; the ratio HER-all ÷ LEO of its median time is the *per-update ratio*. LEO: one pass of the all-goals network on s' and one on s. All-goals relabelling
(PQN + HER ``all``): a goal-conditioned network evaluated once per (transition, goal) pair, i.e.
B·K rows on s' and on s — as the paper compares; ``her_all_factored`` is the same relabelling
with the first layer's observation part computed once per state (our fastest exact HER-all);
``her_all_no_remat`` is HER-all without ``jax.checkpoint`` (its forward pass kept for the
backward pass instead of recomputed): HER-all ÷ it is the recompute cost.
Same torso for all; timed side by side, interleaved (``icml26_shared.eval.compare``).

**Per training step** (``train_step_table``): environment steps per second of one whole
``train.py`` update — acting for ``num_steps`` × ``num_envs`` steps, the targets, and every
minibatch of every epoch — for LEO and HER-all at the same settings, on a wall-less gridworld
of N×N cells (K = N² goals).

Presets: ``cpu`` (width 128 × 2, obs 64, 4 actions, batch 64: what a laptop times in seconds)
and ``paper`` (Craftax symbolic obs 8,268, 4 × 1024 MLP, 43 actions, minibatch 512, K = 512 /
1024 [C: the authors' Craftax defaults]: a GPU measurement; HER-all is chunked over goals to fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import jax
import jax.numpy as jnp

from .algos import build_algo
from .config import TrainConfig
from .train import FAST_COMPILE, make_optimizer, sgd_step

PRESETS = {
    "cpu": {"batch": 64, "obs_dim": 64, "num_actions": 4, "width": 128, "layers": 2,
            "ks": (16, 64, 256, 512, 1024), "chunk": 0},
    "paper": {"batch": 512, "obs_dim": 8268, "num_actions": 43, "width": 1024, "layers": 4,
              "ks": (512, 1024), "chunk": 64},
}
ARMS = ("leo", "her_all", "her_all_factored", "her_all_no_remat")


def _batch(rng, k: int, b: int, d: int, a: int) -> dict:
    r = jax.random.split(rng, 4)
    obs = jax.random.normal(r[0], (1, b, d))
    return {"obs": obs, "next_obs": jax.random.normal(r[1], (1, b, d)),
            "action": jax.random.randint(r[2], (1, b), 0, a),
            "done": jnp.zeros((1, b), bool),
            "achieved": jax.random.uniform(r[3], (1, b, k)) < 1.0 / k,
            "goal": jnp.zeros((1, b), jnp.int32)}


@lru_cache(maxsize=32)
def _setup(network: str, k: int, batch: int, obs_dim: int, num_actions: int, width: int,
           layers: int, seed: int, fast_compile: bool = False):
    """A minibatch and the initial state of ``network`` (``leo`` or the goal-conditioned
    ``gc`` of both HER-all arms) as one compiled program, shared by the arms that use it."""
    cfg = _config(network, k, batch, width, layers)
    spec = build_algo(cfg, k, num_actions)
    tx = make_optimizer(cfg, batch)

    def setup(key):
        r1, r2 = jax.random.split(key)
        traj = _batch(r1, k, batch, obs_dim, num_actions)
        params = spec.init(r2, traj["obs"][0, :1])
        return traj, r1, params, tx.init(params["params"])

    opts = FAST_COMPILE if fast_compile else None
    return jax.jit(setup, compiler_options=opts)(jax.random.PRNGKey(seed))


def _config(algo: str, k: int, batch: int, width: int, layers: int, chunk: int = 0) -> TrainConfig:
    return TrainConfig(algo="leo" if algo == "leo" else "pqn_her", her_mode="all", width=width,
                       layers=layers, num_envs=batch, num_steps=1, minibatch_size=batch,
                       total_timesteps=batch, her_all_chunk=chunk, reset_ratio=1,
                       her_all_factored=algo == "her_all_factored",
                       her_all_remat=algo != "her_all_no_remat")


@lru_cache(maxsize=32)
def _program(algo: str, k: int, batch: int, obs_dim: int, num_actions: int, width: int,
             layers: int, chunk: int, seed: int, fast_compile: bool = False):
    """The compiled update of ``algo`` and its inputs, one per size in a process (a repeated
    benchmark reuses the compiled program). ``fast_compile``: ``train.FAST_COMPILE`` (smoke
    runs only: the timings are then not those of an optimised program)."""
    cfg = _config(algo, k, batch, width, layers, chunk)
    spec = build_algo(cfg, k, num_actions)
    tx = make_optimizer(cfg, batch)
    traj, r1, params, opt = _setup("leo" if algo == "leo" else "gc", k, batch, obs_dim,
                                   num_actions, width, layers, seed, fast_compile)

    def step(params, opt, traj, rng):
        data = {**traj, **spec.prepare(params, traj, rng)}
        mb = jax.tree.map(lambda x: x[0], data)
        p, o, loss, _ = sgd_step(spec, tx, params, opt, mb)
        return p, o, loss

    step = jax.jit(step).lower(params, opt, traj, r1).compile(
        FAST_COMPILE if fast_compile else None)
    return step, traj, r1, params, opt


def make_update(algo: str, k: int, *, batch: int = 64, obs_dim: int = 64, num_actions: int = 4,
                width: int = 128, layers: int = 2, chunk: int = 0, seed: int = 0,
                fast_compile: bool = False):
    """A compiled ``update()`` (closure over its state) for ``algo`` in ``ARMS``."""
    if algo not in ARMS:
        raise ValueError(algo)
    step, traj, r1, params, opt = _program(algo, k, batch, obs_dim, num_actions, width, layers,
                                           chunk, seed, fast_compile)
    state = {"params": params, "opt": opt}

    def update():
        p, o, loss = step(state["params"], state["opt"], traj, r1)
        jax.block_until_ready(loss)
        state["params"], state["opt"] = p, o

    return update


def cost_model(k: int, *, obs_dim: int = 64, width: int = 128, layers: int = 2,
               num_actions: int = 4, embed: int = 64, batch: int = 64) -> dict[str, float]:
    """Per update, for each arm: multiply-adds of one forward pass over the minibatch and the fp32
    bytes it moves (activations written, plus the weights read once) [R: our model; the backward
    pass scales both arms alike]. ``ceiling_*`` = HER-all ÷ LEO."""
    torso = (layers - 1) * width * width
    mac = {"leo": obs_dim * width + torso + width * k * num_actions,
           "her_all": k * ((obs_dim + embed) * width + torso + width * num_actions),
           "her_all_factored": obs_dim * width + k * (embed * width + torso + width * num_actions)}
    act = {"leo": obs_dim + layers * width + k * num_actions,
           "her_all": k * (obs_dim + embed + layers * width + num_actions),
           "her_all_factored": obs_dim + k * (embed + layers * width + num_actions)}
    weights = {"leo": obs_dim * width + torso + width * k * num_actions,
               "her_all": (obs_dim + embed) * width + torso + width * num_actions + k * embed}
    weights["her_all_factored"] = weights["her_all"]
    mac["her_all_no_remat"], act["her_all_no_remat"] = mac["her_all"], act["her_all"]
    weights["her_all_no_remat"] = weights["her_all"]
    out = {}
    for arm in ARMS:
        out[f"mac_{arm}"] = float(batch * mac[arm])
        out[f"bytes_{arm}"] = float(4 * (batch * act[arm] + weights[arm]))
    for arm in ("her_all", "her_all_factored"):
        out[f"flop_ceiling_{arm}"] = out[f"mac_{arm}"] / out["mac_leo"]
        out[f"bytes_ceiling_{arm}"] = out[f"bytes_{arm}"] / out["bytes_leo"]
    return out


def flop_model_speedup(k: int, *, obs_dim: int = 64, width: int = 128, layers: int = 2,
                       num_actions: int = 4, embed: int = 64) -> float:
    """HER-all ÷ LEO multiply-adds per transition (the paper's HER-all, no factoring)."""
    return cost_model(k, obs_dim=obs_dim, width=width, layers=layers, num_actions=num_actions,
                      embed=embed, batch=1)["flop_ceiling_her_all"]


def speed_table(ks: Sequence[int] | None = None, *, preset: str = "cpu", repeats: int = 5,
                arms: Sequence[str] = ARMS, fast_compile: bool = False, **overrides) -> list[dict]:
    """Per K: median seconds per update of each arm, the per-update ratios HER-all ÷ LEO
    (``per_update_ratio_<arm>``), HER-all's recompute cost (``recompute_cost``: HER-all ÷ HER-all
    without ``jax.checkpoint``) and the cost model (``fast_compile``: unoptimised programs, for
    smoke runs; their timings mean little)."""
    from icml26_shared.eval import compare

    p = {**PRESETS[preset], **overrides}
    sizes = {n: p[n] for n in ("batch", "obs_dim", "num_actions", "width", "layers")}
    rows = []
    for k in (ks or p["ks"]):
        fns = {arm: make_update(arm, k, chunk=p["chunk"], fast_compile=fast_compile, **sizes)
               for arm in arms}
        t = compare(fns, warmup=1, repeats=repeats)
        row = {"K": k, "preset": preset, **{f"{arm}_s": t[arm].median for arm in arms},
               **cost_model(k, **sizes)}
        for arm in arms:
            if arm != "leo" and "leo" in arms:
                row[f"per_update_ratio_{arm}"] = t[arm].median / t["leo"].median
        row["per_update_ratio"] = row.get("per_update_ratio_her_all", float("nan"))
        row["recompute_cost"] = (t["her_all"].median / t["her_all_no_remat"].median
                                 if {"her_all", "her_all_no_remat"} <= set(arms) else float("nan"))
        row["flop_model"] = row["flop_ceiling_her_all"]
        rows.append(row)
    return rows


STEP_SETTINGS = {  # [R] the whole-step benchmark: gridworld_cpu's settings (1024 transitions per
    # update, 4 minibatches of 256, 2 epochs: 8 gradient steps), the width-128 x 2 MLP
    "num_envs": 64, "num_steps": 16, "minibatch_size": 256, "num_epochs": 2, "width": 128,
    "layers": 2}
STEP_ARMS = ("leo", "her_all")
# the paper preset's whole step: leo.py's settings [C] (1024 envs x 32 steps, minibatch 512,
# 2 epochs, 4 x 1024 MLP) — a GPU measurement; HER-all's goals in chunks of at most 23 [R] so
# that 32,768 transitions x K rows fit in memory
STEP_PAPER = {"num_envs": 1024, "num_steps": 32, "minibatch_size": 512, "num_epochs": 2,
              "width": 1024, "layers": 4, "her_all_chunk": 23}


def _step_program(arm: str, n: int, seed: int, fast_compile: bool, settings: tuple):
    from .config import gridworld_cpu
    from .train import train_parts

    kw = dict(settings)
    batch = kw["num_envs"] * kw["num_steps"]
    cfg = gridworld_cpu("leo" if arm == "leo" else "pqn_her", her_mode="all", env_size=n,
                        env_wall_prob=0.0, total_timesteps=4 * batch, **kw)
    parts = train_parts(cfg)
    opts = FAST_COMPILE if fast_compile else None
    carry, _ = jax.jit(parts.init, compiler_options=opts)(jax.random.PRNGKey(seed))
    step = jax.jit(lambda c: parts.update(c, None)[0]).lower(carry).compile(opts)
    return step, carry, batch


def train_step_table(sizes: Sequence[int] = (4, 12, 23), *, repeats: int = 3,
                     arms: Sequence[str] = STEP_ARMS, fast_compile: bool = False, seed: int = 0,
                     **overrides) -> list[dict]:
    """Per gridworld side N (K = N² goals, no walls): environment steps per second of one whole
    training update (acting, targets, every minibatch and epoch) of each arm, at the same
    ``STEP_SETTINGS`` (``overrides`` on top), and ``step_ratio`` = LEO's ÷ HER-all's."""
    from icml26_shared.eval import compare

    settings = tuple(sorted({**STEP_SETTINGS, **overrides}.items()))
    rows = []
    for n in sizes:
        fns, batch = {}, 0
        for arm in arms:
            step, carry, batch = _step_program(arm, n, seed, fast_compile, settings)
            state = {"carry": carry}

            def run(step=step, state=state):
                state["carry"] = jax.block_until_ready(step(state["carry"]))

            fns[arm] = run
        t = compare(fns, warmup=0, repeats=repeats)  # compiled ahead of time: no warm-up call
        row = {"K": n * n, "side": n, "env_steps_per_update": batch, **dict(settings),
               **{f"{arm}_s": t[arm].median for arm in arms},
               **{f"env_steps_per_s_{arm}": batch / t[arm].median for arm in arms}}
        row["step_ratio"] = (t["her_all"].median / t["leo"].median
                             if {"leo", "her_all"} <= set(arms) else float("nan"))
        rows.append(row)
    return rows
