"""LEO's maths: the all-goals Q head and its per-goal TD targets, as pure functions.

Q_θ(s) ∈ [0, 1]^{K×|A|} in one pass; for every goal g at once
    y_g = r_g(s') + γ · max_a Q(s', g, a) · (1 − [achieved_g(s') ∨ done])
with r_g(s') = [achieved_g(s')], and the loss ½·mean_{batch, goals} (Q(s, g, a_taken) − y_g)²
[C: purejaxgcrl leo.py]. ``q_for_goal`` is the same network read as a goal-conditioned Q(s, g)
(one slice of the head's weights) — the relabelling view that the equivalence tests compare with.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from .norm import InputNorm, apply_eval


class Encoder(nn.Module):
    """The observation's input layers: ``norm`` on the input (BatchRenorm, the paper's [C];
    ``none`` as the option), then, for ``image_shape`` (pixels, flat in the
    observation), a small conv stack [R: 2 × (Conv 32, 3×3, stride 2 → LayerNorm → ReLU),
    as PQN's pixel torsos; the authors' conv reads Craftax's symbolic map], flattened."""

    norm: str = "batchrenorm"
    image_shape: tuple[int, ...] | None = None
    norm_opts: tuple = ()  # BatchRenorm's momentum / warm-up (``TrainConfig.norm_opts``)

    @nn.compact
    def __call__(self, obs, train: bool = False):
        if self.image_shape is None:
            return InputNorm(self.norm, self.norm_opts, name="input_norm")(obs, train)
        lead, n_pix = obs.shape[:-1], math.prod(self.image_shape)
        x = obs[..., :n_pix].reshape(-1, *self.image_shape)  # the image; the rest is not seen
        x = InputNorm(self.norm, self.norm_opts, name="input_norm")(x, train)
        for i in range(2):
            x = nn.Conv(32, (3, 3), strides=(2, 2), padding="VALID", name=f"conv{i}")(x)
            x = nn.relu(nn.LayerNorm(name=f"conv_ln{i}")(x))
        return x.reshape(*lead, -1)


class Torso(nn.Module):
    """``layers`` × [Dense(width) → LayerNorm → ReLU] [C: pqn_models_gc, ``--norm_type layer_norm``]."""

    width: int = 1024
    layers: int = 4

    @nn.compact
    def __call__(self, x):
        for i in range(self.layers):
            x = nn.relu(nn.LayerNorm(name=f"ln{i}")(nn.Dense(self.width, name=f"dense{i}")(x)))
        return x


class AllGoalsQHead(nn.Module):
    """One Dense with K·|A| outputs, reshaped to ``[..., K, |A|]``; sigmoid keeps values in [0, 1]."""

    num_goals: int
    num_actions: int
    sigmoid: bool = True

    @nn.compact
    def __call__(self, h):
        q = nn.Dense(self.num_goals * self.num_actions, name="dense")(h)
        q = q.reshape(*h.shape[:-1], self.num_goals, self.num_actions)
        return nn.sigmoid(q) if self.sigmoid else q


class LEONetwork(nn.Module):
    """Q(s) for every goal at once: ``obs [..., D] -> [..., K, |A|]`` (``train``: BatchRenorm
    uses and updates batch statistics; otherwise its running statistics)."""

    num_goals: int
    num_actions: int
    width: int = 1024
    layers: int = 4
    norm: str = "batchrenorm"
    sigmoid: bool = True
    image_shape: tuple[int, ...] | None = None
    norm_opts: tuple = ()

    def setup(self):
        self.encoder = Encoder(self.norm, self.image_shape, self.norm_opts)
        self.torso = Torso(self.width, self.layers)
        self.head = AllGoalsQHead(self.num_goals, self.num_actions, self.sigmoid)

    def features(self, obs, train: bool = False):
        return self.torso(self.encoder(obs, train))

    def __call__(self, obs, train: bool = False):
        return self.head(self.features(obs, train))


class GoalConditionedQ(nn.Module):
    """Q(s, g) for one commanded goal per row (PQN, PQN + HER): ``obs [N, D], goal [N] -> [N, |A|]``.
    The goal enters as a learned embedding concatenated to the encoded observation [R]."""

    num_goals: int
    num_actions: int
    width: int = 1024
    layers: int = 4
    embed: int = 64
    norm: str = "batchrenorm"
    sigmoid: bool = True
    image_shape: tuple[int, ...] | None = None
    norm_opts: tuple = ()

    @nn.compact
    def __call__(self, obs, goal, train: bool = False):
        g = nn.Embed(self.num_goals, self.embed, name="goal_embed")(goal)
        x = Encoder(self.norm, self.image_shape, self.norm_opts, name="encoder")(obs, train)
        h = Torso(self.width, self.layers, name="torso")(jnp.concatenate([x, g], -1))
        q = nn.Dense(self.num_actions, name="head")(h)
        return nn.sigmoid(q) if self.sigmoid else q


def q_for_goal(net: LEONetwork, variables, obs, goal):
    """Q(s, g, ·) of a LEO network for one goal per row, reading only goal g's slice of the head's
    weights (what a goal-conditioned head sharing those weights computes): ``[N, |A|]``.
    ``variables``: ``{"params", "batch_stats"}`` (running statistics are used)."""
    h = apply_eval(net, variables, obs, method=LEONetwork.features)
    params = variables["params"]
    kernel = params["head"]["dense"]["kernel"].reshape(h.shape[-1], net.num_goals, net.num_actions)
    bias = params["head"]["dense"]["bias"].reshape(net.num_goals, net.num_actions)
    q = jnp.einsum("nh,hna->na", h, kernel[:, goal]) + bias[goal]
    return nn.sigmoid(q) if net.sigmoid else q


def q_grouped(net: LEONetwork, variables, obs):
    """Q(s, g, ·) of a LEO network with observations grouped by goal, ``obs [K, R, D] ->
    [K, R, |A|]`` (row group k reads goal k's head slice only): the all-goals head's values for
    the commanded goals, with R·K·|A| instead of R·K²·|A| head outputs per group of K·R rows."""
    h = apply_eval(net, variables, obs, method=LEONetwork.features)       # [K, R, H]
    params = variables["params"]["head"]["dense"]
    kernel = params["kernel"].reshape(h.shape[-1], net.num_goals, net.num_actions)
    bias = params["bias"].reshape(net.num_goals, net.num_actions)
    q = jnp.einsum("krh,hka->kra", h, kernel) + bias[:, None]
    return nn.sigmoid(q) if net.sigmoid else q


# --- TD targets and losses --------------------------------------------------------------------------

def all_goals_td_targets(achieved_next, done, q_next, gamma):
    """y_g for every goal: ``achieved_next [..., K] bool, done [...], q_next [..., K, A] -> [..., K]``.
    Goal g terminates where it is achieved (per-goal termination) or where the episode ends."""
    r = achieved_next.astype(jnp.float32)
    terminal = jnp.logical_or(achieved_next, done[..., None])
    return r + gamma * jnp.max(q_next, axis=-1) * (1.0 - terminal.astype(jnp.float32))


def goal_td_target(achieved_g, done, q_next_g, gamma):
    """The relabelled target for one goal per row: ``achieved_g [...], done [...], q_next_g [..., A]``."""
    terminal = jnp.logical_or(achieved_g, done).astype(jnp.float32)
    return achieved_g.astype(jnp.float32) + gamma * jnp.max(q_next_g, -1) * (1.0 - terminal)


def leo_loss(q_all, actions, targets):
    """½·mean over (batch, goals) of (Q(s, g, a_taken) − y_g)²; ``q_all [N, K, A]``, ``targets [N, K]``."""
    q_taken = jnp.take_along_axis(q_all, actions[:, None, None], axis=-1)[..., 0]
    return 0.5 * jnp.mean(jnp.square(q_taken - jax.lax.stop_gradient(targets)))


def td_loss(q, actions, targets):
    """½·mean (Q(s, g, a_taken) − y)² for one goal per row; ``q [N, A]``, ``targets [N]``."""
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=-1)[:, 0]
    return 0.5 * jnp.mean(jnp.square(q_taken - jax.lax.stop_gradient(targets)))


