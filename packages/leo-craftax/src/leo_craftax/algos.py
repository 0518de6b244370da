"""Algorithms behind one interface (``AlgoSpec``) and a small registry: LEO and Dual LEO here, the
baselines (PQN, PQN + HER, goal-conditioned PPO) in ``baselines.py``. A new variant is one
``@register``-decorated builder ``(cfg, num_goals, num_actions) -> AlgoSpec``.

The shared training loop (``train.py``) rolls out ``policy``, calls ``prepare`` once per update
(TD targets or advantages, computed with the parameters that acted: no target network [C]) and
then minimises ``loss`` over shuffled minibatches for a few epochs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from icml26_shared import UserError

from .config import ALGOS, TrainConfig, image_shape
from .core import (
    GoalConditionedQ,
    LEONetwork,
    all_goals_td_targets,
    distill_ce,
    eps_greedy,
    goal_td_target,
    leo_loss,
    q_grouped,
    td_loss,
)
from .norm import apply_eval, apply_train, init_vars, split_vars


@dataclass(frozen=True)
class AlgoSpec:
    """``params`` everywhere below is a variables dict ``{"params": trainable, "batch_stats":
    BatchRenorm's running statistics}`` (composites nest one network per key in each). ``loss``
    returns ``(value, (aux, new batch_stats))``; only ``"params"`` is differentiated."""

    name: str
    init: Callable[[jax.Array, jax.Array], Any]                  # (rng, obs [1, D]) -> variables
    policy: Callable[..., tuple[jax.Array, dict]]                # (rng, variables, obs, goal, eps)
    greedy: Callable[[Any, jax.Array, jax.Array], jax.Array]     # (variables, obs, goal) -> action
    prepare: Callable[[Any, dict, jax.Array], dict]              # (variables, traj [T, E], rng)
    loss: Callable[[Any, dict], tuple[jax.Array, tuple[dict, dict]]]  # (variables, minibatch)
    minibatch_size: int
    # optional: greedy actions for observations grouped by goal, (variables, obs [K, R, D]) ->
    # [K, R] (row group k commands goal k) — evaluation's layout; LEO reads one head slice per goal
    greedy_grouped: Callable[[Any, jax.Array], jax.Array] | None = None
    # rows of the loss per transition (PQN + HER: the commanded goal plus N appended goals);
    # ``prepare``'s outputs named in ``row_keys`` carry them as a last axis ``[T, E, rows]``,
    # and the loop draws its minibatches over the T·E·rows rows (pqn.py's layout [C])
    rows: int = 1
    row_keys: tuple[str, ...] = ()
    # what ``prepare`` needs beyond the rollout: "achieved_s" (the goals achieved at s, [T, E, K]);
    # the loop also hands it "seen" (the goals seen so far, [K]), not kept in the batch
    needs: tuple[str, ...] = ()


_BUILDERS: dict[str, Callable[[TrainConfig, int, int], AlgoSpec]] = {}


def register(name: str):
    def deco(fn):
        _BUILDERS[name] = fn
        return fn
    return deco


def build_algo(cfg: TrainConfig, num_goals: int, num_actions: int) -> AlgoSpec:
    from . import baselines  # noqa: F401  (registers the baselines)

    if cfg.algo not in _BUILDERS:
        raise UserError(f"unknown algo {cfg.algo!r} (choose one of {', '.join(ALGOS)})")
    return _BUILDERS[cfg.algo](cfg, num_goals, num_actions)


def leo_network(cfg: TrainConfig, k: int, a: int) -> LEONetwork:
    return LEONetwork(k, a, cfg.width, cfg.layers, cfg.norm, cfg.sigmoid, image_shape(cfg.env),
                      cfg.norm_opts)


def gc_q_network(cfg: TrainConfig, k: int, a: int) -> GoalConditionedQ:
    return GoalConditionedQ(k, a, cfg.width, cfg.layers, cfg.goal_embed, cfg.norm, cfg.sigmoid,
                            image_shape(cfg.env), cfg.norm_opts)


def _pick(q_all, goal):
    """``q_all [..., K, A]``, ``goal [...]`` -> ``[..., A]``."""
    idx = jnp.broadcast_to(goal[..., None, None], (*goal.shape, 1, q_all.shape[-1]))
    return jnp.take_along_axis(q_all, idx, axis=-2)[..., 0, :]


def _any_goal(rng, traj, k):
    """One goal per transition drawn uniformly among all K: the teacher knows every goal, so the
    ``commanded+random`` variant also distils the actor on this one [R]."""
    return jax.random.randint(rng, traj["goal"].shape, 0, k)


class LEOParts:
    """LEO's pieces, reused by the Dual LEO variants (the teacher)."""

    def __init__(self, cfg: TrainConfig, k: int, a: int):
        self.net, self.gamma = leo_network(cfg, k, a), cfg.gamma

    def init(self, rng, obs):
        return init_vars(self.net, rng, obs)

    def q(self, v, obs, goal):
        return _pick(apply_eval(self.net, v, obs), goal)

    def greedy_grouped(self, v, obs):
        """``obs [K, R, D]`` (group k commands goal k) -> greedy actions ``[K, R]``, from goal k's
        slice of the all-goals head only (``q_grouped``): the same Q-values, 1/K of the head."""
        return jnp.argmax(q_grouped(self.net, v, obs), -1)

    def targets(self, v, traj):
        q_next = apply_eval(self.net, v, traj["next_obs"])
        return all_goals_td_targets(traj["achieved"], traj["done"], q_next, self.gamma)

    def loss(self, v, mb, y):
        """``(loss, q_all [N, K, A] of the training pass, new batch_stats)``."""
        q_all, stats = apply_train(self.net, v, mb["obs"])
        return leo_loss(q_all, mb["action"], y), q_all, stats


def _build_leo(cfg: TrainConfig, k: int, a: int, commanded_only: bool) -> AlgoSpec:
    leo = LEOParts(cfg, k, a)

    def policy(rng, v, obs, goal, eps):
        return eps_greedy(rng, leo.q(v, obs, goal), eps), {}

    def loss(v, mb):
        if commanded_only:  # the commanded goal's column: its Q-values and its target
            q_all, stats = apply_train(leo.net, v, mb["obs"])
            y_cmd = jnp.take_along_axis(mb["y_all"], mb["goal"][:, None], -1)[:, 0]
            value = td_loss(_pick(q_all, mb["goal"]), mb["action"], y_cmd)
        else:
            value, _, stats = leo.loss(v, mb, mb["y_all"])
        return value, ({"leo_loss": value}, stats)

    return AlgoSpec(
        "leo_commanded" if commanded_only else "leo", leo.init, policy,
        lambda v, obs, goal: jnp.argmax(leo.q(v, obs, goal), -1),
        lambda v, traj, rng: {"y_all": leo.targets(v, traj)}, loss, cfg.minibatch_size,
        leo.greedy_grouped)


@register("leo")
def build_leo(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    return _build_leo(cfg, k, a, commanded_only=False)


@register("leo_commanded")
def build_leo_commanded(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    """LEO with its mechanism removed [R]: the same network, all-goals head, targets, acting
    and loop, the loss on the commanded goal's column only (each transition teaches one goal,
    as goal-conditioned PQN without HER). LEO − leo_commanded isolates learning every goal."""
    return _build_leo(cfg, k, a, commanded_only=True)


@register("dual_leo_pqn")
def build_dual_leo_pqn(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    """A PQN actor Q(s, g) acts; a LEO teacher learns every goal from the same data; the actor's
    loss adds ``distill_coef``·CE(softmax(Q_actor(s, g)/τ), argmax_a Q_LEO(s, g, a)) on the
    commanded goal [C] (τ [R]); ``distill_goals="commanded+random"`` averages it with one uniformly
    drawn goal per transition [R]. The teacher's targets for the CE come from its training pass
    (stop-gradient inside ``distill_ce``)."""
    leo, actor = LEOParts(cfg, k, a), gc_q_network(cfg, k, a)
    extra_goal = cfg.distill_goals == "commanded+random"
    temp = 0.05  # [R] temperature turning sigmoid Q-values into distillation logits

    def init(rng, obs):
        r1, r2 = jax.random.split(rng)
        parts = {"actor": init_vars(actor, r1, obs, jnp.zeros(obs.shape[:1], jnp.int32)),
                 "leo": leo.init(r2, obs)}
        return {c: {n: p[c] for n, p in parts.items()} for c in ("params", "batch_stats")}

    def act_q(v, obs, goal):
        return apply_eval(actor, split_vars(v, "actor"), obs, goal)

    def prepare(v, traj, rng):
        q_next = act_q(v, traj["next_obs"], traj["goal"])
        ach_g = jnp.take_along_axis(traj["achieved"], traj["goal"][..., None], -1)[..., 0]
        return {"y_all": leo.targets(split_vars(v, "leo"), traj), "g_any": _any_goal(rng, traj, k),
                "y": goal_td_target(ach_g, traj["done"], q_next, cfg.gamma)}

    def loss(v, mb):
        va = split_vars(v, "actor")
        q, s_actor = apply_train(actor, va, mb["obs"], mb["goal"])
        l_actor = td_loss(q, mb["action"], mb["y"])
        l_leo, q_teacher, s_leo = leo.loss(split_vars(v, "leo"), mb, mb["y_all"])
        l_distill = distill_ce(q / temp, _pick(q_teacher, mb["goal"]))
        if extra_goal:  # same observations: the batch statistics of the pass above
            q_any, _ = apply_train(actor, va, mb["obs"], mb["g_any"])
            l_distill = 0.5 * (l_distill + distill_ce(q_any / temp, _pick(q_teacher, mb["g_any"])))
        total = l_actor + l_leo + cfg.distill_coef * l_distill
        return total, ({"actor_loss": l_actor, "leo_loss": l_leo, "distill": l_distill},
                       {"actor": s_actor, "leo": s_leo})

    return AlgoSpec(
        "dual_leo_pqn", init, lambda rng, v, o, g, eps: (eps_greedy(rng, act_q(v, o, g), eps), {}),
        lambda v, o, g: jnp.argmax(act_q(v, o, g), -1), prepare, loss, cfg.minibatch_size)


@register("dual_leo_ppo")
def build_dual_leo_ppo(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    """A goal-conditioned PPO actor-critic acts; a LEO teacher learns every goal off-policy; the
    actor's loss adds ``distill_coef``·CE(π(·|s, g), argmax_a Q_LEO(s, g, a)) on the commanded
    goal [C]; ``distill_goals="commanded+random"`` averages it with one uniformly drawn goal [R]."""
    from .baselines import PPOParts

    leo, ppo = LEOParts(cfg, k, a), PPOParts(cfg, k, a)
    extra_goal = cfg.distill_goals == "commanded+random"

    def init(rng, obs):
        r1, r2 = jax.random.split(rng)
        parts = {"actor": ppo.init(r1, obs), "leo": leo.init(r2, obs)}
        return {c: {n: p[c] for n, p in parts.items()} for c in ("params", "batch_stats")}

    def prepare(v, traj, rng):
        return {"y_all": leo.targets(split_vars(v, "leo"), traj), "g_any": _any_goal(rng, traj, k),
                **ppo.prepare(split_vars(v, "actor"), traj)}

    def loss(v, mb):
        va = split_vars(v, "actor")
        l_ppo, aux, logits, s_actor = ppo.loss(va, mb)
        l_leo, q_teacher, s_leo = leo.loss(split_vars(v, "leo"), mb, mb["y_all"])
        l_distill = distill_ce(logits, _pick(q_teacher, mb["goal"]))
        if extra_goal:
            (logits_any, _), _ = apply_train(ppo.net, va, mb["obs"], mb["g_any"])
            l_distill = 0.5 * (l_distill + distill_ce(logits_any, _pick(q_teacher, mb["g_any"])))
        return l_ppo + l_leo + cfg.distill_coef * l_distill, (
            {**aux, "leo_loss": l_leo, "distill": l_distill}, {"actor": s_actor, "leo": s_leo})

    return AlgoSpec("dual_leo_ppo", init,
                    lambda rng, v, o, g, eps: ppo.policy(rng, split_vars(v, "actor"), o, g),
                    lambda v, o, g: ppo.greedy(split_vars(v, "actor"), o, g), prepare, loss,
                    cfg.ppo_minibatch_size)
