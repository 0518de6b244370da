"""The baselines of the paper behind LEO's interface [C: purejaxgcrl pqn.py, ppo.py]:
PQN on the commanded goal, PQN + HER (the commanded goal plus N appended goals per transition:
random / positive / mixed; or all-goals relabelling, the speed benchmark's HER-all) and
goal-conditioned PPO."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from .algos import AlgoSpec, gc_q_network, register
from .config import TrainConfig, image_shape
from .core import Encoder, Torso, eps_greedy, goal_td_target, sample_goals, td_loss
from .norm import apply_eval, apply_train, init_vars


def _take(x, idx):
    """``x [..., K]`` at ``idx [...]``."""
    return jnp.take_along_axis(x, idx[..., None], -1)[..., 0]


def her_goals(rng, goal, achieved_s, seen, n_random: int, n_positive: int,
              granularity: str = "transition", only_seen: bool = True):
    """PQN + HER's goals as pqn.py appends them [C]: ``goal [T, E]`` (the commanded goals),
    ``achieved_s [T, E, K]`` (the goals achieved at s), ``seen [K]`` (the goals seen so far)
    -> ``[T, E, 1 + n_random + n_positive]``: column 0 the commanded goal, then ``n_random``
    goals drawn uniformly among the seen goals (all goals when none is seen or ``only_seen`` is
    off), then ``n_positive`` goals drawn uniformly among those achieved at s (the commanded goal
    where none is [R]). ``granularity="trajectory"``: every step of an environment's rollout gets
    the appended goals drawn for its last step [C]."""
    t, e, k = achieved_s.shape
    r_rand, r_pos = jax.random.split(rng)
    cols = [goal[..., None]]
    if n_random:
        cols.append(sample_goals(r_rand, seen, t * e * n_random, only_seen).reshape(t, e, n_random))
    if n_positive:
        logits = jnp.where(achieved_s, 0.0, -jnp.inf)
        any_ach = achieved_s.any(-1, keepdims=True)
        pos = jax.random.categorical(r_pos, jnp.where(any_ach, logits, 0.0)[..., None, :],
                                     shape=(t, e, n_positive))
        cols.append(jnp.where(any_ach, pos, goal[..., None]).astype(goal.dtype))
    goals = jnp.concatenate(cols, -1)
    if granularity == "trajectory":
        goals = goals.at[..., 1:].set(jnp.broadcast_to(goals[-1:, :, 1:], goals[..., 1:].shape))
    return goals


def _chunk_size(k: int, chunk: int) -> int:
    """The largest divisor of K that is at most ``chunk`` (K when ``chunk`` is 0)."""
    if chunk <= 0 or chunk >= k:
        return k
    return max(c for c in range(1, chunk + 1) if k % c == 0)


def _factored_q(net, v, obs, goals, train: bool = False):
    """Q(s, g, ·) of a goal-conditioned network for every state and every goal in ``goals [C]``:
    ``obs [N, D] -> [N, C, A]``, the first layer split as W·(x ‖ e_g) = W_x·x + W_g·e_g so that its
    observation part (the widest matrix on Craftax) is computed once per state — exactly the
    C goal-conditioned passes, with fewer multiply-adds [R: our fastest exact HER-all].
    Returns ``(q, new batch_stats)``."""
    enc = Encoder(net.norm, net.image_shape, net.norm_opts)
    ev = {"params": v["params"].get("encoder", {}), "batch_stats": v["batch_stats"].get("encoder", {})}
    if train:
        x, s_enc = apply_train(enc, ev, obs)
    else:
        x, s_enc = apply_eval(enc, ev, obs), ev["batch_stats"]
    params = v["params"]
    torso = params["torso"]
    kernel, bias = torso["dense0"]["kernel"], torso["dense0"]["bias"]
    d = x.shape[-1]
    emb = params["goal_embed"]["embedding"][goals]                        # [C, E]
    h = (x @ kernel[:d])[:, None, :] + (emb @ kernel[d:])[None] + bias    # [N, C, W]
    h = nn.relu(nn.LayerNorm().apply({"params": torso["ln0"]}, h))
    for i in range(1, net.layers):
        h = nn.Dense(net.width).apply({"params": torso[f"dense{i}"]}, h)
        h = nn.relu(nn.LayerNorm().apply({"params": torso[f"ln{i}"]}, h))
    qv = nn.Dense(net.num_actions).apply({"params": params["head"]}, h)
    stats = {**v["batch_stats"], "encoder": s_enc} if s_enc else v["batch_stats"]
    return (nn.sigmoid(qv) if net.sigmoid else qv), stats


def her_all_q(net, v, obs, chunk: int = 0, factored: bool = False, train: bool = False,
              remat: bool = True):
    """Q(s, g, ·) for every state and all K goals, ``obs [N, D] -> ([N, K, A], batch_stats)``, as
    all-goals relabelling computes it: one goal-conditioned pass per (state, goal) pair. Goals are
    taken ``chunk`` at a time (``lax.map``; ``remat``: each chunk's forward pass recomputed in
    the backward pass, ``jax.checkpoint``) so that the N·K rows fit in memory at Craftax sizes; ``factored`` shares the first layer's
    observation part across goals (``_factored_q``). Same values either way. ``train``: the
    loss pass (BatchRenorm on batch statistics — those of the N observations, whichever chunk);
    the new statistics are the first chunk's."""
    n, k = obs.shape[0], net.num_goals
    c = _chunk_size(k, chunk)

    def one(start):
        goals = start + jnp.arange(c)
        if factored:
            return _factored_q(net, v, obs, goals, train)
        rows = jnp.repeat(obs, c, axis=0)                                 # [N·C, D]
        if train:
            q, stats = apply_train(net, v, rows, jnp.tile(goals, n))
        else:
            q, stats = apply_eval(net, v, rows, jnp.tile(goals, n)), v["batch_stats"]
        return q.reshape(n, c, -1), stats

    if remat:
        one = jax.checkpoint(one)
    if c == k:
        return one(0)
    out, stats = jax.lax.map(one, jnp.arange(0, k, c))                    # [K/C, N, C, A]
    return jnp.moveaxis(out, 0, 1).reshape(n, k, -1), jax.tree.map(lambda s: s[0], stats)