def distill_ce(student_logits, teacher_q):
    """CE(π_student(·|s, g), argmax_a Q_teacher(s, g, a)) — the Dual LEO teacher term [C]."""
    teacher = jnp.argmax(jax.lax.stop_gradient(teacher_q), -1)
    logp = jax.nn.log_softmax(student_logits, -1)
    return -jnp.mean(jnp.take_along_axis(logp, teacher[..., None], -1))


# --- acting ---------------------------------------------------------------------------------------

def epsilon(update, num_updates, start=0.2, finish=0.01, decay=0.2):
    """Linear ε from ``start`` to ``finish`` over the first ``decay`` fraction of updates [C]."""
    steps = jnp.maximum(decay * num_updates, 1.0)
    frac = jnp.clip(update / steps, 0.0, 1.0)
    return start + frac * (finish - start)


def eps_greedy(rng, q, eps):
    """ε-greedy actions from ``q [E, A]``."""
    r1, r2 = jax.random.split(rng)
    greedy = jnp.argmax(q, -1)
    rand = jax.random.randint(r1, greedy.shape, 0, q.shape[-1])
    return jnp.where(jax.random.uniform(r2, greedy.shape) < eps, rand, greedy)


def sample_goals(rng, seen, n, only_seen=True):
    """``n`` goals drawn uniformly among the goals seen so far (all goals when none is seen or
    ``only_seen`` is off) [C: sample_goal]."""
    k = seen.shape[0]
    weights = jnp.where(only_seen & jnp.any(seen), seen.astype(jnp.float32), 1.0)
    return jax.random.categorical(rng, jnp.log(weights)[None, :].repeat(n, 0), axis=-1) % k


# --- the authors' live success rate ---------------------------------------------------------------

LIVE_SUCCESS_DECAY = 0.999  # [C] --live_success_rate_decay (leo.py, pqn.py, ppo.py, dual_leo_*.py)


def live_step(goal, hit, done, completed, num_goals: int):
    """One acting step's first-try outcomes [C: the success / failure counters of leo.py]:
    ``goal [E]`` the commanded goals, ``hit [E]`` whether each was achieved at this step,
    ``done [E]`` episode ends, ``completed [E]`` the goals completed so far in each episode.
    Only an episode's first commanded goal counts (``completed == 0``): a success where it is
    achieved, a failure where the episode ends first (both on a step that does both, as the
    authors count it). Returns ``(successes [K], failures [K], completed [E] after the step)``."""
    first = completed == 0
    onehot = jax.nn.one_hot(goal, num_goals)
    succ = (onehot * (hit & first)[:, None]).sum(0)
    fail = (onehot * (done & first)[:, None]).sum(0)
    return succ, fail, jnp.where(done, 0, completed + hit.astype(completed.dtype))


def live_rate(successes, failures):
    """The live success rate averaged over all goals [C: ``live_success_rates_aggregate/all``]:
    each goal's decayed first-try successes / (successes + failures + 1e-7), a goal never tried
    counting 0, then the mean over every goal."""
    return jnp.mean(successes / (successes + failures + 1e-7))
