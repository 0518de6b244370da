"""The reproduction's design (issue 50, items 4-5): equal rollouts per step for every arm, the dev
rules (task mix by zero-advantage rates, lr per arm), prompt-level intervals nested in seeds, and
the claims when quick runs the equal-rollout experiment alone."""

import copy

import numpy as np
import pytest
from mtgrpo.config import TinyPolicyConfig, TrainConfig
from mtgrpo.experiments import ARMS, arm_config, choose_task_mix, run_method
from mtgrpo.io import build_tiny, sft_warmstart
from mtgrpo.report import claim_checks, prompt_level
from mtgrpo.tasks import Task, make_synthetic
from mtgrpo.trainer import MTGRPOTrainer

from icml26_shared import Results

TINY = TinyPolicyConfig(d=16, layers=1, heads=2, ctx=24, sft_steps=30, sft_batch=32)


@pytest.fixture(scope="module")
def tasks():
    out = []
    for n in ("copy:easy", "sort:easy"):
        t = make_synthetic(n, n_train=200, n_test=20, n_dev=20)
        out.append(t)
    return out


@pytest.fixture(scope="module")
def warm(tasks):
    pol = build_tiny(0, TINY)
    sft_warmstart(pol, tasks, TINY, seed=0)
    return copy.deepcopy(pol.model.state_dict())


def _trainer(tasks, warm, cfg):
    pol = build_tiny(0, TINY)
    pol.model.load_state_dict(warm)
    return MTGRPOTrainer(pol, tasks, cfg, device="cpu")


def test_equal_rollout_arms_generate_the_same_prompts_every_step(tasks, warm):
    """The headline's premise: GRPO, DAPO, IWU-only and MT-GRPO generate exactly M_os·B prompts
    per step; IWU-only and MT-GRPO differ in the method alone (how the B groups are picked)."""
    base = TrainConfig(batch_prompts=4, group_size=4, max_new_tokens=5, N_rs=10, seed=3)
    gen = {}
    for m in ARMS:
        tr = _trainer(tasks, warm, arm_config(m, base, equal=True))
        gen[m] = [tr.step()["prompts_generated"] for _ in range(2)]
    assert gen == {m: [12, 12] for m in ARMS}
    assert arm_config("iwu_only", base, True).with_(method="mtgrpo") == \
        arm_config("mtgrpo", base, True)
    assert arm_config("mtgrpo", base, False).N_rs == 10  # equal steps: the authors' N_rs


def test_evaluate_prompts_are_the_units_of_evaluate(tasks, warm):
    tr = _trainer(tasks, warm, TrainConfig(group_size=2, max_new_tokens=5, n_val=3))
    per = tr.evaluate_prompts(n_prompts=7, seed=11)
    agg = tr.evaluate(n_prompts=7, seed=11)
    assert {n: len(a) for n, a in per.items()} == {t.name: 7 for t in tasks}
    for n, a in per.items():
        assert float(np.mean(a)) == pytest.approx(agg[n], abs=1e-12)
        assert set(np.round(a * 3).tolist()) <= {0.0, 1.0, 2.0, 3.0}  # k of 3 samples correct


def test_dev_runs_never_evaluate_on_test(tasks, warm):
    """The lr sweep's runs (``test=False``) read dev only: a task set without test rows works."""
    no_test = [Task(t.name, t.train, [], t.verifier, t.meta, t.dev) for t in tasks]
    cfg = TrainConfig(method="dapo", steps=2, batch_prompts=3, group_size=3, max_new_tokens=5,
                      eval_every=1, n_val=1)
    r = run_method("dapo", warm, no_test, cfg, lambda: build_tiny(0, TINY), 4, 4, "cpu",
                   test=False)
    assert r["final"] is None and r["curve"] == []
    assert [s for s, _ in r["dev_curve"]] == [0, 1, 2] and set(r["dev"]) == {"copy:easy", "sort:easy"}


def test_task_mix_rule_needs_a_near_solved_and_a_hard_task_then_the_widest_spread():
    prof = [
        {"dev_acc": [0.9, 0.7, 0.3], "zero_adv_rate": [0.9, 0.1, 0.4]},  # no hard task
        {"dev_acc": [0.3, 0.7, 0.05], "zero_adv_rate": [0.4, 0.2, 0.8]},  # eligible, spread 0.6
        {"dev_acc": [0.65, 0.5, 0.1], "zero_adv_rate": [0.5, 0.3, 0.9]},  # eligible, spread 0.6
        {"dev_acc": [0.9, 0.1], "zero_adv_rate": [0.9, 0.5]},  # eligible, spread 0.4
    ]
    assert choose_task_mix(prof) == 1  # a tie goes to the first listed
    prof[2]["zero_adv_rate"][1] = 0.2
    assert choose_task_mix(prof) == 2
    assert choose_task_mix(prof[:1]) == 0  # none eligible: the widest spread


