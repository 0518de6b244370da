"""The paper's exact identities and failure modes, in fp64 on small random matrices."""

from __future__ import annotations

import math

import pytest
import torch
from orthomerge import core
from orthomerge.baselines import merge_deltas
from orthomerge.config import RULES, DecoupleConfig, OFTMergeConfig

from icml26_shared import UserError


def rand_skew(*shape, scale=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return core.skew(scale * torch.randn(*shape, generator=g, dtype=torch.float64))


def rand_rotation(n, seed=0, scale=0.5):
    return core.cayley(rand_skew(n, n, scale=scale, seed=seed), "paper")


def test_packing_round_trip_matches_peft_layout():
    b = 6
    vec = torch.randn(3, core.n_params(b), dtype=torch.float64)
    Q = core.skew_from_vec(vec, b)
    assert torch.equal(Q, -Q.transpose(-2, -1))
    assert torch.equal(core.vec_from_skew(Q), vec)
    assert torch.equal(core.skew_from_vec(core.vec_from_skew(Q), b), Q)
    assert Q[0, 0, 1] == vec[0, 0] and Q[0, 1, 0] == -vec[0, 0]  # row-major upper triangle
    assert core.block_from_params(core.n_params(b)) == b
    with pytest.raises(ValueError):
        core.block_from_params(7)


@pytest.mark.parametrize("convention", ["peft", "paper"])
def test_cayley_round_trip_and_orthogonality(convention):
    A = rand_skew(4, 8, 8, scale=0.8)
    R = core.cayley(A, convention)
    assert core.orthogonality_error(R) < 1e-12
    assert torch.allclose(core.inverse_cayley(R, convention), A, atol=1e-12)


def test_conventions_are_transposes_and_merges_agree():
    Qs = rand_skew(3, 2, 5, 5, scale=0.6, seed=1)
    peft, paper = core.cayley(Qs, "peft"), core.cayley(Qs, "paper")
    assert torch.allclose(peft, paper.transpose(-2, -1), atol=1e-12)
    assert not torch.allclose(peft, paper, atol=1e-3)
    # the same rotations read in either convention merge to the same rotation
    A_peft = torch.stack([core.inverse_cayley(R, "peft") for R in peft])
    A_paper = torch.stack([core.inverse_cayley(R, "paper") for R in peft])
    R1 = core.cayley(core.merge_skew(A_peft), "peft")
    R2 = core.cayley(core.merge_skew(A_paper), "paper")
    assert torch.allclose(R1, R2, atol=1e-12)
    assert core.orthogonality_error(R1) < 1e-12


def test_neumann_series_is_the_paper_convention():
    Q = rand_skew(2, 6, 6, scale=0.05)
    approx = core.cayley_neumann(Q, terms=12)
    assert torch.allclose(approx, core.cayley(Q, "paper"), atol=1e-12)
    assert not torch.allclose(approx, core.cayley(Q, "peft"), atol=1e-3)
    five = core.cayley_neumann(Q, terms=5)  # peft's default: I + 2Q + 2Q² + 2Q³ + Q⁴
    eye = torch.eye(6, dtype=torch.float64)
    assert torch.allclose(five, eye + 2 * Q + 2 * Q @ Q + 2 * Q @ Q @ Q + Q @ Q @ Q @ Q, atol=1e-14)


def test_guard_fires_on_a_planted_180_degree_rotation():
    R = torch.eye(4, dtype=torch.float64)
    R[:2, :2] = torch.tensor([[-1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)  # a half turn
    for conv in ("peft", "paper"):
        with pytest.raises(core.RotationError, match="eigenvalue at -1"):
            core.inverse_cayley(R, conv)
    W0 = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(core.RotationError):
        core.decouple(W0, [W0 @ R], "general")


def test_guard_reads_the_solve_near_a_half_turn():
    def turn(theta):
        R = torch.eye(4, dtype=torch.float64)
        c, s_ = torch.cos(torch.tensor(theta, dtype=torch.float64)), torch.sin(torch.tensor(theta, dtype=torch.float64))
        R[:2, :2] = torch.stack([torch.stack([c, -s_]), torch.stack([s_, c])])
        return R
    for conv in ("peft", "paper"):
        with pytest.raises(core.RotationError, match="eigenvalue at -1"):
            core.inverse_cayley(turn(torch.pi - 1e-8), conv)  # σ_min(I+R) ≈ 1e-8 < 1e-6
        A = core.inverse_cayley(turn(torch.pi - 0.1), conv)  # ‖A‖₂ = tan(θ/2) ≈ 20: accepted
        assert float(torch.linalg.matrix_norm(A, ord=2)) == pytest.approx(math.tan((math.pi - 0.1) / 2), rel=1e-9)
    with pytest.raises(core.RotationError):
        core.inverse_cayley(torch.full((3, 3), float("nan"), dtype=torch.float64))


def test_decoupling_recovers_a_shared_rotation_for_several_experts():
    g = torch.Generator().manual_seed(30)
    W0 = torch.randn(24, 12, dtype=torch.float64, generator=g)
    R_true = rand_rotation(12, seed=31, scale=0.5)
    Ws = [W0 @ R_true + 1e-3 * torch.randn(24, 12, dtype=torch.float64, generator=g) for _ in range(4)]
    R, E = core.decouple(W0, Ws, "general")
    assert torch.allclose(R, R_true, atol=5e-3)  # R* ≈ R_true, not I, not R_trueᵀ
    assert not torch.allclose(R, R_true.T, atol=5e-2)
    assert all(float(torch.linalg.matrix_norm(e)) < 0.05 * float(torch.linalg.matrix_norm(W - W0))
               for e, W in zip(E, Ws, strict=True))


def test_procrustes_recovers_a_planted_rotation():
    g = torch.Generator().manual_seed(3)
    W0 = torch.randn(20, 12, dtype=torch.float64, generator=g)
    R_true = rand_rotation(12, seed=4, scale=0.7)
    R = core.procrustes_right(W0, W0 @ R_true)
    assert torch.allclose(R, R_true, atol=1e-10)
    assert torch.allclose(core.procrustes_right(W0, W0 @ R_true, proper=True), R_true, atol=1e-10)


def test_proper_procrustes_never_returns_a_reflection():
    g = torch.Generator().manual_seed(5)
    W0 = torch.randn(10, 6, dtype=torch.float64, generator=g)
    flip = torch.diag(torch.tensor([1.0, 1, 1, 1, 1, -1], dtype=torch.float64))
    assert torch.linalg.det(core.procrustes_right(W0, W0 @ flip)) < 0
    assert torch.linalg.det(core.procrustes_right(W0, W0 @ flip, proper=True)) > 0


def test_identical_generators_merge_to_themselves():
    Q = rand_skew(4, 8, 8)
    Qs = Q.expand(5, 4, 8, 8).clone()
    for gran in ("module", "block"):
        for mag in ("mean", "median", "max"):
            assert torch.allclose(core.merge_skew(Qs, magnitude=mag, granularity=gran), Q, atol=1e-14)


def test_magnitude_correction_restores_the_mean_norm():
    Qs = rand_skew(4, 3, 6, 6, scale=1.0, seed=7)  # independent tasks: they partly cancel
    theta = torch.linalg.vector_norm(Qs, dim=(1, 2, 3))
    Q = core.merge_skew(Qs)
    assert float(torch.linalg.vector_norm(Q)) == pytest.approx(float(theta.mean()), rel=1e-12)
    # the closed form (1/T)(Σ‖Q_i‖/‖ΣQ_i‖)ΣQ_i
    S = Qs.sum(0)
    assert torch.allclose(Q, theta.sum() / torch.linalg.vector_norm(S) * S / 4, atol=1e-14)
    # the ablation (plain mean) shrinks the angle; the direction is the same
    avg = core.average_skew(Qs)
    assert float(torch.linalg.vector_norm(avg)) < 0.8 * float(theta.mean())
    assert torch.allclose(avg / torch.linalg.vector_norm(avg), Q / torch.linalg.vector_norm(Q), atol=1e-12)
    assert float(torch.linalg.vector_norm(core.merge_skew(Qs, magnitude="max"))) == pytest.approx(float(theta.max()))
    # per-block norms
    Qb = core.merge_skew(Qs, granularity="block")
    tb = torch.linalg.vector_norm(Qs, dim=(2, 3)).mean(0)
    assert torch.allclose(torch.linalg.vector_norm(Qb, dim=(1, 2)), tb, atol=1e-12)


def test_decoupling_with_one_expert_and_scale_one_reconstructs_it():
    from orthomerge.merging import orthogonal_residual_merge

    g = torch.Generator().manual_seed(8)
    W0 = torch.randn(16, 10, dtype=torch.float64, generator=g)
    R_true = rand_rotation(10, seed=9, scale=0.4)
    W1 = W0 @ R_true + 0.05 * torch.randn(16, 10, dtype=torch.float64, generator=g)
    for ortho in ("general", "conflict", "none"):
        R, E = core.decouple(W0, [W1], ortho)
        assert torch.allclose(W0 @ R + E[0], W1, atol=1e-10)
    R, E = core.decouple(W0, [W1], "general")
    assert torch.allclose(R, core.procrustes_right(W0, W1), atol=1e-10)  # the rotation is really used
    assert float(torch.linalg.matrix_norm(E[0])) < 0.2 * float(torch.linalg.matrix_norm(W1 - W0))
    base = {"w": W0, "b": torch.zeros(16, dtype=torch.float64)}
    expert = {"w": W1, "b": torch.ones(16, dtype=torch.float64)}
    out = orthogonal_residual_merge(base, [expert], DecoupleConfig(residual="ta", residual_scale=1.0))
    assert torch.allclose(out["w"], W1, atol=1e-10) and torch.allclose(out["b"], expert["b"])
    # the default residual scale 0.2 keeps the rotation but shrinks the residual
    out = orthogonal_residual_merge(base, [expert], DecoupleConfig())
    assert torch.allclose(out["w"], W0 @ R + 0.2 * E[0], atol=1e-10)


def test_conflict_targets_keep_only_opposing_rows():
    W0 = torch.zeros(3, 2, dtype=torch.float64)
    d1 = torch.tensor([[1.0, 0], [1, 0], [0, 1]], dtype=torch.float64)
    d2 = torch.tensor([[1.0, 0], [-3, 0], [0, 1]], dtype=torch.float64)
    T1, T2 = core.conflict_targets(W0, [W0 + d1, W0 + d2])
    # mean delta row 1 = (-1, 0): expert 1's row 1 opposes it, expert 2's agrees
    assert torch.equal(T1, torch.tensor([[0.0, 0], [1, 0], [0, 0]], dtype=torch.float64))
    assert torch.equal(T2, torch.zeros(3, 2, dtype=torch.float64))


def test_orthogonal_merge_keeps_energy_and_spectral_norm_where_ta_drifts():
    g = torch.Generator().manual_seed(11)
    W0 = torch.randn(24, 16, dtype=torch.float64, generator=g)
    for T in (2, 3, 5):
        Qs = rand_skew(T, 4, 4, 4, scale=0.5, seed=T)
        R = core.block_diag(core.cayley(core.merge_skew(Qs), "peft"))
        W = W0 @ R.T
        assert core.hyperspherical_energy(W) == pytest.approx(core.hyperspherical_energy(W0), rel=1e-9)
        assert core.spectral_norm(W) == pytest.approx(core.spectral_norm(W0), rel=1e-9)
        deltas = [W0 @ core.block_diag(core.cayley(Q, "peft")).T - W0 for Q in Qs]
        W_ta = W0 + merge_deltas("ta", deltas, scale=1.0)
        assert abs(core.spectral_norm(W_ta) / core.spectral_norm(W0) - 1) > 1e-3


def test_euclidean_rules():
    g = torch.Generator().manual_seed(12)
    D = [torch.randn(6, 5, dtype=torch.float64, generator=g) for _ in range(3)]
    assert torch.allclose(merge_deltas("ta", D, scale=0.5), 0.5 * sum(D))
    # TIES at density 1: sign election + disjoint mean, checked entry by entry
    ties = merge_deltas("ties", D, scale=1.0, density=1.0)
    S = torch.stack(D)
    sign = torch.sign(S.sum(0))
    agree = torch.sign(S) == sign
    assert torch.allclose(ties, (S * agree).sum(0) / agree.sum(0))
    trimmed = merge_deltas("ties", D, scale=1.0, density=0.2)
    assert (trimmed != 0).sum() < (ties != 0).sum()
    # TSV-M with one task and all singular triplets returns the delta
    assert torch.allclose(merge_deltas("tsv", D[:1], scale=1.0), D[0], atol=1e-12)
    tsv = merge_deltas("tsv", D, scale=1.0)
    assert tsv.shape == D[0].shape and not torch.allclose(tsv, sum(D))
    for rule in ("dare_ties", "dare_linear"):
        dare = merge_deltas(rule, [D[0]], scale=1.0, density=0.5, generator=torch.Generator().manual_seed(0))
        kept = dare != 0
        assert 0 < kept.float().mean() < 1 and torch.allclose(dare[kept], 2 * D[0][kept])
        again = merge_deltas(rule, [D[0]], scale=1.0, density=0.5, generator=torch.Generator().manual_seed(0))
        assert torch.equal(dare, again)  # seeded by the generator, not the global RNG
    with pytest.raises(UserError, match="unknown merge rule"):
        merge_deltas("magic", D)
    with pytest.raises(UserError, match="dare_linear .*dare_ties"):
        merge_deltas("dare", D)


# --- the rules as they were written here before the shared layer (the oracle of "equal today's") ---

def _old_trim(D, density):
    flat = D.reshape(D.shape[0], -1)
    k = max(1, int(round(density * flat.shape[1])))
    if k >= flat.shape[1]:
        return D
    thresh = flat.abs().kthvalue(flat.shape[1] - k + 1, dim=1, keepdim=True).values
    return (flat * (flat.abs() >= thresh)).reshape(D.shape)


def _old_elect(D, w):
    Dw = w.view(-1, *[1] * (D.dim() - 1)) * D
    sign = torch.sign(Dw.sum(0))
    agree = (torch.sign(Dw) == sign) & (Dw != 0)
    return (Dw * agree).sum(0) / agree.sum(0).clamp_min(1)


def _old_tsv(D, w):
    T, m, n = D.shape
    k = max(1, min(m, n) // T)
    Us, Ss, Vs = [], [], []
    for i in range(T):
        U, S, Vh = torch.linalg.svd(w[i] * D[i], full_matrices=False)
        Us.append(U[:, :k])
        Ss.append(S[:k])
        Vs.append(Vh[:k].T)

    def polar(X):
        U, _, Vh = torch.linalg.svd(X, full_matrices=False)
        return U @ Vh
    return (polar(torch.cat(Us, 1)) * torch.cat(Ss)) @ polar(torch.cat(Vs, 1)).T


def test_shared_rules_equal_the_old_ones_at_tensor_scope_and_are_the_cores():
    from orthomerge import baselines

    from icml26_shared import merge as shared

    assert baselines.RULES is shared.RULES and set(RULES) == set(shared.RULES)
    assert shared.RULES["ties"] is shared.ties  # circumerge and orthomerge call the same functions
    g = torch.Generator().manual_seed(21)
    for shape in ((10, 8), (40,)):
        D = torch.randn(3, *shape, dtype=torch.float64, generator=g)
        w = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
        Dl = list(D)
        assert torch.allclose(merge_deltas("ta", Dl, scale=0.7, weights=w), 0.7 * (w.view(-1, *[1] * len(shape)) * D).sum(0))
        assert torch.allclose(merge_deltas("ties", Dl, scale=1.3, density=0.25, weights=w),
                              1.3 * _old_elect(_old_trim(D, 0.25), w), atol=1e-12)
        if len(shape) == 2:
            assert torch.allclose(merge_deltas("tsv", Dl, scale=0.9, weights=w), 0.9 * _old_tsv(D, w), atol=1e-10)


def test_ties_trims_over_the_whole_model_by_default():
    from orthomerge.baselines import thresholds

    g = torch.Generator().manual_seed(22)
    big = [100 * torch.randn(50, 10, dtype=torch.float64, generator=g) for _ in range(2)]
    small = [torch.randn(50, 10, dtype=torch.float64, generator=g) for _ in range(2)]
    cfg = DecoupleConfig(residual="ties", residual_scale=1.0)
    assert cfg.trim_scope == "model" and cfg.density is None and cfg.residual_scale == 1.0
    thr = thresholds("ties", [[big[t], small[t]] for t in range(2)], 0.2, cfg.trim_scope)
    # each expert keeps 20 % of its 1000 entries, all of them in the big tensor
    for t in range(2):
        whole = torch.cat([big[t].flatten(), small[t].flatten()]).abs()
        assert float(thr[t]) == float(whole.kthvalue(1000 - 200 + 1).values)
    merged_small = merge_deltas("ties", small, density=0.2, threshold=thr)
    merged_big = merge_deltas("ties", big, density=0.2, threshold=thr)
    assert int((merged_small != 0).sum()) == 0
    assert int((merged_big != 0).sum()) > 0.2 * 500
    assert thresholds("ties", [[big[0]]], 0.2, "tensor") is None
    per_tensor = merge_deltas("ties", small, density=0.2)  # peft's convention: 20 % of each tensor
    assert 0.2 * 500 <= int((per_tensor != 0).sum()) <= 2 * 0.2 * 500
    # a zero sign sum is elected +1: entries +1 and -1 at one position; +1 is kept
    D = torch.tensor([[1.0, 2.0], [-1.0, 2.0]], dtype=torch.float64)
    out = merge_deltas("ties", list(D), density=1.0)
    assert out[0] == 1.0 and out[1] == 2.0
    # through the real residual merge: the small tensor's residual is trimmed away whole
    from orthomerge.merging import orthogonal_residual_merge

    base = {"big": torch.zeros(50, 10, dtype=torch.float64), "small": torch.zeros(50, 10, dtype=torch.float64)}
    experts = [{"big": big[t], "small": small[t]} for t in range(2)]
    model = orthogonal_residual_merge(base, experts, DecoupleConfig(ortho="none", residual="ties"))
    tensor = orthogonal_residual_merge(base, experts, DecoupleConfig(ortho="none", residual="ties", trim_scope="tensor"))
    assert int((model["small"] != 0).sum()) == 0 and int((tensor["small"] != 0).sum()) >= 100


def test_configs_refuse_bad_values():
    for kw in ({"scale": float("nan")}, {"density": 0.0}, {"method": "slerp"}, {"weights": (0.0, 0.0)}):
        with pytest.raises(ValueError):
            OFTMergeConfig(**kw)
    for kw in ({"residual_scale": -1.0}, {"ortho": "left"}, {"residual": "slerp"}, {"trim_scope": "layer"}):
        with pytest.raises(ValueError):
            DecoupleConfig(**kw)
    with pytest.raises(UserError, match="dare_linear"):
        DecoupleConfig(residual="dare")
    assert DecoupleConfig().residual_scale == 0.2 and DecoupleConfig(residual="ties").residual_scale == 1.0