def _build_pqn(cfg: TrainConfig, k: int, a: int, mode: str) -> AlgoSpec:
    net = gc_q_network(cfg, k, a)

    def q(v, obs, goal):
        return apply_eval(net, v, obs, goal)

    def init(rng, obs):
        return init_vars(net, rng, obs, jnp.zeros(obs.shape[:1], jnp.int32))

    def q_all(v, obs, train=False):
        return her_all_q(net, v, obs, cfg.her_all_chunk, cfg.her_all_factored, train,
                         cfg.her_all_remat)

    def prepare(v, traj, rng):
        t, e = traj["goal"].shape
        if mode == "all":
            # every transition relabelled with every goal: K goal-conditioned passes per state
            nxt = traj["next_obs"].reshape(t * e, -1)
            q_next = q_all(v, nxt)[0].reshape(t, e, k, a)
            y = goal_td_target(traj["achieved"], traj["done"][..., None], q_next, cfg.gamma)
            return {"y_all": y}
        if mode == "none":
            goal = traj["goal"]
            y = goal_td_target(_take(traj["achieved"], goal), traj["done"],
                               q(v, traj["next_obs"], goal), cfg.gamma)
            return {"g": goal, "y": y}
        # the commanded goal plus N appended goals per transition: [T, E, 1 + N]
        seen = traj.get("seen", jnp.ones(k, bool))
        goal = her_goals(rng, traj["goal"], traj["achieved_s"], seen, *cfg.her_split,
                         cfg.her_granularity, cfg.only_seen_goals)
        r = goal.shape[-1]
        nxt = jnp.broadcast_to(traj["next_obs"][:, :, None], (t, e, r, traj["next_obs"].shape[-1]))
        q_next = q(v, nxt.reshape(t * e * r, -1), goal.reshape(-1)).reshape(t, e, r, a)
        hit = jnp.take_along_axis(traj["achieved"], goal, -1)  # each row's goal achieved at s'
        y = goal_td_target(hit, traj["done"][..., None], q_next, cfg.gamma)
        return {"g": goal, "y": y}

    def loss(v, mb):
        if mode == "all":
            n = mb["obs"].shape[0]
            qv, stats = q_all(v, mb["obs"], train=True)
            value = td_loss(qv.reshape(n * k, a), jnp.repeat(mb["action"], k),
                            mb["y_all"].reshape(n * k))
        else:
            qv, stats = apply_train(net, v, mb["obs"], mb["g"])
            value = td_loss(qv, mb["action"], mb["y"])
        return value, ({"td_loss": value}, stats)

    rows = cfg.her_rows if mode != "none" else 1
    return AlgoSpec(
        "pqn" if mode == "none" else f"pqn_her_{mode}", init,
        lambda rng, v, o, g, eps: (eps_greedy(rng, q(v, o, g), eps), {}),
        lambda v, o, g: jnp.argmax(q(v, o, g), -1), prepare, loss, cfg.minibatch_size,
        rows=rows, row_keys=("g", "y") if rows > 1 else (),
        needs=("achieved_s",) if rows > 1 else ())


