"""Two methods' final success over all goals, side by side (``leo-craftax compare``).

Each method is a set of runs: ``{seed: per-goal success [K]}`` at the final evaluation point, as
``train`` writes it into a checkpoint's metadata (``io.load_runs``). ``check_comparable`` refuses
runs that are not the same experiment (environment, goal set, training env steps, evaluation
protocol, seeds); ``compare_runs`` gives, with no I/O: per seed the mean success over goals; per
method the mean and standard deviation over seeds (``ddof=1``); and two paired 95% bootstrap
intervals of A − B (``icml26_shared.eval.paired_interval``): over seeds paired by seed number
(with at least 2 seeds) and over goals (each goal's success averaged over seeds, paired by goal).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from icml26_shared import UserError

# what must be equal for two methods' success to be comparable: the environment, the training
# budget (env steps actually trained) and the evaluation protocol of the final point
SAME = ("env", "env_steps", "test_steps", "test_repeats")


def describe(cfg: dict) -> dict:
    """The fields of a checkpoint's config (``TrainConfig.to_dict()``) ``check_comparable`` reads,
    plus the method's label."""
    label = cfg["algo"]
    from .config import LEGACY_REPLACE

    if cfg["algo"] == "pqn_her":
        legacy = cfg.get("her_granularity") == LEGACY_REPLACE  # a 0.3 run: half the goals replaced
        label += f" ({cfg['her_mode']}{', 0.3 replace-half' if legacy else ''})"
    elif cfg["algo"].startswith("dual_leo"):
        label += f" ({cfg['distill_goals']})"
    from .config import TrainConfig

    updates = TrainConfig.from_dict(cfg).num_updates  # what the run trained, not what was asked
    return {"label": label, "env": cfg["env"], "env_steps": updates * cfg["num_steps"] * cfg["num_envs"],
            "test_steps": cfg["test_steps"], "test_repeats": cfg["test_repeats"]}


def check_comparable(a: dict, b: dict) -> None:
    """``a``, ``b``: ``{"describe": describe(cfg), "goal_names": [...], "success": {seed: [K]}}``
    of each method (``io.load_runs``). ``UserError`` unless both are the same experiment."""
    if list(a["goal_names"]) != list(b["goal_names"]):
        raise UserError(f"the methods were evaluated on different goal sets "
                        f"({len(a['goal_names'])} vs {len(b['goal_names'])} goals, or other goals)")
    for field in SAME:
        if a["describe"][field] != b["describe"][field]:
            raise UserError(f"the methods differ in {field}: {a['describe'][field]!r} vs "
                            f"{b['describe'][field]!r} (compare runs of the same experiment)")
    if sorted(a["success"]) != sorted(b["success"]):
        raise UserError(f"the methods were run on different seeds ({sorted(a['success'])} vs "
                        f"{sorted(b['success'])}): pass the runs of the same seeds")


def _spread(v: np.ndarray) -> dict:
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else None}


def compare_runs(a: Mapping[int, np.ndarray], b: Mapping[int, np.ndarray], *,
                 n_resamples: int = 9999) -> dict:
    """Figures of A vs B; ``a``, ``b``: ``{seed: per-goal success [K]}`` on the same seeds and
    goals. ``seeds``: the paired seeds, sorted; ``per_seed``: mean success over goals per seed;
    ``a`` / ``b``: ``{"mean", "std"}`` over seeds (``std`` ``None`` with one seed); ``diff_over_seeds`` (``None`` with one seed) and
    ``diff_over_goals``: ``{"mean", "low", "high", "n"}`` of A − B, 95% paired bootstrap."""
    from icml26_shared.eval import paired_interval

    if sorted(a) != sorted(b) or not a:
        raise ValueError("a and b must hold success on the same, non-empty set of seeds")
    seeds = sorted(a)
    sa = np.stack([np.asarray(a[s], float) for s in seeds])  # [seeds, K]
    sb = np.stack([np.asarray(b[s], float) for s in seeds])
    if sa.shape != sb.shape:
        raise ValueError(f"per-goal success of different shapes: {sa.shape} vs {sb.shape}")
    per_a, per_b = sa.mean(1), sb.mean(1)

    def interval(x, y):
        ci = paired_interval(x, y, n_resamples=n_resamples)
        return {"mean": ci.mean, "low": ci.low, "high": ci.high, "n": ci.n}

    return {"seeds": seeds, "num_goals": int(sa.shape[1]),
            "per_seed": {"a": per_a.tolist(), "b": per_b.tolist()},
            "a": _spread(per_a), "b": _spread(per_b),
            "diff_over_seeds": interval(per_a, per_b) if len(seeds) >= 2 else None,
            "diff_over_goals": interval(sa.mean(0), sb.mean(0))}


