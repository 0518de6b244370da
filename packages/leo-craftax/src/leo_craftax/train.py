"""``make_train(config) -> train(rng)``: one pure, jittable function per run, PureJaxRL style
(``jax.jit(jax.vmap(train))(seeds)`` trains several seeds at once).

Each update: roll out ``num_steps`` × ``num_envs`` transitions with the acting policy (ε-greedy on
the commanded goal; the goal is resampled among the goals seen so far when it is achieved or the
episode ends [C]); ``prepare`` the targets once; ``num_epochs`` passes of shuffled minibatch SGD
(RAdam, global-norm clipping, linearly annealed learning rate [C]). Success over all goals is
evaluated before training and after each of ``num_evals`` equal segments: ``test_repeats``
episodes per goal at the last point, ``cfg.eval_chunk`` (``interim_repeats`` [R]) at the others.
Every update also logs the authors' live success rate (``metrics["live_success"]`` [C]: the
first-try success of the goals commanded during training, counts decayed by 0.999 per update,
averaged over all goals; ``core.live_step``): the value after the update's own episodes, which
the authors' scripts log at the start of the next update.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26_shared import UserError

from .algos import AlgoSpec, build_algo
from .config import TrainConfig
from .core import LIVE_SUCCESS_DECAY, epsilon, live_rate, live_step, sample_goals
from .envs import make_env, optimistic_reset_step

# Compile options for smoke runs and tests: LLVM's optimisation off and XLA:CPU's LLVM-IR fusion
# emitters instead of its newer MLIR ones — the same XLA program and values (to float rounding),
# measured at about half the compile time of ``xla_backend_optimization_level=0`` alone [R]
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


def env_from_config(cfg: TrainConfig) -> Any:
    e = cfg.env
    return make_env(e.name, size=e.size, wall_prob=e.wall_prob, map_seed=e.map_seed,
                    max_steps=e.max_steps, obs=e.obs)


def make_optimizer(cfg: TrainConfig, minibatch_size: int, rows: int = 1) -> optax.GradientTransformation:
    """Global-norm clipping and RAdam, the learning rate annealed linearly to ~0 over every
    gradient step of the run (``rows`` loss rows per transition: PQN + HER's) [C]."""
    n_mb = cfg.num_steps * cfg.num_envs * rows // minibatch_size
    lr = (optax.linear_schedule(cfg.lr, 1e-20, cfg.num_updates * n_mb * cfg.num_epochs)
          if cfg.anneal_lr else cfg.lr)
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.radam(lr))


def sgd_step(spec: AlgoSpec, tx: optax.GradientTransformation, variables, opt_state, minibatch):
    """One gradient step on one minibatch: ``(variables, opt_state, loss, aux)``. ``variables`` =
    ``{"params", "batch_stats"}``: the gradient is taken with respect to ``params`` only, and
    ``batch_stats`` (BatchRenorm's running statistics) become those of the loss's training pass."""
    def f(p):
        return spec.loss({**variables, "params": p}, minibatch)

    (loss, (aux, stats)), grads = jax.value_and_grad(f, has_aux=True)(variables["params"])
    updates, opt_state = tx.update(grads, opt_state, variables["params"])
    return ({"params": optax.apply_updates(variables["params"], updates), "batch_stats": stats},
            opt_state, loss, aux)


def evaluate(spec: AlgoSpec | None, params, env, rng, repeats: int, steps: int,
             reset_batch: int = 0):
    """Success rate per goal ``[K]``: each goal commanded in ``repeats`` fresh environments (start
    timestep 0), greedy actions, success if achieved during the first episode [C: test metrics].
    ``spec=None`` acts uniformly at random (the in-protocol anchor: the same starts, steps and
    success rule, no learning).

    The K·repeats fresh starts are drawn ``reset_batch`` at a time (``lax.map``; 0 = all at once):
    the same states, but a Craftax reset batch of thousands costs far more per reset than a few
    small ones [R]. Rows are grouped by goal, so an algorithm with ``greedy_grouped`` (LEO) reads
    each goal's slice of its all-goals head instead of computing every goal's Q-values."""
    k = env.goal_set.num_goals
    goals = jnp.repeat(jnp.arange(k), repeats)
    n = goals.shape[0]
    r_reset, r_run = jax.random.split(rng)
    keys = jax.random.split(r_reset, n)
    obs, state = jax.lax.map(lambda r: env.reset(r, False), keys,
                             batch_size=min(reset_batch, n) if reset_batch > 0 else n)

    def act(obs, r):
        if spec is None:  # the environment keys below stay those of a greedy run
            return jax.random.randint(jax.random.fold_in(r, 1), (n,), 0, env.num_actions)
        if spec.greedy_grouped is None:
            return spec.greedy(params, obs, goals)
        return spec.greedy_grouped(params, obs.reshape(k, repeats, -1)).reshape(n)

    def step(carry, r):
        obs, state, alive, success = carry
        nxt, state, done = jax.vmap(env.step)(jax.random.split(r, n), state, act(obs, r))
        hit = jax.vmap(env.goal_set.achieved)(nxt)[jnp.arange(n), goals]
        return (nxt, state, alive & ~done, success | (hit & alive)), None

    init = (obs, state, jnp.ones(n, bool), jnp.zeros(n, bool))
    (_, _, _, success), _ = jax.lax.scan(step, init, jax.random.split(r_run, steps))
    return success.astype(jnp.float32).reshape(k, repeats).mean(-1)


