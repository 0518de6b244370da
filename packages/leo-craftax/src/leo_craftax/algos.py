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

from .config import ALGOS, TrainConfig
from .core import (
    GoalConditionedQ,
    LEONetwork,
    all_goals_td_targets,
    distill_ce,
    eps_greedy,
    goal_td_target,
    leo_loss,
    td_loss,
)


@dataclass(frozen=True)
class AlgoSpec:
    name: str
    init: Callable[[jax.Array, jax.Array], Any]                  # (rng, obs [1, D]) -> params
    policy: Callable[..., tuple[jax.Array, dict]]                # (rng, params, obs, goal, eps)
    greedy: Callable[[Any, jax.Array, jax.Array], jax.Array]     # (params, obs, goal) -> action
    prepare: Callable[[Any, dict, jax.Array], dict]              # (params, traj [T, E], rng)
    loss: Callable[[Any, dict], tuple[jax.Array, dict]]          # (params, minibatch)
    minibatch_size: int


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
    return LEONetwork(k, a, cfg.width, cfg.layers, cfg.norm_input, cfg.sigmoid)


def gc_q_network(cfg: TrainConfig, k: int, a: int) -> GoalConditionedQ:
    return GoalConditionedQ(k, a, cfg.width, cfg.layers, cfg.goal_embed, cfg.norm_input, cfg.sigmoid)


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

    def q(self, params, obs, goal):
        return _pick(self.net.apply({"params": params}, obs), goal)

    def targets(self, params, traj):
        q_next = self.net.apply({"params": params}, traj["next_obs"])
        return all_goals_td_targets(traj["achieved"], traj["done"], q_next, self.gamma)

    def loss(self, params, mb, y):
        return leo_loss(self.net.apply({"params": params}, mb["obs"]), mb["action"], y)


@register("leo")
def build_leo(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    leo = LEOParts(cfg, k, a)

    def policy(rng, params, obs, goal, eps):
        return eps_greedy(rng, leo.q(params, obs, goal), eps), {}

    def loss(params, mb):
        value = leo.loss(params, mb, mb["y_all"])
        return value, {"leo_loss": value}

    return AlgoSpec(
        "leo", lambda rng, obs: leo.net.init(rng, obs)["params"], policy,
        lambda params, obs, goal: jnp.argmax(leo.q(params, obs, goal), -1),
        lambda params, traj, rng: {"y_all": leo.targets(params, traj)}, loss, cfg.minibatch_size)


@register("dual_leo_pqn")
def build_dual_leo_pqn(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    """A PQN actor Q(s, g) acts; a LEO teacher learns every goal from the same data; the actor's
    loss adds ``distill_coef``·CE(softmax(Q_actor(s, g)/τ), argmax_a Q_LEO(s, g, a)) on the
    commanded goal [C] (τ [R]); ``distill_goals="commanded+random"`` averages it with one uniformly
    drawn goal per transition [R]."""
    leo, actor = LEOParts(cfg, k, a), gc_q_network(cfg, k, a)
    extra_goal = cfg.distill_goals == "commanded+random"
    temp = 0.05  # [R] temperature turning sigmoid Q-values into distillation logits

    def init(rng, obs):
        r1, r2 = jax.random.split(rng)
        goal = jnp.zeros(obs.shape[:1], jnp.int32)
        return {"actor": actor.init(r1, obs, goal)["params"], "leo": leo.net.init(r2, obs)["params"]}

    def act_q(params, obs, goal):
        return actor.apply({"params": params["actor"]}, obs, goal)

    def prepare(params, traj, rng):
        q_next = act_q(params, traj["next_obs"], traj["goal"])
        ach_g = jnp.take_along_axis(traj["achieved"], traj["goal"][..., None], -1)[..., 0]
        return {"y_all": leo.targets(params["leo"], traj), "g_any": _any_goal(rng, traj, k),
                "y": goal_td_target(ach_g, traj["done"], q_next, cfg.gamma)}

    def loss(params, mb):
        q = act_q(params, mb["obs"], mb["goal"])
        l_actor = td_loss(q, mb["action"], mb["y"])
        l_leo = leo.loss(params["leo"], mb, mb["y_all"])
        q_any = act_q(params, mb["obs"], mb["g_any"]) if extra_goal else None
        l_distill = distill_ce(q / temp, leo.q(params["leo"], mb["obs"], mb["goal"]))
        if extra_goal:
            l_distill = 0.5 * (l_distill + distill_ce(
                q_any / temp, leo.q(params["leo"], mb["obs"], mb["g_any"])))
        total = l_actor + l_leo + cfg.distill_coef * l_distill
        return total, {"actor_loss": l_actor, "leo_loss": l_leo, "distill": l_distill}

    return AlgoSpec(
        "dual_leo_pqn", init, lambda rng, p, o, g, eps: (eps_greedy(rng, act_q(p, o, g), eps), {}),
        lambda p, o, g: jnp.argmax(act_q(p, o, g), -1), prepare, loss, cfg.minibatch_size)


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
        return {"actor": ppo.init(r1, obs), "leo": leo.net.init(r2, obs)["params"]}

    def prepare(params, traj, rng):
        return {"y_all": leo.targets(params["leo"], traj), "g_any": _any_goal(rng, traj, k),
                **ppo.prepare(params["actor"], traj)}

    def loss(params, mb):
        l_ppo, aux, logits = ppo.loss(params["actor"], mb)
        l_leo = leo.loss(params["leo"], mb, mb["y_all"])
        l_distill = distill_ce(logits, leo.q(params["leo"], mb["obs"], mb["goal"]))
        if extra_goal:
            logits_any = ppo.net.apply({"params": params["actor"]}, mb["obs"], mb["g_any"])[0]
            l_distill = 0.5 * (l_distill + distill_ce(
                logits_any, leo.q(params["leo"], mb["obs"], mb["g_any"])))
        return l_ppo + l_leo + cfg.distill_coef * l_distill, {**aux, "leo_loss": l_leo,
                                                               "distill": l_distill}

    return AlgoSpec("dual_leo_ppo", init,
                    lambda rng, p, o, g, eps: ppo.policy(rng, p["actor"], o, g),
                    lambda p, o, g: ppo.greedy(p["actor"], o, g), prepare, loss,
                    cfg.ppo_minibatch_size)