def report(fig: dict, label_a: str, label_b: str, what: str) -> list[str]:
    """The lines ``leo-craftax compare`` prints for ``compare_runs``' figures."""
    lines = [f"A = {label_a}, B = {label_b}; {what}",
             f"{'seed':>6} {'A':>8} {'B':>8} {'A - B':>8}   (mean success over "
             f"{fig['num_goals']} goals)"]
    for s, x, y in zip(fig["seeds"], fig["per_seed"]["a"], fig["per_seed"]["b"], strict=True):
        lines.append(f"{s:>6} {x:>8.4f} {y:>8.4f} {x - y:>+8.4f}")
    n = len(fig["seeds"])
    def ms(m):
        std = fig[m]["std"]
        return f"{fig[m]['mean']:.4f} ± " + ("n/a" if std is None else f"{std:.4f}")

    lines.append(f"over {n} seed{'s' * (n > 1)} (mean ± std, ddof 1): A {ms('a')}, B {ms('b')}")
    d = fig["diff_over_seeds"]
    lines.append("A - B over seeds (paired by seed, 95% bootstrap): " + (
        "needs at least 2 seeds" if d is None else
        f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}], n = {d['n']}"
        + (" (few pairs: a bootstrap interval cannot be wider than their range)"
           if d["n"] < 5 else "")))
    d = fig["diff_over_goals"]
    lines.append(f"A - B over goals (each goal's success averaged over seeds, paired by goal, 95% "
                 f"bootstrap): {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}], n = {d['n']}")
    return lines


def compare_live(a: Mapping[int, float], b: Mapping[int, float], seeds) -> dict:
    """The authors' live success rate (after the last update) of A and B on ``seeds``: per seed,
    the mean over seeds, and A − B over seeds paired by seed (``None`` with one seed)."""
    from icml26_shared.eval import paired_interval

    la = np.array([a[s] for s in seeds], float)
    lb = np.array([b[s] for s in seeds], float)
    ci = paired_interval(la, lb) if len(seeds) >= 2 else None
    return {"per_seed": {"a": la.tolist(), "b": lb.tolist()},
            "a": _spread(la), "b": _spread(lb),
            "diff_over_seeds": None if ci is None else
            {"mean": ci.mean, "low": ci.low, "high": ci.high, "n": ci.n}}


def report_live(live: dict) -> list[str]:
    """The lines ``compare`` adds for ``compare_live``' figures."""
    a, b = live["per_seed"]["a"], live["per_seed"]["b"]
    d = live["diff_over_seeds"]
    return [
        "live success (the authors' training metric: first tries of the commanded goals, counts "
        "decayed by 0.999 per update, mean over all goals), after the last update:",
        "  per seed A " + " ".join(f"{x:.4f}" for x in a) + ", B " + " ".join(f"{x:.4f}" for x in b),
        f"  mean A {live['a']['mean']:.4f}, B {live['b']['mean']:.4f}; A - B over seeds: "
        + ("needs at least 2 seeds" if d is None else
           f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}], n = {d['n']}")]
