"""The trainer on a tiny policy: log-probs through token_logprobs, RPS quotas in real training,
determinism, resume == uninterrupted, and users' mistakes."""

import numpy as np
import pytest
import torch
from mtgrpo.config import TinyPolicyConfig, TrainConfig
from mtgrpo.io import build_tiny, load_task, sft_warmstart
from mtgrpo.policy import left_pad, response_logprobs
from mtgrpo.tasks import Task, make_synthetic
from mtgrpo.trainer import MTGRPOTrainer

from icml26_shared import UserError

TINY = TinyPolicyConfig(d=16, layers=1, heads=2, ctx=24, sft_steps=30, sft_batch=32)


@pytest.fixture(scope="module")
def tasks():
    return [make_synthetic(n, n_train=200, n_test=20) for n in ("copy:easy", "sort:easy", "add:easy")]


@pytest.fixture(scope="module")
def warm(tasks):
    torch.manual_seed(0)
    pol = build_tiny(0, TINY)
    sft_warmstart(pol, tasks, TINY, seed=0)
    return {k: v.clone() for k, v in pol.model.state_dict().items()}


def make(tasks, warm, **kw):
    pol = build_tiny(0, TINY)
    pol.model.load_state_dict(warm)
    cfg = TrainConfig(**{"batch_prompts": 6, "group_size": 4, "max_new_tokens": 5, "N_rs": 2,
                         "lr": 1e-3, **kw})
    return MTGRPOTrainer(pol, tasks, cfg)


def test_response_logprobs_use_kernel_and_match_log_softmax(monkeypatch):
    import mtgrpo.policy as P

    calls = []
    real = P.token_logprobs
    monkeypatch.setattr(P, "token_logprobs", lambda lg, ids: calls.append(1) or real(lg, ids))
    pol = build_tiny(1, TINY)
    ids, pm = left_pad([[11, 3, 4], [12, 5]], 0)
    resp = torch.tensor([[5, 6, 13], [7, 13, 0]])
    rm = torch.tensor([[1, 1, 1], [1, 1, 0]])
    lp = response_logprobs(pol.model, ids, pm, resp, rm)
    assert calls, "token_logprobs was not used"
    full = torch.cat([ids, resp], 1)
    logits = pol.model(full, torch.cat([pm, rm], 1))
    ref = torch.log_softmax(logits[:, 2:-1].double(), -1).gather(-1, resp[..., None]).squeeze(-1)
    torch.testing.assert_close(lp.double(), ref * rm, rtol=1e-5, atol=1e-6)


def test_same_seed_same_trajectory(tasks, warm):
    a, b = make(tasks, warm, method="mtgrpo"), make(tasks, warm, method="mtgrpo")
    for _ in range(2):
        ra, rb = a.step(), b.step()
        assert ra["z"] == rb["z"] and ra["share"] == rb["share"] and ra["acc"] == rb["acc"]


@pytest.mark.parametrize("method", ["mtgrpo", "sec"])
def test_resume_equals_uninterrupted(tasks, warm, tmp_path, method):
    full = make(tasks, warm, method=method)
    for _ in range(4):
        full.step()
    part = make(tasks, warm, method=method)
    for _ in range(2):
        part.step()
    part.save(tmp_path / "ck.pt")
    resumed = make(tasks, warm, method=method)
    resumed.load(tmp_path / "ck.pt")
    for _ in range(2):
        resumed.step()
    assert [h["z"] for h in resumed.history] == [h["z"] for h in full.history]
    np.testing.assert_array_equal(resumed.z, full.z)
    for (n, p), q in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=n)


def _parity(resp, ex):  # mixed rewards from any policy: most groups carry an advantage
    return float(len(resp) % 2)


def _parity_tasks(tasks):
    out = []
    for t in tasks:
        out.append(Task(t.name, t.train, t.test, _parity))
    return out


