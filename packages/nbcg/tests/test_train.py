"""The trainer: Nash weighting really moves the coalition weights; the single-coalition arm is BCE."""

import numpy as np
import pytest
import torch
from nbcg.baselines import ARMS, LOSSES, get_arm
from nbcg.config import NBCGConfig
from nbcg.train import CoalitionMLP, coalition_losses, train


def _data(seed=0, n=256):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 12)).astype(np.float32)
    Y = np.stack([X[:, 0] > 0, X[:, 1] > 0.5, X[:, 2] + 0.3 * rng.normal(size=n) > 1.5,
                  X[:, 3] * X[:, 4] > 1.0], 1).astype(np.float32)
    return X, Y


def test_nash_weights_move_and_the_ablation_stays_uniform():
    X, Y = _data()
    coal = [[0, 1], [2, 3]]
    cfg = NBCGConfig(epochs=6, batch_size=32, warmup_epochs=1)
    _, log = train(X, Y, coal, ARMS["nbcg-bce"], cfg, seed=0)
    W = np.stack(log.weights)
    assert W.shape[1] == 2 and np.allclose(W.sum(1), 1.0)
    assert np.abs(W - 0.5).max() > 0.05            # not uniform: the mechanism is on
    N = np.stack(log.nash)
    assert np.allclose(N.mean(1), 1.0) and np.abs(N - 1).max() > 0.1  # raw Nash weights, mean 1
    # (the direction w ∝ 1/(u − d) is pinned by test_core's bargaining tests)
    _, ulog = train(X, Y, coal, get_arm("causal-uniform", "bce"), cfg, seed=0)
    assert np.allclose(np.stack(ulog.weights), 0.5)  # the ablation really is uniform


def test_one_coalition_uniform_is_plain_bce():
    X, Y = _data()
    model = CoalitionMLP(12, 8, [[0, 1, 2, 3]], 4)
    Xt, Yt = torch.tensor(X), torch.tensor(Y)
    elem = LOSSES["bce"](model(Xt), Yt, Yt.sum(0))
    Lk = coalition_losses(elem, [[0, 1, 2, 3]])
    ref = torch.nn.functional.binary_cross_entropy_with_logits(model(Xt), Yt)
    assert torch.allclose(Lk[0], ref)


def test_fast_paths_equal_their_plain_definitions():
    """The speed-ups compute the same thing: scatter-added coalition sums = slice sums, one batched
    backward = K separate gradients, the vectorised macro-F1 = scikit-learn's (empty labels → 0)."""
    from nbcg.train import THRESHOLD_GRID, coalition_grads, coalition_sums, macro_f1_at
    from sklearn.metrics import f1_score

    X, Y = _data()
    coal = [[0, 3], [1], [2]]
    model = CoalitionMLP(12, 8, coal, 4)
    elem = LOSSES["bce"](model(torch.tensor(X)), torch.tensor(Y), torch.tensor(Y).sum(0))
    Lk = coalition_sums(elem, coal)
    assert torch.allclose(Lk, torch.stack([elem[:, c].sum() for c in coal]))
    G = coalition_grads(Lk, model.shared_params())
    for k in range(len(coal)):
        g = torch.autograd.grad(Lk[k], model.shared_params(), retain_graph=True)
        assert torch.allclose(G[k], torch.cat([t.reshape(-1) for t in g]), atol=1e-6)
    rng = np.random.default_rng(0)
    S = rng.random((60, 5))
    Yb = (rng.random((60, 5)) < 0.3).astype(int)
    Yb[:, 4] = 0                                   # a label with no positives
    ref = [f1_score(Yb, (S >= t).astype(int), average="macro", zero_division=0) for t in THRESHOLD_GRID]
    np.testing.assert_allclose(macro_f1_at(S, Yb, THRESHOLD_GRID), ref, atol=1e-12)


@pytest.mark.parametrize("loss", ["asl", "db"])
def test_bargaining_over_asl_and_db_moves_the_weights_and_the_twin_stays_uniform(loss):
    """nbcg-asl / nbcg-db bargain over their own coalition losses; causal-uniform-L stays uniform."""
    X, Y = _data()
    coal = [[0, 1], [2, 3]]
    cfg = NBCGConfig(epochs=5, batch_size=32, warmup_epochs=1)
    _, log = train(X, Y, coal, ARMS[f"nbcg-{loss}"], cfg, seed=0)
    assert ARMS[f"nbcg-{loss}"].loss == loss
    W = np.stack(log.weights)
    assert np.abs(W - 0.5).max() > 0.05
    twin = get_arm("causal-uniform", loss)
    assert twin.loss == loss and twin.weighting == "uniform"
    _, ulog = train(X, Y, coal, twin, cfg, seed=0)
    assert np.allclose(np.stack(ulog.weights), 0.5)


def test_nash_mtl_takes_the_published_step_in_the_training_loop():
    """Nash-MTL (Navon et al. 2022, LibMTL): the unnormalised α of (GᵀG)α = 1/α makes the shared
    update Gα of norm √K at every solve; the shared gradient is then clipped at max-norm 1."""
    X, Y = _data()
    coal = [[0], [1], [2, 3]]
    cfg = NBCGConfig(epochs=3, batch_size=64, warmup_epochs=1, nash_mtl_every=2)
    _, log = train(X, Y, coal, ARMS["nash-mtl"], cfg, seed=0)
    assert len(log.mtl_norm) >= 3
    np.testing.assert_allclose(log.mtl_norm, np.sqrt(len(coal)), rtol=1e-3)
    assert max(log.mtl_clipped) <= 1.0 + 1e-5


def test_an_auto_loss_arm_refuses_to_train_before_its_loss_is_chosen():
    X, Y = _data()
    with pytest.raises(ValueError, match="not a registered loss"):
        train(X, Y, [[0, 1], [2, 3]], ARMS["nbcg"], NBCGConfig(epochs=1), seed=0)


def test_early_stopping_returns_the_best_dev_epoch_and_keeps_the_curves():
    """Dev labels that the training signal does not predict (label 0 is flipped on dev): dev
    macro-F1 peaks early; the returned model is the best-dev epoch's, not the last one's."""
    from nbcg.train import THRESHOLD_GRID, macro_f1_at, predict_scores

    X, Y = _data(n=256)
    Xd, Yd = _data(seed=1, n=128)
    Yd = Yd.copy()
    Yd[:, 0] = 1 - Yd[:, 0]
    cfg = NBCGConfig(epochs=8, batch_size=32, lr=3e-2, hidden=16)
    model, log = train(X, Y, [[0, 1], [2, 3]], ARMS["nbcg-bce"], cfg, seed=0, dev=(Xd, Yd), patience=2)
    c = log.curve
    assert len(c["train_loss"]) == len(c["dev_macro_f1"]) == len(c["epoch"]) <= 8
    best = int(np.argmax(c["dev_macro_f1"]))
    assert c["best_epoch"] == c["epoch"][best]
    assert c["best_epoch"] < c["epoch"][-1]            # it peaked before the end
    f = float(macro_f1_at(predict_scores(model, Xd), Yd, THRESHOLD_GRID).max())
    assert f == pytest.approx(c["dev_macro_f1"][best], abs=1e-9)   # the best epoch's weights