class TrainParts(NamedTuple):
    """The pieces of one run, each pure and jittable (``vmap`` over seeds):
    ``init(rng) -> (carry, r_eval)``; ``segment(carry) -> (carry, metrics [U / num_evals])``
    (the updates between two evaluation points); ``evaluate(params, rng) -> success [K]`` over
    ``cfg.eval_chunk`` episodes per goal: one call per evaluation point, ``final_calls`` at the
    last (``final_success``). ``carry[0]`` is the variables dict. ``make_train`` composes them
    into one program; ``train_seeds`` runs them as three, timing training and evaluation apart."""

    init: Callable
    segment: Callable
    evaluate: Callable
    final_calls: int = 1
    update: Callable | None = None  # one update, ``(carry, None) -> (carry, metrics)``
    # the update's two halves (``update`` = ``learn`` after ``collect``):
    # ``collect(carry) -> (carry, batch [T·E, ...] with the prepared targets, epoch key)``;
    # ``learn(variables, opt_state, batch, key) -> (variables, opt_state, loss, aux)``
    collect: Callable | None = None
    learn: Callable | None = None


def extra_eval_keys(rng, n: int):
    """Keys of the final point's calls after its first (which uses the point's own key)."""
    return jax.vmap(lambda j: jax.random.fold_in(rng, j))(jnp.arange(1, n))


def final_success(evaluate_, params, rng, first, n: int):
    """The final point's success ``[K]``: the mean of ``first`` (its call with ``rng``) and
    ``n - 1`` more calls of ``evaluate_`` on fresh episodes — ``test_repeats`` episodes per goal
    in all (equal chunks, so the mean of the calls is the mean over every episode)."""
    if n == 1:
        return first
    more = jax.lax.map(lambda r: evaluate_(params, r), extra_eval_keys(rng, n))
    return (first + more.sum(0)) / n


