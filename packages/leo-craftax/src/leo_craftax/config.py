"""Configurations. Defaults are the authors' Craftax settings, each cited:
[C] = MichaelTMatthews/purejaxgcrl (``leo.py`` / ``pqn.py`` / ``dual_leo_*.py`` argument defaults),
[R] = reconstructed (not in the public code, or changed for CPU scale — said where)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from icml26_shared import UserError

NORMS = ("batchrenorm", "none")
OBS = ("symbolic", "pixels")
ALGOS = ("leo", "leo_commanded", "pqn", "pqn_her", "ppo_gc", "dual_leo_pqn", "dual_leo_ppo")
HER_MODES = ("none", "random", "positive", "mixed", "all")
HER_GRANULARITIES = ("transition", "trajectory")
LEGACY_REPLACE = "replace (0.3)"  # a record of a 0.3 PQN + HER run: a fraction of goals replaced
DISTILL_GOALS = ("commanded", "commanded+random")


@dataclass(frozen=True)
class EnvConfig:
    name: str = "gridworld"            # gridworld | craftax-classic | craftax
    size: int = 16                     # [C] --gridworld_map_size 16
    wall_prob: float = 0.3             # [C] --gridworld_wall_threshold 0.3
    map_seed: int = 0                  # [C] --gridworld_map_rng_seed 0
    max_steps: int | None = None       # None: 200 for the gridworld [C], the Craftax default [C]
    obs: str = "symbolic"              # Craftax: symbolic [C] | pixels (a conv encoder) [R]


@dataclass(frozen=True)
class TrainConfig:
    algo: str = "leo"
    env: EnvConfig = field(default_factory=EnvConfig)
    total_timesteps: int = int(1e9)    # [C] --total_timesteps 1e9
    num_envs: int = 1024               # [C] --num_envs 1024
    num_steps: int = 32                # [C] --num_steps 32 (rollout length per update)
    minibatch_size: int = 512          # [C] --minibatch_size 512 (PQN / LEO)
    num_epochs: int = 2                # [C] --num_epochs 2
    lr: float = 2e-4                   # [C] --lr 2e-4 (RAdam)
    anneal_lr: bool = True             # [C] linear to ~0 over training
    max_grad_norm: float = 1.0         # [C] --max_grad_norm 1.0
    gamma: float = 0.99                # [C] leo.py --gamma 0.99 (PQN's: ALGO_DEFAULTS)
    eps_start: float = 0.2             # [C] --eps_start 0.2
    eps_finish: float = 0.01           # [C] --eps_finish 0.01
    eps_decay: float = 0.2             # [C] --eps_decay 0.2 (fraction of updates)
    width: int = 1024                  # [C] --network_layer_width 1024
    layers: int = 4                    # [C] --network_dense_layers 4
    norm: str = "batchrenorm"          # [C] --norm_input: BatchRenorm on the input of the Q
                                       #     networks; none [R]
    ppo_norm: str = "none"             # [C] actor_critic_gc: no input normalisation
    brn_momentum: float = 0.999        # [C] models/batch_renorm.py
    brn_warmup: int = 1000             # [C] training steps of plain batch norm before renorm
    sigmoid: bool = True               # [C] --network_sigmoid_value (values in [0, 1])
    goal_embed: int = 64               # [R] goal embedding width of goal-conditioned networks
    only_seen_goals: bool = True       # [C] --only_sample_from_seen_goals
    her_mode: str = "mixed"            # [C] the README's PQN + HER command: --her_mode mixed
    # PQN + HER as pqn.py does it: every transition keeps its commanded goal and is appended
    # ``her_relabelled_goals`` more, round(N·p) drawn among the goals seen so far and the rest
    # achieved at s ("random": all N drawn, "positive": all N achieved at s); "all" (the
    # speed benchmark's HER-all) relabels with every goal instead
    her_relabelled_goals: int = 2      # [C] pqn.py --her_num_relabelled_goals 2
    her_random_proportion: float = 0.5  # [C] pqn.py --her_mixed_goal_random_proportion 0.5
    her_granularity: str = "transition"  # [C] pqn.py --her_relabel_granularity transition |
                                       #     trajectory (every step gets the last step's goals)
    distill_coef: float = 0.1          # [C] dual_leo_*: weight of CE(actor, argmax Q_LEO)
    distill_goals: str = "commanded"   # [C] commanded goal; "commanded+random" adds a uniform goal [R]
    her_all_chunk: int = 0             # [R] HER-all: goals per chunk (0 = all K at once)
    her_all_factored: bool = False     # [R] HER-all: first layer's observation part computed once
    her_all_remat: bool = True         # [R] HER-all: recompute each goal chunk's forward pass in the
                                       #     backward pass (jax.checkpoint: memory for time)
    reset_ratio: int = 16              # [C] Craftax baselines: optimistic resets, num_envs/16 fresh
                                       #     states per step shared by the envs that end
    # PPO (ppo.py / dual_leo_ppo.py)
    ppo_gamma: float = 0.995           # [C] dual_leo_ppo --gamma 0.995
    gae_lambda: float = 0.95           # [C] --gae_lambda 0.95
    clip_eps: float = 0.2              # [C] --clip_eps 0.2
    ent_coef: float = 0.005            # [C] --ent_coef 0.005
    vf_coef: float = 0.5               # [R] PureJaxRL default
    ppo_minibatch_size: int = 2048     # [C] dual_leo_ppo minibatch 2048
    # evaluation (success over all goals, first episode, greedy)
    test_repeats: int = 16             # [C] --test_num_repeats 16
    test_steps: int | None = 512       # [C] 512 on Craftax (min with the episode length); None =
                                       #     whole episodes (10k steps on Classic, 100k on Craftax)
    num_evals: int = 1                 # [R] points on the success-vs-steps curve
    interim_repeats: int = 4           # [R] episodes per goal at every evaluation point but the
                                       #     last (gcd with test_repeats; 0 = test_repeats): the
                                       #     curve's points cost 1/4, the final figure is unchanged
    eval_reset_batch: int = 64         # [R] evaluation's fresh starts drawn this many at a time
                                       #     (0 = all at once; same states, far cheaper on Craftax)
    num_devices: int = 1               # [R] data parallel over environments (jax.sharding)

    @property
    def num_updates(self) -> int:
        return max(1, self.total_timesteps // (self.num_steps * self.num_envs))

    @property
    def her_rows(self) -> int:
        """Rows of the loss per transition: PQN + HER's commanded goal plus its appended goals
        (pqn.py's ``num_her_goals_total``); 1 for everything else (HER-all included)."""
        if self.algo == "pqn_her" and self.her_mode in ("random", "positive", "mixed"):
            return 1 + self.her_relabelled_goals
        return 1

    @property
    def her_split(self) -> tuple[int, int]:
        """``(random, positive)`` appended goals per transition: pqn.py's
        ``int(np.round(N · p))`` drawn among seen goals and the rest achieved at s for ``mixed``
        [C] (N = 2, p = 0.75 gives 2 and 0); all N of one kind for ``random`` / ``positive``."""
        n = self.her_relabelled_goals
        if self.her_mode == "random":
            return n, 0
        if self.her_mode == "positive":
            return 0, n
        r = int(np.round(n * self.her_random_proportion))
        return r, n - r

    @property
    def norm_opts(self) -> tuple:
        """BatchRenorm's fields as the networks take them (hashable)."""
        return (("momentum", self.brn_momentum), ("warmup_steps", self.brn_warmup))

    def replace(self, **kw) -> TrainConfig:
        env_kw = {k[4:]: kw.pop(k) for k in list(kw) if k.startswith("env_")}
        env = dataclasses.replace(self.env, **env_kw) if env_kw else self.env
        return dataclasses.replace(self, env=env, **kw)

    def validate(self) -> TrainConfig:
        if self.algo not in ALGOS:
            raise UserError(f"unknown algo {self.algo!r} (choose one of {', '.join(ALGOS)})")
        if self.her_mode not in HER_MODES:
            raise UserError(f"unknown HER mode {self.her_mode!r} (choose one of {', '.join(HER_MODES)})")
        if self.her_granularity == LEGACY_REPLACE:
            raise UserError("this config records a 0.3 PQN + HER run (a fraction of the commanded "
                            "goals replaced): it can be read and evaluated, not trained again")
        if self.her_granularity not in HER_GRANULARITIES:
            raise UserError(f"unknown HER granularity {self.her_granularity!r} (choose one of "
                            f"{', '.join(HER_GRANULARITIES)})")
        if self.her_relabelled_goals < 1:
            raise UserError(f"her_relabelled_goals must be >= 1 (got {self.her_relabelled_goals})")
        if not (math.isfinite(self.her_random_proportion) and 0 <= self.her_random_proportion <= 1):
            raise UserError(f"her_random_proportion must be a finite number in [0, 1] (got "
                            f"{self.her_random_proportion})")
        for name, low, high, open_low in (("lr", 0, math.inf, True), ("gamma", 0, 1, True),
                                          ("ppo_gamma", 0, 1, True), ("eps_start", 0, 1, False),
                                          ("eps_finish", 0, 1, False), ("eps_decay", 0, 1, True),
                                          ("max_grad_norm", 0, math.inf, True)):
            v = getattr(self, name)
            if not (math.isfinite(v) and (v > low if open_low else v >= low) and v <= high):
                span = f"{'(' if open_low else '['}{low:g}, {high:g}]"
                raise UserError(f"{name} must be a finite number in {span} (got {v})")
        for name in ("num_envs", "num_steps", "num_epochs", "minibatch_size", "ppo_minibatch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1 (got {getattr(self, name)})")
        batch = self.num_steps * self.num_envs
        if self.total_timesteps < batch:
            raise UserError(f"total_timesteps {self.total_timesteps:,} is below one update: at "
                            f"least num_steps x num_envs = {batch:,} env steps")
        mb = self.ppo_minibatch_size if self.algo in ("ppo_gc", "dual_leo_ppo") else self.minibatch_size
        if batch % mb:
            raise UserError(f"num_steps*num_envs = {batch} is not a multiple of the minibatch size {mb}")
        if self.num_envs % self.num_devices:
            raise UserError(f"num_envs {self.num_envs} not divisible by num_devices {self.num_devices}")
        for what, value, choices in (("norm", self.norm, NORMS), ("norm", self.ppo_norm, NORMS),
                                     ("observation", self.env.obs, OBS)):
            if value not in choices:
                raise UserError(f"unknown {what} {value!r} (choose one of {', '.join(choices)})")
        if self.env.obs == "pixels" and self.env.name == "gridworld":
            raise UserError("pixel observations exist for craftax-classic and craftax only")
        if self.distill_goals not in DISTILL_GOALS:
            raise UserError(f"unknown distillation goals {self.distill_goals!r} (choose one of "
                            f"{', '.join(DISTILL_GOALS)})")
        if self.test_steps is not None and self.test_steps < 1:
            raise UserError(f"test steps must be >= 1 or None (got {self.test_steps})")
        if self.eval_reset_batch < 0:
            raise UserError(f"evaluation reset batch must be >= 0 (got {self.eval_reset_batch})")
        if self.test_repeats < 1:
            raise UserError(f"evaluation repeats must be >= 1 (got {self.test_repeats})")
        if self.interim_repeats < 0:
            raise UserError(f"interim evaluation repeats must be >= 0 (got {self.interim_repeats})")
        if self.reset_ratio < 1 or self.num_envs % min(self.reset_ratio, self.num_envs):
            raise UserError(f"reset ratio {self.reset_ratio} must be >= 1 and divide num_envs "
                            f"{self.num_envs}")
        if self.num_evals < 1 or self.num_updates % self.num_evals:
            raise UserError(f"num_evals {self.num_evals} must divide the {self.num_updates} updates")
        return self

    def eval_steps(self, episode_length: int) -> int:
        """Steps of one evaluation episode: ``test_steps`` capped by the episode length."""
        return episode_length if self.test_steps is None else min(self.test_steps, episode_length)

    @property
    def eval_chunk(self) -> int:
        """Episodes per goal in one evaluation call: every point but the last makes one call,
        the last ``test_repeats // eval_chunk`` calls (the same ``test_repeats`` episodes)."""
        if self.interim_repeats <= 0:
            return self.test_repeats
        return math.gcd(self.interim_repeats, self.test_repeats)

    def eval_cost(self, num_goals: int, episode_length: int) -> tuple[int, int]:
        """``(env steps of the final evaluation point, training env steps per segment)``:
        K·repeats episodes of ``eval_steps`` each, against the steps trained between two points
        (the other points cost ``eval_chunk / test_repeats`` of the final one)."""
        per_point = num_goals * self.test_repeats * self.eval_steps(episode_length)
        per_segment = self.num_updates // self.num_evals * self.num_steps * self.num_envs
        return per_point, per_segment

    def eval_cost_total(self, num_goals: int, episode_length: int) -> int:
        """Evaluation env steps of a whole run: ``num_evals`` points of ``eval_chunk`` episodes
        per goal (before training and after each segment but the last) plus the final point."""
        per_episode_set = num_goals * self.eval_steps(episode_length)
        return per_episode_set * (self.num_evals * self.eval_chunk + self.test_repeats)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        if "her_ratio" in d:  # up to 0.3.7: PQN + HER replaced a fraction of the goals
            d.pop("her_ratio")
            if d.get("algo") == "pqn_her" and d.get("her_mode") != "all":
                d["her_granularity"] = LEGACY_REPLACE
        env = EnvConfig(**d.pop("env", {}))
        try:
            return cls(env=env, **d)
        except TypeError as exc:
            raise UserError(f"not a leo-craftax config: {exc}") from None


# Each algorithm at its own script's defaults on Craftax, over the TrainConfig defaults (leo.py's):
ALGO_DEFAULTS = {
    # [C] pqn.py's argument defaults (the PQN rows: --her_mode none)
    "pqn": {"num_steps": 2, "minibatch_size": 256, "lr": 2e-4, "gamma": 0.995, "num_epochs": 1,
            "eps_decay": 0.5},
    # [C] the authors' README command: pqn.py --her_mode mixed --minibatch_size 2048 --lr 0.0001,
    # every other setting at pqn.py's defaults (1024 envs, 2-step rollouts, γ 0.995, 1 epoch,
    # ε 0.2 -> 0.01 over 50% of the updates, 2 appended goals, random proportion 0.5)
    "pqn_her": {"num_steps": 2, "minibatch_size": 2048, "lr": 1e-4, "gamma": 0.995,
                "num_epochs": 1, "eps_decay": 0.5, "her_mode": "mixed"},
}


def craftax_config(algo: str = "leo", **kw) -> TrainConfig:
    """A Craftax run of ``algo`` at its authors' script defaults (``ALGO_DEFAULTS`` over the
    ``TrainConfig`` defaults), ``kw`` on top (``env_*`` keys reach ``EnvConfig``)."""
    kw.setdefault("env_name", "craftax-classic")
    return TrainConfig(algo=algo).replace(**{**ALGO_DEFAULTS.get(algo, {}), **kw})


# Craftax pixel observations (height, width, RGB), as ``craftax`` 1.6 renders them for the agent
IMAGE_SHAPES = {"craftax-classic": (63, 63, 3), "craftax": (130, 110, 3)}


def image_shape(env: EnvConfig) -> tuple[int, int, int] | None:
    """The image the conv encoder unflattens the observation into (``None``: symbolic)."""
    return IMAGE_SHAPES[env.name] if env.obs == "pixels" else None


def gridworld_cpu(algo: str = "leo", **kw) -> TrainConfig:
    """CPU-scale gridworld settings [R]: a smaller network and batch than the Craftax defaults, a
    higher learning rate, per-environment resets (a gridworld reset is one random cell), γ = 0.9
    (with γ = 0.99 one step changes a value by 1 %, which a small sigmoid network resolves only
    after far more updates than a CPU run affords), and BatchRenorm's running statistics on a
    10-step horizon (momentum 0.9, 20 warm-up steps) instead of 0.999 / 1000: a CPU run has a
    few hundred gradient steps, so with 0.999 acting would use statistics still near their
    start (measured on the 5x5 test run: success 0.19 -> 0.38 with 0.99 / 100, 0.47 with
    0.9 / 20, 0.53 with LayerNorm; chosen on that training-seed run, not on the quick table)."""
    base = TrainConfig(algo=algo, env=EnvConfig("gridworld", size=10), total_timesteps=200_000,
                       num_envs=64, num_steps=16, minibatch_size=256, width=128, layers=2,
                       lr=3e-3, gamma=0.9, test_repeats=2, ppo_minibatch_size=256,
                       reset_ratio=1, brn_momentum=0.9, brn_warmup=20)
    return base.replace(**kw)
