"""``make_train(config) -> train(rng)``: one pure, jittable function per run, PureJaxRL style
(``jax.jit(jax.vmap(train))(seeds)`` trains several seeds at once).

Each update: roll out ``num_steps`` × ``num_envs`` transitions with the acting policy (ε-greedy on
the commanded goal; the goal is resampled among the goals seen so far when it is achieved or the
episode ends [C]); ``prepare`` the targets once; ``num_epochs`` passes of shuffled minibatch SGD
(RAdam, global-norm clipping, linearly annealed learning rate [C]). Success over all goals is
evaluated before training and after each of ``num_evals`` equal segments.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any

import jax
import jax.numpy as jnp
import optax

from .algos import AlgoSpec, build_algo
from .config import TrainConfig
from .core import epsilon, sample_goals
from .envs import make_env, optimistic_reset_step


def env_from_config(cfg: TrainConfig) -> Any:
    e = cfg.env
    return make_env(e.name, size=e.size, wall_prob=e.wall_prob, map_seed=e.map_seed,
                    max_steps=e.max_steps, obs=e.obs)


def make_optimizer(cfg: TrainConfig, minibatch_size: int) -> optax.GradientTransformation:
    n_mb = cfg.num_steps * cfg.num_envs // minibatch_size
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


def evaluate(spec: AlgoSpec, params, env, rng, repeats: int, steps: int):
    """Success rate per goal ``[K]``: each goal commanded in ``repeats`` fresh environments (start
    timestep 0), greedy actions, success if achieved during the first episode [C: test metrics]."""
    k = env.goal_set.num_goals
    goals = jnp.repeat(jnp.arange(k), repeats)
    n = goals.shape[0]
    r_reset, r_run = jax.random.split(rng)
    obs, state = jax.vmap(lambda r: env.reset(r, False))(jax.random.split(r_reset, n))

    def step(carry, r):
        obs, state, alive, success = carry
        action = spec.greedy(params, obs, goals)
        nxt, state, done = jax.vmap(env.step)(jax.random.split(r, n), state, action)
        hit = jax.vmap(env.goal_set.achieved)(nxt)[jnp.arange(n), goals]
        return (nxt, state, alive & ~done, success | (hit & alive)), None

    init = (obs, state, jnp.ones(n, bool), jnp.zeros(n, bool))
    (_, _, _, success), _ = jax.lax.scan(step, init, jax.random.split(r_run, steps))
    return success.astype(jnp.float32).reshape(k, repeats).mean(-1)


def make_train(cfg: TrainConfig, env: Any = None, mesh: Any = None):
    """Returns ``train(rng) -> {"params", "metrics" [U], "success" [num_evals + 1, K]}``.

    ``mesh``: a ``jax.sharding.Mesh`` with a ``"data"`` axis; environments (and so the rollout and
    its minibatches) are split over it, parameters replicated (data parallelism [R]); built from
    ``cfg.num_devices`` when that is above 1."""
    cfg = cfg.validate()
    if mesh is None and cfg.num_devices > 1:
        from .parallel import data_mesh

        mesh = data_mesh(cfg.num_devices)
    env = env if env is not None else env_from_config(cfg)
    gs = env.goal_set
    k, a = gs.num_goals, env.num_actions
    spec = build_algo(cfg, k, a)
    e, t, u = cfg.num_envs, cfg.num_steps, cfg.num_updates
    n_mb = t * e // spec.minibatch_size
    tx = make_optimizer(cfg, spec.minibatch_size)
    test_steps = cfg.eval_steps(env.max_steps)
    seg = u // cfg.num_evals

    def shard(tree, axis=0):
        if mesh is None:
            return tree
        from jax.sharding import NamedSharding, PartitionSpec

        spec_ = PartitionSpec(*([None] * axis), "data")
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec_)),
                            tree)

    env_step = partial(optimistic_reset_step, env, reset_ratio=cfg.reset_ratio)
    achieved = jax.vmap(gs.achieved)

    def update(carry, _):
        params, opt_state, obs, env_state, goal, seen, n_upd, rng = carry
        eps = epsilon(n_upd, u, cfg.eps_start, cfg.eps_finish, cfg.eps_decay)

        def step(c, _):
            obs, env_state, goal, seen, rng = c
            rng, r_act, r_env, r_goal = jax.random.split(rng, 4)
            action, extras = spec.policy(r_act, params, obs, goal, eps)
            nxt, obs_act, env_state, done = env_step(r_env, env_state, action)
            ach = achieved(nxt)
            hit = ach[jnp.arange(e), goal]
            seen = seen | ach.any(0)
            new_goal = sample_goals(r_goal, seen, e, cfg.only_seen_goals)
            tr = {"obs": obs, "action": action, "next_obs": nxt, "done": done, "achieved": ach,
                  "goal": goal, **extras}
            goal = jnp.where(done | hit, new_goal, goal)
            return (shard(obs_act), shard(env_state), shard(goal), seen, rng), tr

        (obs, env_state, goal, seen, rng), traj = jax.lax.scan(
            step, (obs, env_state, goal, seen, rng), None, t)
        rng, r_prep, r_epochs = jax.random.split(rng, 3)
        data = {**traj, **spec.prepare(params, traj, r_prep)}
        flat = jax.tree.map(lambda x: x.reshape(t * e, *x.shape[2:]), data)

        def epoch(c, r):
            def sgd(c, mb):
                p, o, loss, aux = sgd_step(spec, tx, *c, shard(mb))
                return (p, o), (loss, aux)

            perm = jax.random.permutation(r, t * e)
            mbs = jax.tree.map(lambda x: x[perm].reshape(n_mb, -1, *x.shape[1:]), flat)
            return jax.lax.scan(sgd, c, mbs)

        (params, opt_state), (loss, aux) = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(r_epochs, cfg.num_epochs))
        hit_rate = jnp.take_along_axis(traj["achieved"], traj["goal"][..., None], -1).mean()
        metrics = {"loss": loss.mean(), "eps": eps, "goals_seen": seen.sum(),
                   "commanded_hit_rate": hit_rate, **jax.tree.map(jnp.mean, aux)}
        return (params, opt_state, obs, env_state, goal, seen, n_upd + 1, rng), metrics

    def train(rng):
        rng, r_init, r_env, r_goal, r_eval = jax.random.split(rng, 5)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(r_env, e))
        obs, env_state = shard(obs), shard(env_state)
        params = spec.init(r_init, obs[:1])
        opt_state = tx.init(params["params"])
        seen = achieved(obs).any(0)
        goal = sample_goals(r_goal, seen, e, cfg.only_seen_goals)
        carry = (params, opt_state, obs, env_state, goal, seen, jnp.int32(0), rng)
        success0 = evaluate(spec, params, env, r_eval, cfg.test_repeats, test_steps)

        def segment(carry, r):
            carry, metrics = jax.lax.scan(update, carry, None, seg)
            return carry, (metrics, evaluate(spec, carry[0], env, r, cfg.test_repeats, test_steps))

        carry, (metrics, success) = jax.lax.scan(segment, carry,
                                                 jax.random.split(r_eval, cfg.num_evals))
        metrics = jax.tree.map(lambda x: x.reshape(u, *x.shape[2:]), metrics)
        return {"params": carry[0], "metrics": metrics,
                "success": jnp.concatenate([success0[None], success], 0)}

    return train


@lru_cache(maxsize=8)
def compiled_train(cfg: TrainConfig):
    """``jax.jit(jax.vmap(make_train(cfg)))``, one per config in a process: a second run of the
    same config (a repeated reproduction, another seed list of the same length) reuses the
    compiled program instead of tracing and compiling it again."""
    return jax.jit(jax.vmap(make_train(cfg)))


def train_seeds(cfg: TrainConfig, seeds, env: Any = None):
    """Train ``len(seeds)`` independent runs at once (``vmap`` over seeds, one jit). Without
    ``env`` (the config's own environment) the compiled program is shared (``compiled_train``)."""
    rngs = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    if env is None:
        return compiled_train(cfg.validate())(rngs)
    return jax.jit(jax.vmap(make_train(cfg, env)))(rngs)