def train_parts(cfg: TrainConfig, env: Any = None, mesh: Any = None) -> TrainParts:
    """The run's pieces (``TrainParts``); ``mesh``: a ``jax.sharding.Mesh`` with a ``"data"`` axis:
    environments (and so the rollout and its minibatches) are split over it, parameters
    replicated (data parallelism [R]); built from ``cfg.num_devices`` when that is above 1."""
    cfg = cfg.validate()
    if mesh is None and cfg.num_devices > 1:
        from .parallel import data_mesh

        mesh = data_mesh(cfg.num_devices)
    env = env if env is not None else env_from_config(cfg)
    gs = env.goal_set
    k, a = gs.num_goals, env.num_actions
    spec = build_algo(cfg, k, a)
    e, t, u = cfg.num_envs, cfg.num_steps, cfg.num_updates
    rows = spec.rows
    n_mb = t * e * rows // spec.minibatch_size
    tx = make_optimizer(cfg, spec.minibatch_size, rows)
    test_steps = cfg.eval_steps(env.max_steps)

    def shard(tree, axis=0):
        if mesh is None:
            return tree
        from jax.sharding import NamedSharding, PartitionSpec

        spec_ = PartitionSpec(*([None] * axis), "data")
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec_)),
                            tree)

    env_step = partial(optimistic_reset_step, env, reset_ratio=cfg.reset_ratio)
    achieved = jax.vmap(gs.achieved)

    def collect(carry):
        """Roll out ``num_steps`` x ``num_envs`` transitions with the acting parameters and
        ``prepare`` their targets: ``(carry after the rollout, batch [T·E, ...], epoch key)``."""
        params, opt_state, obs, env_state, goal, seen, n_upd, rng, live = carry
        eps = epsilon(n_upd, u, cfg.eps_start, cfg.eps_finish, cfg.eps_decay)

        def step(c, _):
            obs, env_state, goal, seen, rng, (completed, succ, fail) = c
            rng, r_act, r_env, r_goal = jax.random.split(rng, 4)
            action, extras = spec.policy(r_act, params, obs, goal, eps)
            nxt, obs_act, env_state, done = env_step(r_env, env_state, action)
            ach = achieved(nxt)
            hit = ach[jnp.arange(e), goal]
            seen = seen | ach.any(0)
            new_goal = sample_goals(r_goal, seen, e, cfg.only_seen_goals)
            tr = {"obs": obs, "action": action, "next_obs": nxt, "done": done, "achieved": ach,
                  "goal": goal, **extras}
            if "achieved_s" in spec.needs:
                tr["achieved_s"] = achieved(obs)
            s_add, f_add, completed = live_step(goal, hit, done, completed, k)
            goal = jnp.where(done | hit, new_goal, goal)
            return (shard(obs_act), shard(env_state), shard(goal), seen, rng,
                    (shard(completed), succ + s_add, fail + f_add)), tr

        (obs, env_state, goal, seen, rng, (completed, succ, fail)), traj = jax.lax.scan(
            step, (obs, env_state, goal, seen, rng, live), None, t)
        # the authors' live success counters: this update's first tries added, then decayed [C]
        live = (completed, succ * LIVE_SUCCESS_DECAY, fail * LIVE_SUCCESS_DECAY)
        rng, r_prep, r_epochs = jax.random.split(rng, 3)
        prep = spec.prepare(params, {**traj, "seen": seen}, r_prep)
        data = {**{key: x for key, x in traj.items() if key not in spec.needs}, **prep}
        flat = jax.tree.map(lambda x: x.reshape(t * e, *x.shape[2:]), data)
        return (params, opt_state, obs, env_state, goal, seen, n_upd, rng, live), flat, r_epochs

    def learn(params, opt_state, flat, r_epochs):
        """``num_epochs`` passes of shuffled minibatch SGD over one batch (over its T·E·rows
        loss rows: PQN + HER's appended goals are rows of their own [C]): ``(params, opt_state,
        loss [epochs, minibatches], aux)``."""
        def epoch(c, r):
            def sgd(c, mb):
                p, o, loss, aux = sgd_step(spec, tx, *c, shard(mb))
                return (p, o), (loss, aux)

            perm = jax.random.permutation(r, t * e * rows)
            if rows == 1:
                mbs = jax.tree.map(lambda x: x[perm].reshape(n_mb, -1, *x.shape[1:]), flat)
            else:  # row i: transition i // rows, its goal column i % rows
                tr, col = perm // rows, perm % rows
                mbs = {key: (x[tr, col] if key in spec.row_keys else x[tr]) for key, x in
                       flat.items()}
                mbs = jax.tree.map(lambda x: x.reshape(n_mb, -1, *x.shape[1:]), mbs)
            return jax.lax.scan(sgd, c, mbs)

        (params, opt_state), (loss, aux) = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(r_epochs, cfg.num_epochs))
        return params, opt_state, loss, aux

    def update(carry, _):
        carry, flat, r_epochs = collect(carry)
        _, _, obs, env_state, goal, seen, n_upd, rng, live = carry
        params, opt_state, loss, aux = learn(carry[0], carry[1], flat, r_epochs)
        hit_rate = jnp.take_along_axis(flat["achieved"], flat["goal"][..., None], -1).mean()
        eps = epsilon(n_upd, u, cfg.eps_start, cfg.eps_finish, cfg.eps_decay)
        metrics = {"loss": loss.mean(), "eps": eps, "goals_seen": seen.sum(),
                   "commanded_hit_rate": hit_rate, "live_success": live_rate(live[1], live[2]),
                   **jax.tree.map(jnp.mean, aux)}
        return (params, opt_state, obs, env_state, goal, seen, n_upd + 1, rng, live), metrics

    def init(rng):
        rng, r_init, r_env, r_goal, r_eval = jax.random.split(rng, 5)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(r_env, e))
        obs, env_state = shard(obs), shard(env_state)
        params = spec.init(r_init, obs[:1])
        opt_state = tx.init(params["params"])
        seen = achieved(obs).any(0)
        goal = sample_goals(r_goal, seen, e, cfg.only_seen_goals)
        live = (shard(jnp.zeros(e, jnp.int32)), jnp.zeros(k), jnp.zeros(k))  # completed, succ, fail
        return (params, opt_state, obs, env_state, goal, seen, jnp.int32(0), rng, live), r_eval

    def segment(carry):
        return jax.lax.scan(update, carry, None, u // cfg.num_evals)

    def evaluate_(params, rng):
        return evaluate(spec, params, env, rng, cfg.eval_chunk, test_steps, cfg.eval_reset_batch)

    return TrainParts(init, segment, evaluate_, cfg.test_repeats // cfg.eval_chunk, update,
                      collect, learn)


def make_train(cfg: TrainConfig, env: Any = None, mesh: Any = None):
    """Returns ``train(rng) -> {"params", "metrics" [U], "success" [num_evals + 1, K]}``: one
    pure function (``jax.jit(jax.vmap(train))(seeds)`` trains several seeds in one program).
    Success is evaluated before training and after each of ``num_evals`` equal segments.
    ``mesh``: see ``train_parts``."""
    parts = train_parts(cfg, env, mesh)

    def train(rng):
        carry, r_eval = parts.init(rng)
        success0 = parts.evaluate(carry[0], r_eval)

        def segment(carry, r):
            carry, metrics = parts.segment(carry)
            return carry, (metrics, parts.evaluate(carry[0], r))

        keys = jax.random.split(r_eval, cfg.num_evals)
        carry, (metrics, success) = jax.lax.scan(segment, carry, keys)
        success = success.at[-1].set(final_success(parts.evaluate, carry[0], keys[-1], success[-1],
                                                   parts.final_calls))
        metrics = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), metrics)
        return {"params": carry[0], "metrics": metrics,
                "success": jnp.concatenate([success0[None], success], 0)}

    return train