def _runs(gain, seeds=(0, 1, 2, 3), n=40, rng=None):
    rng = rng or np.random.default_rng(0)
    runs = {m: [] for m in ARMS}
    for i, _ in enumerate(seeds):
        for m in ARMS:
            hard = np.clip(0.2 + (gain if m == "mtgrpo" else 0) + 0.05 * i
                           + rng.normal(0, 0.1, n), 0, 1)
            easy = np.clip(0.8 + rng.normal(0, 0.1, n), 0, 1)
            runs[m].append({"final_prompts_acc": {"easy": easy, "hard": hard}})
    return runs


def test_prompt_level_interval_over_prompts_nested_in_seeds():
    res = Results(package="mtgrpo", version="0", scale="quick", seed=0)
    seeds = [0, 1, 2, 3]
    out = prompt_level(res, "equal-rollout", _runs(0.3), ["easy", "hard"], seeds, "hard")
    pi = out[("mtgrpo", "iwu_only")]["hard"]
    assert pi.method == "cluster" and pi.n == 160 and 0.2 < pi.low < 0.3 < pi.high < 0.4
    null = out[("iwu_only", "dapo")]["hard"]
    assert null.low < 0 < null.high
    row = res.get("equal-rollout", "mtgrpo-iwu_only", "acc_hard_paired_prompts")
    assert row.extra["hard_task"] is True and row.extra["interval"] == "cluster"


def _summary(worst):
    return {m: {"worst": np.asarray(w), "avg": np.asarray(w) + 0.3, "steps": np.full(len(w), 60.0),
                "gap": np.full(len(w), 0.01), "reached": 0, "gen": 48.0}
            for m, w in worst.items()}


@pytest.mark.parametrize("gain,status", [(0.3, "held"), (0.0, "not held")])
def test_rps_claim_at_quick_uses_the_hard_tasks_prompts(gain, status):
    """At quick only the equal-rollout experiment runs: the equal-step claims are 'not
    evaluated' (they run at --scale long) and MT-GRPO vs IWU-only is decided by the hard task's
    prompt-level interval nested in seeds."""
    from mtgrpo.registry import DESCRIPTOR

    seeds = [0, 1, 2, 3]
    runs = _runs(gain)
    res = Results(package="mtgrpo", version="0", scale="quick", seed=0)
    paired = prompt_level(res, "equal-rollout", runs, ["easy", "hard"], seeds, "hard")
    worst = {m: [float(np.mean(r["final_prompts_acc"]["hard"])) for r in rs] for m, rs in runs.items()}
    checks = {c.claim_id: c for c in claim_checks(
        DESCRIPTOR, {}, _summary(worst), {"hard": "hard", "threshold": 0.5, "seeds": 4}, paired)}
    assert set(checks) == {c.id for c in DESCRIPTOR.claims}
    assert checks["worst_vs_iwu_only"].status == status
    assert "nested in 4 seeds" in checks["worst_vs_iwu_only"].note
    for cid in ("worst_vs_grpo", "worst_vs_dapo"):
        assert checks[cid].status == "not evaluated" and "--scale long" in checks[cid].note
    assert checks["rps_share"].kind == "check"


def test_equal_rollout_rps_keeps_quotas_iwu_only_does_not(tasks, warm):
    """The one difference between the two arms at equal rollouts: with tasks filtered at
    different rates (0% vs 40% of groups with zero advantage) and supply enough in one round,
    MT-GRPO's batch holds each task's requested count exactly, IWU-only's holds what survived
    the filter in proportion (the hard task under-represented)."""
    from types import SimpleNamespace

    base = TrainConfig(batch_prompts=16, group_size=4, seed=5)
    keep = {0: 1.0, 1: 0.6}
    gap = {}
    for m in ("mtgrpo", "iwu_only"):
        tr = _trainer(tasks, warm, arm_config(m, base, True))
        rng, draws = np.random.default_rng(0), np.random.default_rng(1)

        def draw(counts, draws=draws):
            return [[SimpleNamespace(task=k, rewards=np.array([1.0, 0, 0, 0]) if
                                     draws.random() < keep[k] else np.zeros(4))
                     for _ in range(int(c))] for k, c in enumerate(counts)]

        z = np.array([0.5, 0.5])
        shares, req = [], []
        for _ in range(200):
            batch, st = tr.sampler.sample(z, 16, draw, rng)
            assert st.generated.sum() == 48 and st.rounds == 1
            shares.append(np.bincount([g.task for g in batch], minlength=2) / len(batch))
            req.append(st.requested / 16)
        gap[m] = float(np.abs(np.mean(shares, 0) - np.mean(req, 0)).max())
    assert gap["mtgrpo"] < 0.01  # quotas met: share = z
    assert gap["iwu_only"] > 0.08  # 0.5·0.6 / (0.5 + 0.5·0.6) = 0.375 for the hard task
