"""Exact identities and invariants of the paper's maths (design note §8)."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from mtgrpo.core import (
    RatioPreservingSampler,
    TaskWeighter,
    clipped_pg_loss,
    delta_m,
    grpo_advantages,
    inflation,
    iwu_gradient,
    zero_gradient_mask,
)
from mtgrpo.simulate import simulate

# --- GRPO -----------------------------------------------------------------------------------

def test_advantages_hand_computed():
    r = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    a = grpo_advantages(r, eps=0.0 + 1e-12)
    s = np.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    np.testing.assert_allclose(a[0], [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s], rtol=1e-9)
    std1 = np.std([1, .1, .1, .1], ddof=1)
    np.testing.assert_allclose(a[1], (r[1] - 0.325) / std1, rtol=1e-9)
    np.testing.assert_array_equal(a[2], 0.0)
    np.testing.assert_allclose(a.mean(1), 0.0, atol=1e-12)
    # torch path agrees
    at = grpo_advantages(torch.tensor(r), eps=1e-12).numpy()
    np.testing.assert_allclose(at, a, rtol=1e-9)


def test_filters():
    rng = np.random.default_rng(0)
    r = rng.choice([0.0, 0.1, 1.0], size=(200, 4))
    r[:20] = 1.0
    r[20:40] = 0.1
    r[40:50] = 0.0
    zero = np.all(grpo_advantages(r) == 0.0, axis=1)
    # "constant" drops exactly the zero-advantage groups
    np.testing.assert_array_equal(zero_gradient_mask(r, "constant"), zero)
    # the authors' lenient filter drops all-0 and all-1 groups only: all-0.1 groups stay [C]
    len_ = zero_gradient_mask(r, "lenient")
    assert len_[:20].all() and len_[40:50].all() and not len_[20:40].any()
    np.testing.assert_array_equal(len_, np.all(r == 0, 1) | np.all(r == 1, 1))
    # strict also drops groups of only 0.1 / 0 rewards (all incorrect) that still carry advantage
    strict = zero_gradient_mask(r, "strict")
    assert strict[20:40].all() and (strict >= zero).all()
    assert (strict & ~zero).any()


def test_clipped_loss_hand_computed():
    logp_old = torch.zeros(1, 4)
    ratios = torch.tensor([[0.5, 1.0, 1.2, 1.5]])
    logp_new = ratios.log()
    mask = torch.tensor([[1, 1, 1, 0]])
    # positive advantage: min(r A, clip(r) A) -> per-token -A*min(r, clip(r, .8, 1.28))
    loss, per = clipped_pg_loss(logp_new, logp_old, torch.tensor([2.0]), mask, 0.2, 0.28)
    np.testing.assert_allclose(per[0].numpy(), [-1.0, -2.0, -2.4, 0.0], rtol=1e-6)
    assert float(loss) == pytest.approx((-1.0 - 2.0 - 2.4) / 3, rel=1e-6)
    # negative advantage: -A*max(...) -> per-token |A| * max(r, clip(r))
    _, per = clipped_pg_loss(logp_new, logp_old, torch.tensor([-1.0]), mask, 0.2, 0.28)
    np.testing.assert_allclose(per[0, :3].numpy(), [0.8, 1.0, 1.2], rtol=1e-6)
    # sequence aggregation: mean over tokens of each row, then rows
    loss_s, _ = clipped_pg_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, -1.0]),
                                torch.tensor([[1, 1, 1], [1, 0, 0]]), agg="seq")
    assert float(loss_s) == pytest.approx(0.0)


def test_clip_higher_gradient_vanishes_outside_range():
    ratios = torch.tensor([[0.7, 0.9, 1.1, 1.25, 1.3, 1.5]])
    lp = ratios.log().requires_grad_(True)
    mask = torch.ones(1, 6)
    loss, _ = clipped_pg_loss(lp, torch.zeros(1, 6), torch.tensor([1.0]), mask, 0.2, 0.28)
    loss.backward()
    g = lp.grad[0].numpy()
    # A > 0: gradient only while r < 1 + eps_high (the lower side is not clipped for A > 0)
    assert (g[:4] != 0).all() and (g[4:] == 0).all()
    lp.grad = None
    loss, _ = clipped_pg_loss(lp, torch.zeros(1, 6), torch.tensor([-1.0]), mask, 0.2, 0.28)
    loss.backward()
    g = lp.grad[0].numpy()
    # A < 0: gradient vanishes below 1 - eps_low only
    assert g[0] == 0 and (g[1:] != 0).all()


# --- IWU -----------------------------------------------------------------------------------

def test_iwu_gradient_zero_sum_and_equal_scores_fixed_point():
    z = np.array([0.2, 0.5, 0.3])
    g = iwu_gradient(z, np.array([0.3, -0.1, 0.7]))
    assert g.sum() == pytest.approx(0.0, abs=1e-15)
    w = TaskWeighter(3, lam=0.5, weight_decay=0.0, xi=np.log(z))
    w.observe_accuracy([0.4, 0.4, 0.4])
    before = w.z.copy()
    for _ in range(5):
        w.update([0.05, 0.05, 0.05])
    np.testing.assert_allclose(w.z, before, atol=1e-12)


def test_task_below_weighted_mean_gains_weight():
    w = TaskWeighter(3, lam=0.2, weight_decay=1e-5)
    w.observe_accuracy([0.9, 0.6, 0.1])
    z0 = w.z.copy()
    w.update([0.02, 0.02, 0.0])
    s = w.scores([0.02, 0.02, 0.0])
    low = s < z0 @ s
    assert low.tolist() == [False, False, True]
    assert w.z[2] > z0[2] and w.z[0] < z0[0]
    assert w.z.sum() == pytest.approx(1.0)


def test_improvement_clip_respected():
    w = TaskWeighter(2, lam=0.0, improvement_clip=0.1)
    np.testing.assert_allclose(w.scores([5.0, -3.0]), [0.1, -0.1])
    w.observe_accuracy([0.5, np.nan])
    np.testing.assert_allclose(w.J, [0.25, 0.0])  # zero-initialised EMA [C]; absent task keeps 0
    w.observe_accuracy([0.0, 0.4])
    np.testing.assert_allclose(w.J, [0.125, 0.2])
    f = TaskWeighter(2, acc_ema_init="first")  # the [R] option: the first observation sets it
    f.observe_accuracy([0.5, np.nan])
    assert f.J[0] == 0.5 and f.J[1] != f.J[1]
    f.observe_accuracy([0.0, 0.4])
    np.testing.assert_allclose(f.J, [0.25, 0.4])


def test_lambda_negative_rejected():
    with pytest.raises(ValueError):
        TaskWeighter(2, lam=-0.1)


def test_strict_minimax_collapses_iwu_does_not():
    J0, rates = [0.8, 0.5, 0.2], [0.05, 0.02, 0.01]
    mm = simulate(J0, rates, mode="minimax", steps=1500, learn=False)
    assert mm.z[-1].argmax() == 2 and mm.z[-1, 2] > 0.95  # all weight on the worst task
    iwu = simulate(J0, rates, mode="iwu", lam=0.2, steps=1500, learn=False, improvement_scale=20.0)
    zf = np.sort(iwu.z[-1])
    assert zf[-1] < 0.85 and zf[-2] > 0.1  # an interior equilibrium: two tasks keep real weight
    # the equilibrium equalises the scores s_k = I_k + λ J_k of the tasks that keep weight
    # (on average: constant-lr Adam keeps circling the fixed point)
    zbar = iwu.z[-500:].mean(0)
    s = np.clip(20.0 * np.array(rates) * zbar * (1 - np.array(J0)), -0.1, 0.1) + 0.2 * np.array(J0)
    kept = zbar > 0.1
    assert np.ptp(s[kept]) < 1e-3
    assert iwu.z[-1].argmax() == 2  # still favours the worst task


def test_weighter_state_roundtrip():
    w = TaskWeighter(3)
    w.observe_accuracy([0.1, 0.2, 0.3])
    w.update([0.01, 0.0, -0.01])
    w2 = TaskWeighter(3)
    w2.load_state_dict(w.state_dict())
    np.testing.assert_array_equal(w.update([0.0, 0.1, 0.0]), w2.update([0.0, 0.1, 0.0]))


# --- RP-Sampler -----------------------------------------------------------------------------

@dataclass
class G:
    task: int
    rewards: np.ndarray


class FakeDraw:
    """Task k accepts one group in every ``period[k]`` (deterministic); counts every draw."""

    def __init__(self, period, supply=None):
        self.period, self.seen, self.calls = period, [0] * len(period), 0
        self.supply = supply

    def __call__(self, counts):
        self.calls += 1
        out = []
        for k, c in enumerate(counts):
            gs = []
            for _ in range(int(c)):
                ok = self.period[k] and self.seen[k] % self.period[k] == 0
                if self.supply is not None and self.seen[k] >= self.supply:
                    ok = False
                self.seen[k] += 1
                gs.append(G(k, np.array([1.0, 0.0]) if ok else np.array([0.0, 0.0])))
            out.append(gs)
        return out


def test_inflation_bounds():
    np.testing.assert_allclose(inflation(np.array([0.0, 0.5, 0.9, 1.0]), 5.0), [1, 2, 5, 5])


@pytest.mark.parametrize("seed", range(5))
def test_rps_meets_quotas_exactly(seed):
    rng = np.random.default_rng(seed)
    s = RatioPreservingSampler(3, M_os=3.0, N_rs=10, rho=np.array([0.0, 0.5, 0.75]))
    z = np.array([0.2, 0.3, 0.5])
    batch, st = s.sample(z, 32, FakeDraw([1, 2, 4]), rng)
    assert len(batch) == 32 and st.requested.sum() == 32
    np.testing.assert_array_equal(st.realized, st.requested)
    np.testing.assert_array_equal(np.bincount([g.task for g in batch], minlength=3), st.requested)
    assert all(not zero_gradient_mask(g.rewards[None])[0] for g in batch)
    # ρ moved towards this step's filter rates (0, 1/2, 3/4 up to rounding)
    assert st.filter_rate[0] == 0.0 and 0.3 < st.filter_rate[1] < 0.7


def test_rps_stops_at_round_limit_and_returns_all_accepted():
    draw = FakeDraw([1, 0, 2], supply=2)  # task 1 never accepts; tasks 0 and 2 run dry
    s = RatioPreservingSampler(3, M_os=1.0, N_rs=3)
    batch, st = s.sample(np.array([0.3, 0.4, 0.3]), 20, draw, np.random.default_rng(0))
    assert st.rounds == 3 and draw.calls == 3  # N_rs generation rounds in all [C max_num_gen_batches]
    assert len(batch) == st.accepted.sum() <= 20
    assert st.realized[1] == 0


def test_inflation_shifts_the_first_round_towards_high_filter_tasks():
    """m_k = 1/(1 − ρ_k) multiplies the draw probabilities: with ρ = (0, 0.75) and z uniform the
    first round draws task 1 four times as often; without inflation, equally often."""
    class Count(FakeDraw):
        def __call__(self, counts):
            self.first = getattr(self, "first", np.asarray(counts))
            return super().__call__(counts)

    on, off = np.zeros(2), np.zeros(2)
    rng = np.random.default_rng(0)
    for _ in range(100):
        for inflate, acc in ((True, on), (False, off)):
            d = Count([1, 4])
            RatioPreservingSampler(2, M_os=3.0, N_rs=1, rho=np.array([0.0, 0.75]),
                                   inflate=inflate).sample(np.array([0.5, 0.5]), 16, d, rng)
            acc += d.first
    assert on[1] / on.sum() == pytest.approx(0.8, abs=0.02)  # 4 / (1 + 4)
    assert off[1] / off.sum() == pytest.approx(0.5, abs=0.02)
    # and it pays off: with inflation the high-filter task's quota is met in one round more often
    met = {True: 0, False: 0}
    for _ in range(100):
        for inflate in (True, False):
            _, st = RatioPreservingSampler(2, M_os=3.0, N_rs=1, rho=np.array([0.0, 0.75]),
                                           inflate=inflate).sample(np.array([0.5, 0.5]), 16,
                                                                   FakeDraw([1, 4]), rng)
            met[inflate] += int(st.realized[1] >= st.requested[1])
    assert met[True] > met[False] + 20


def test_dynamic_sampling_without_quota_skews_shares():
    """No RPS: the mixture is set before filtering, so a high-filter task is under-represented."""
    rng = np.random.default_rng(0)
    shares_q, shares_d = [], []
    for _ in range(200):
        z = np.array([0.5, 0.5])
        b, _ = RatioPreservingSampler(2, quota=False).sample(z, 16, FakeDraw([1, 4]), rng)
        shares_d.append(np.mean([g.task == 1 for g in b]))
        b, _ = RatioPreservingSampler(2, quota=True, rho=np.array([0.0, 0.75]), inflate=True).sample(
            z, 16, FakeDraw([1, 4]), rng)
        shares_q.append(np.mean([g.task == 1 for g in b]))
    assert abs(np.mean(shares_q) - 0.5) < 0.03  # 3.4 sigma of the multinomial draw
    assert np.mean(shares_d) < 0.35


def test_delta_m_of_self_is_zero():
    assert delta_m([0.3, 0.5], [0.3, 0.5]) == 0.0
    assert delta_m([0.6, 0.5], [0.3, 0.5]) == pytest.approx(50.0)