@register("pqn")
def build_pqn(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    return _build_pqn(cfg, k, a, "none")


@register("pqn_her")
def build_pqn_her(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    return _build_pqn(cfg, k, a, cfg.her_mode)


# --- goal-conditioned PPO -------------------------------------------------------------------------

class GCActorCritic(nn.Module):
    """Separate actor and critic MLPs on (encoded observation ‖ goal embedding) [C:
    actor_critic_gc, which has no input normalisation: ``ppo_norm`` "none" by default]."""

    num_goals: int
    num_actions: int
    width: int = 512
    layers: int = 2
    embed: int = 64
    norm: str = "none"
    image_shape: tuple[int, ...] | None = None
    norm_opts: tuple = ()

    @nn.compact
    def __call__(self, obs, goal, train: bool = False):
        obs = Encoder(self.norm, self.image_shape, self.norm_opts, name="encoder")(obs, train)
        x = jnp.concatenate([obs, nn.Embed(self.num_goals, self.embed)(goal)], -1)
        pi = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(
            Torso(self.width, self.layers, name="actor")(x))
        v = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(
            Torso(self.width, self.layers, name="critic")(x))
        return pi, v[..., 0]


class PPOParts:
    """Goal-conditioned PPO: reward [achieved_g(s')], the goal's episode ends when it is achieved
    or the environment's episode ends; GAE(λ) and the clipped objective [C: ppo.py]."""

    def __init__(self, cfg: TrainConfig, k: int, a: int):
        self.cfg = cfg
        self.net = GCActorCritic(k, a, cfg.width, cfg.layers, cfg.goal_embed, cfg.ppo_norm,
                                 image_shape(cfg.env), cfg.norm_opts)

    def init(self, rng, obs):
        return init_vars(self.net, rng, obs, jnp.zeros(obs.shape[:1], jnp.int32))

    def policy(self, rng, v, obs, goal):
        logits, value = apply_eval(self.net, v, obs, goal)
        action = jax.random.categorical(rng, logits)
        logp = _take(jax.nn.log_softmax(logits), action)
        return action, {"logp": logp, "value": value}

    def greedy(self, v, obs, goal):
        return jnp.argmax(apply_eval(self.net, v, obs, goal)[0], -1)

    def prepare(self, v, traj):
        c = self.cfg
        _, v_next = apply_eval(self.net, v, traj["next_obs"], traj["goal"])
        r = _take(traj["achieved"], traj["goal"]).astype(jnp.float32)
        term = jnp.logical_or(r > 0, traj["done"]).astype(jnp.float32)
        delta = r + c.ppo_gamma * v_next * (1 - term) - traj["value"]

        def back(adv, x):
            d, m = x
            adv = d + c.ppo_gamma * c.gae_lambda * (1 - m) * adv
            return adv, adv

        _, adv = jax.lax.scan(back, jnp.zeros_like(delta[0]), (delta, term), reverse=True)
        return {"adv": adv, "ret": adv + traj["value"]}

    def loss(self, v, mb):
        """``(loss, aux, logits, new batch_stats)``."""
        c = self.cfg
        (logits, value), stats = apply_train(self.net, v, mb["obs"], mb["goal"])
        logp_all = jax.nn.log_softmax(logits)
        logp = _take(logp_all, mb["action"])
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        ratio = jnp.exp(logp - mb["logp"])
        l_pi = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - c.clip_eps, 1 + c.clip_eps) * adv))
        l_v = 0.5 * jnp.mean(jnp.square(value - mb["ret"]))
        ent = -jnp.mean(jnp.sum(jnp.exp(logp_all) * logp_all, -1))
        total = l_pi + c.vf_coef * l_v - c.ent_coef * ent
        return total, {"pi_loss": l_pi, "v_loss": l_v, "entropy": ent}, logits, stats


@register("ppo_gc")
def build_ppo(cfg: TrainConfig, k: int, a: int) -> AlgoSpec:
    ppo = PPOParts(cfg, k, a)

    def loss(v, mb):
        total, aux, _, stats = ppo.loss(v, mb)
        return total, (aux, stats)

    return AlgoSpec("ppo_gc", ppo.init, lambda rng, v, o, g, eps: ppo.policy(rng, v, o, g),
                    ppo.greedy, lambda v, traj, rng: ppo.prepare(v, traj), loss,
                    cfg.ppo_minibatch_size)