def test_rps_quotas_hold_in_training(tasks, warm):
    """A policy that solves some prompts (half the groups are mixed): every step's batch is full
    and its task counts are exactly the requested quotas."""
    tr = make(_parity_tasks(tasks), warm, method="mtgrpo", N_rs=10, batch_prompts=8)
    for _ in range(3):
        rec = tr.step()
        assert rec["batch_size"] == 8
        assert np.array(rec["share"]) * 8 == pytest.approx(np.array(rec["requested"]))
        assert rec["rounds"] >= 1 and min(rec["zero_grad_rate"]) >= 0


def test_sampling_and_scoring_use_the_same_temperature(tasks, warm):
    """Inverse-CDF sampling from evenly spaced uniforms reproduces the sampling distribution to
    1/N; the trainer's log-probs (the ones in the ratio) must be that distribution at T = 0.5."""
    from mtgrpo.policy import generate

    tr = make(tasks, warm, temperature=0.5)
    with torch.no_grad():  # logits of std ~1.2: neither flat nor one-hot, so T matters
        tr.model.head.weight.copy_(torch.randn(tr.model.head.weight.shape,
                                               generator=torch.Generator().manual_seed(0)) * 0.3)
    prompt = tr.tok.encode("c12=")
    N = 4000
    ids, pm = left_pad([prompt] * N, 0)
    u = ((torch.arange(N, dtype=torch.float64) + 0.5) / N)[:, None]
    resp, _ = generate(tr.model, ids, pm, 1, tr.tok.eos_id, 0, u, temperature=0.5)
    freq = torch.bincount(resp[:, 0], minlength=len(tr.tok)).double() / N
    V = len(tr.tok)
    ids1, pm1 = left_pad([prompt] * V, 0)
    mb = {"ids": ids1, "pmask": pm1, "resp": torch.arange(V)[:, None], "mask": torch.ones(V, 1)}
    with torch.no_grad():
        p = tr._logp(mb).exp()[:, 0].double()
    assert 0.2 < float(p.max()) < 0.95
    torch.testing.assert_close(p, freq, rtol=0, atol=2.0 / N)
    tr1 = make(tasks, warm, temperature=1.0)  # T = 1 scoring of the same model is different
    tr1.model.load_state_dict(tr.model.state_dict())
    with torch.no_grad():
        assert float((tr1._logp(mb).exp()[:, 0].double() - freq).abs().max()) > 0.05


def test_iwu_improvement_is_old_minus_new_loss_per_task(tasks, warm):
    """Inside the trainer: the improvement fed to IWU is, per task, the sum over its sequences
    of the token-mean clipped loss before the optimizer step minus after it."""
    import copy

    from mtgrpo.core import clipped_pg_loss

    tr = make(_parity_tasks(tasks), warm, method="mtgrpo", minibatches=1, lr=3e-2)
    groups = [g for per in tr._draw(np.array([3, 3, 0])) for g in per]
    adv = [torch.as_tensor(((g.rewards - g.rewards.mean()) / (g.rewards.std(ddof=1) + 1e-6)),
                           dtype=torch.float32) for g in groups]
    assert any(float(a.abs().sum()) > 0 for a in adv)
    theta0 = copy.deepcopy(tr.model.state_dict())
    seen = []
    real = tr.weighter.update
    tr.weighter.update = lambda imp: seen.append(np.array(imp)) or real(imp)
    tr._update(groups, adv)
    theta1 = copy.deepcopy(tr.model.state_dict())

    def task_losses(state, old=None):
        tr.model.load_state_dict(state)
        out, lps = np.zeros(3), []
        with torch.no_grad():
            for g, a in zip(groups, adv, strict=True):
                n = len(g.rewards)
                ids, pm = left_pad([g.prompt] * n, 0)
                lp = response_logprobs(tr.model, ids, pm, g.resp, g.resp_mask)
                lps.append(lp)
                o = lp if old is None else old[len(lps) - 1]
                _, per = clipped_pg_loss(lp, o, a, g.resp_mask, 0.2, 0.28)
                out[g.task] += float((per.sum(-1) / g.resp_mask.sum(-1).clamp_min(1)).sum())
        return out, lps

    before, old = task_losses(theta0)
    after, _ = task_losses(theta1, old)
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], before - after, rtol=1e-4, atol=1e-6)
    assert seen[0][2] == 0.0  # an absent task has no improvement
    assert (before - after)[:2].sum() > 0  # a descent step lowers the loss it descends on


