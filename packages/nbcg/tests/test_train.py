"""The trainer: Nash weighting really moves the coalition weights; the single-coalition arm is BCE."""

import numpy as np
import torch
from nbcg.baselines import ARMS, LOSSES
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
    _, log = train(X, Y, coal, ARMS["nbcg"], cfg, seed=0)
    W = np.stack(log.weights)
    assert W.shape[1] == 2 and np.allclose(W.sum(1), 1.0)
    assert np.abs(W - 0.5).max() > 0.05            # not uniform: the mechanism is on
    N = np.stack(log.nash)
    assert np.allclose(N.mean(1), 1.0) and np.abs(N - 1).max() > 0.1  # raw Nash weights, mean 1
    # (the direction w ∝ 1/(u − d) is pinned by test_core's bargaining tests)
    _, ulog = train(X, Y, coal, ARMS["causal-uniform"], cfg, seed=0)
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