def _compile_parts(parts: TrainParts, num_seeds: int, fast_compile: bool = False, chunk: int = 0):
    """``(init, segment, evaluate)`` compiled for ``num_seeds`` seeds; ``chunk`` > 0: the segment
    program runs ``chunk`` updates (the same scanned update; ``train_seeds`` calls it as often as
    the evaluation points need)."""
    opts = FAST_COMPILE if fast_compile else None
    rngs = jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32)

    def aot(fn, *args):
        return jax.jit(jax.vmap(fn)).lower(*args).compile(opts)

    segment = parts.segment if chunk <= 0 else (
        lambda c: jax.lax.scan(parts.update, c, None, chunk))
    carry, r_eval = jax.eval_shape(jax.vmap(parts.init), rngs)
    return aot(parts.init, rngs), aot(segment, carry), aot(parts.evaluate, carry[0], r_eval)


@lru_cache(maxsize=8)
def compiled_parts(cfg: TrainConfig, num_seeds: int, fast_compile: bool = False, chunk: int = 0):
    """``(init, segment, evaluate)`` of ``train_parts(cfg)``, each ``jit(vmap(...))`` compiled
    ahead of time for ``num_seeds`` seeds, one set per config in a process: a second run of the
    same config (a repeated reproduction) reuses them. ``fast_compile``: ``FAST_COMPILE`` (the
    same XLA program and values, a fraction of the compile time; for tests and smoke runs).
    ``chunk``: updates per segment call (0: the updates between two evaluation points)."""
    return _compile_parts(train_parts(cfg), num_seeds, fast_compile, chunk)


def run_shapes(cfg: TrainConfig, num_seeds: int):
    """``(carry, r_eval)`` of ``num_seeds`` seeds as shapes and dtypes (nothing compiled): what a
    saved run state (``io.load_state``) must hold to resume ``cfg``."""
    rngs = jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32)
    return jax.eval_shape(jax.vmap(train_parts(cfg).init), rngs)