def test_micro_batches_and_grad_accum_give_the_same_step(tasks, warm):
    ref = make(_parity_tasks(tasks), warm, method="mtgrpo")
    mic = make(_parity_tasks(tasks), warm, method="mtgrpo", micro_batch=3)
    acc = make(_parity_tasks(tasks), warm, method="mtgrpo", grad_accum=2)
    grads = {}
    for name, tr in (("ref", ref), ("mic", mic), ("acc", acc)):
        real = tr.opt.step

        def step(real=real, tr=tr, name=name):  # the accumulated gradient of each mini-batch
            grads.setdefault(name, []).append([p.grad.clone() for p in tr.model.parameters()])
            return real()

        tr.opt.step = step
        tr.step()
    assert len(grads["ref"]) == 4
    for other in ("mic", "acc"):
        for gr, go in zip(grads["ref"], grads[other], strict=True):
            for p, q in zip(gr, go, strict=True):
                torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose({"mic": mic, "acc": acc}[other].z, ref.z, rtol=0, atol=1e-5)


def test_trainer_puts_the_model_on_cuda_when_present(tasks, warm, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pol = build_tiny(0, TINY)
    moved = []
    pol.model.to = lambda d: moved.append(d) or pol.model
    tr = MTGRPOTrainer(pol, tasks, TrainConfig())
    assert tr.device.type == "cuda" and moved and torch.device(moved[0]).type == "cuda"
    cpu = build_tiny(0, TINY)
    assert MTGRPOTrainer(cpu, tasks, TrainConfig(), device="cpu").device.type == "cpu"


def test_iwu_moves_weights_and_measures_improvement(tasks, warm):
    tr = make(tasks, warm, method="mtgrpo")
    rec = tr.step()
    assert not np.allclose(tr.z, 1 / 3)
    assert np.isfinite(rec["improvement"]).all()
    g = make(tasks, warm, method="grpo")
    g.step()
    np.testing.assert_allclose(g.z, 1 / 3)


def test_evaluate_does_not_touch_training_stream(tasks, warm):
    a, b = make(tasks, warm), make(tasks, warm)
    a.evaluate(n_prompts=3)
    assert a.step()["z"] == b.step()["z"]


def test_verifier_that_raises_is_a_user_error(tasks, warm):
    def bad(resp, ex):
        raise RuntimeError("boom")

    t = Task("bad", tasks[0].train, tasks[0].test, bad)
    tr = make([t], warm)
    with pytest.raises(UserError, match="verifier of task 'bad' raised RuntimeError"):
        tr.step()


def test_bad_inputs():
    with pytest.raises(UserError, match="unknown task"):
        make_synthetic("nope")
    with pytest.raises(UserError, match="lam"):
        TrainConfig(lam=-0.1)
    with pytest.raises(UserError, match="unknown method"):
        TrainConfig(method="ppo")
    with pytest.raises(UserError, match="empty training set"):
        Task("e", [], [], lambda r, e: 0.0)


def test_local_jsonl_task(tmp_path):
    p = tmp_path / "qa.jsonl"
    p.write_text("".join(f'{{"prompt": "c{i:03d}=", "answer": "{i:03d}"}}\n' for i in range(20)))
    t = load_task(f"mine={p}", verifier="digits")
    assert t.name == "mine" and len(t.train) == 18 and len(t.test) == 2
    assert t.verifier("005;", {"answer": "005"}) == 1.0
    assert t.verifier("006;", {"answer": "005"}) == 0.1
    assert t.verifier("x", {"answer": "005"}) == 0.0
    assert load_task(f"mine={p}@contains").verifier("the 005 one", {"answer": "005"}) == 1.0
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(UserError):
        load_task(str(empty))


def test_trainer_moves_weight_toward_the_least_accurate_task(tasks, warm):
    """The λ·J term in our own trainer (mutant lambda-j-sign-flipped-own-trainer): with the
    improvement clipped to 0, s_k = λ·J_k alone, so one step must move weight toward the task the
    trainer measured as least accurate."""
    tr = make(tasks, warm, method="mtgrpo", lam=1.0, improvement_clip=0.0, acc_ema_init="first")
    tr.step()
    J, z = tr.weighter.J, tr.z
    assert np.isfinite(J).all() and J.max() > J.min(), J
    assert z[np.argmax(J)] == z.min() < 1 / 3 < z[np.argmin(J)], (J, z)


def _group(task, rewards):
    from mtgrpo.trainer import Group

    r = np.asarray(rewards, np.float64)
    return Group(task, {}, [1], torch.zeros(len(r), 1, dtype=torch.long), torch.ones(len(r), 1), r)


def test_j_observes_the_accepted_groups_or_each_round(tasks, warm):
    """acc_source: 'accepted' = accuracy of the batch's groups that pass the filter (a planted
    batch: task 0 has one all-correct group, dropped by the strict filter, and one 1/4 group);
    'round' = one observation per generation round, pre-filter (the authors' code)."""
    batch = [_group(0, [1, 1, 1, 1]), _group(0, [1, 0, 0, 0]), _group(2, [1, 1, 0, 0])]
    tr = make(tasks, warm, method="mtgrpo", acc_source="accepted")
    (obs,) = tr._acc_observations(batch, np.full(3, 0.9))
    np.testing.assert_allclose(obs, [0.25, np.nan, 0.5])
    tr = make(tasks, warm, method="mtgrpo", acc_source="generated")
    assert tr._acc_observations(batch, np.full(3, 0.9))[0].tolist() == [0.9] * 3
    # in training: J = the last observation (EMA decay 0); accepted groups are strictly mixed
    tr = make(_parity_tasks(tasks), warm, method="mtgrpo", acc_source="accepted", acc_ema=0.0,
              N_rs=4)
    rec = tr.step()
    (obs,) = rec["acc_observed"]
    seen = ~np.isnan(obs)
    assert seen.any() and np.all((np.array(obs)[seen] > 0) & (np.array(obs)[seen] < 1)), obs
    np.testing.assert_allclose(np.array(rec["J"])[seen], np.array(obs)[seen])
    tr = make(_parity_tasks(tasks), warm, method="mtgrpo", acc_source="round", acc_ema=0.0, N_rs=4)
    rec = tr.step()
    assert len(rec["acc_observed"]) == rec["rounds"]
    last = np.array(rec["acc_observed"][-1])
    np.testing.assert_allclose(np.array(rec["J"])[~np.isnan(last)], last[~np.isnan(last)])


def test_unfillable_quota_warns_once_per_task_and_is_recorded(tasks, warm):
    """A task no rollout can solve (its strict-filter groups are all wrong): RPS spends every
    round on it each step; after unfilled_warn_steps steps running, one warning for that task
    only, and every step's record names it."""
    ts = _parity_tasks(tasks)
    ts[1] = Task(ts[1].name, ts[1].train, ts[1].test, lambda resp, ex: 0.0)
    tr = make(ts, warm, method="mtgrpo", N_rs=2, unfilled_warn_steps=2)
    with pytest.warns(RuntimeWarning, match="sort:easy") as got:
        recs = [tr.step() for _ in range(4)]
    mine = [w for w in got if "RPS quota" in str(w.message)]
    assert len(mine) == 1 and "sort:easy" in str(mine[0].message), [str(w.message) for w in mine]
    assert all("sort:easy" in r["unfilled"] for r in recs[1:] if r["requested"][1] > 0)