def _clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: user + system, all threads)."""
    return time.perf_counter(), time.process_time()


def train_seeds(cfg: TrainConfig, seeds, env: Any = None, *, fast_compile: bool = False,
                chunk: int = 0, on_chunk: Callable | None = None, start: dict | None = None):
    """Train ``len(seeds)`` independent runs at once (``vmap`` over seeds): the same values as
    ``jax.jit(jax.vmap(make_train(cfg)))``, run as three compiled programs (``compiled_parts``,
    shared in a process for the config's own environment) so that ``out["timings"]`` can say
    what training and evaluation each cost: ``{compile,train,eval}_{s,cpu_s}`` (wall seconds
    and CPU seconds of the process).

    Resumable runs: the segment program runs ``chunk`` updates per call (0: all the updates
    between two evaluation points; it must divide them), and after every call but the run's
    last ``on_chunk(state)`` gets the whole run state — ``{"updates", "chunk", "carry"`` (the
    variables, optimiser, environments, goals and RNG of every seed), ``"r_eval", "success"``
    (the points so far, ``[seeds, points, K]``), ``"metrics"`` (``[seeds, updates]``),
    ``"timings"}`` as numpy — which ``io.save_state`` writes. ``start=`` such a state
    (``io.load_state``) continues the run from it: the same compiled programs on the same
    values and keys, so a resumed run equals an uninterrupted one (tested); ``timings`` add up
    over the sessions."""
    cfg = cfg.validate()
    per_seg = cfg.num_updates // cfg.num_evals
    chunk = start["chunk"] if start is not None else (chunk or per_seg)
    if chunk < 1 or per_seg % chunk:
        raise UserError(f"checkpoint interval {chunk} must divide the {per_seg} updates between "
                        f"two evaluation points")
    rngs = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    clock = {"compile": [0.0, 0.0], "train": [0.0, 0.0], "eval": [0.0, 0.0]}
    if start is not None:
        for k, v in clock.items():
            v[0], v[1] = start["timings"][f"{k}_s"], start["timings"][f"{k}_cpu_s"]

    def timed(what, fn, *args):
        w0, c0 = _clock()
        out = fn(*args)
        if what != "compile":
            out = jax.block_until_ready(out)
        w1, c1 = _clock()
        clock[what][0] += w1 - w0
        clock[what][1] += c1 - c0
        return out

    def timings():
        return {f"{k}_{unit}": v[j] for k, v in clock.items() for j, unit in enumerate(("s", "cpu_s"))}

    def state():  # numpy on the host (no device programs for the bookkeeping)
        host = jax.device_get({"carry": carry, "r_eval": r_eval, "success": success,
                               "metrics": metrics})
        return {"updates": done, "chunk": chunk, "timings": timings(), "carry": host["carry"],
                "r_eval": host["r_eval"], "success": np.stack(host["success"], 1),
                "metrics": jax.tree.map(lambda *x: np.concatenate(x, 1), *host["metrics"])}

    if env is None:
        init, segment, evaluate_ = timed("compile", compiled_parts, cfg, len(seeds), fast_compile,
                                         0 if chunk == per_seg else chunk)
    else:
        init, segment, evaluate_ = timed("compile", _compile_parts, train_parts(cfg, env),
                                         len(seeds), fast_compile, 0 if chunk == per_seg else chunk)
    if start is None:
        carry, r_eval = timed("train", init, rngs)
        success, metrics, done = [timed("eval", evaluate_, carry[0], r_eval)], [], 0
    else:
        carry, r_eval, done = start["carry"], start["r_eval"], start["updates"]
        success, metrics = list(np.moveaxis(np.asarray(start["success"]), 1, 0)), [start["metrics"]]
    keys = jax.vmap(lambda r: jax.random.split(r, cfg.num_evals))(r_eval)
    while done < cfg.num_updates:
        carry, m = timed("train", segment, carry)
        metrics.append(m)
        done += chunk
        if done % per_seg == 0:
            success.append(timed("eval", evaluate_, carry[0], keys[:, done // per_seg - 1]))
        if done < cfg.num_updates and on_chunk is not None:
            on_chunk(state())
    n = cfg.test_repeats // cfg.eval_chunk
    if n > 1:  # the final point: test_repeats episodes per goal, in n calls
        more = jax.vmap(lambda r: extra_eval_keys(r, n))(keys[:, -1])  # [seeds, n - 1, 2]
        for j in range(n - 1):
            success[-1] = success[-1] + timed("eval", evaluate_, carry[0], more[:, j])
        success[-1] = success[-1] / n
    return {"params": carry[0], "success": jnp.stack(success, 1), "timings": timings(),
            "metrics": jax.tree.map(lambda *x: jnp.concatenate(x, 1), *metrics)}
