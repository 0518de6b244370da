"""The shared trainer keeps the best-on-val weights, metrics follow the p >= 0.5 rule, every
registered method fits, and the zoo's labels have exactly subset_size ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mvprobe.baselines import METHODS, build, weight_statistics
from mvprobe.config import ProbeConfig, TrainConfig, ZooConfig
from mvprobe.train import exact_subset_accuracy, fit, per_label_accuracy, predict_proba

from icml26_shared import UserError

PROBE = ProbeConfig(n_probes=3, proj_dim=3, rep_dim=6)


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 6, 5, generator=g)
    Y = (X[:, 0, :3] > 0).float()  # learnable from the first row
    return X, Y


def test_metrics_threshold_rule():
    p = np.array([[0.5, 0.49], [0.9, 0.1]])
    y = np.array([[1, 0], [1, 1]])
    assert per_label_accuracy(p, y) == 0.75  # p = 0.5 counts as positive
    assert exact_subset_accuracy(p, y) == 0.5


def test_fit_restores_the_best_val_epoch():
    X, Y = _data()
    model = build("flat", (6, 5), 3, PROBE).module
    hist = fit(model, X, Y, TrainConfig(epochs=12, lr=3e-2, seed=1), X[:24], Y[:24])
    assert hist.best_val_accuracy == max(hist.val_accuracy)
    assert per_label_accuracy(predict_proba(model, X[:24]), Y[:24].numpy()) == pytest.approx(hist.best_val_accuracy)
    noise = (torch.rand(24, 3, generator=torch.Generator().manual_seed(9)) > 0.5).float()
    hist2 = fit(build("flat", (6, 5), 3, PROBE).module, X, Y,
                TrainConfig(epochs=40, lr=3e-2, seed=1, patience=2), X[40:], noise)
    assert hist2.epochs_run < 40  # early stopping on a val set it cannot improve on


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_fits_and_predicts(method):
    X, Y = _data()
    learner = build(method, (6, 5), 3, PROBE)
    learner.fit(X[:48], Y[:48], X[48:], Y[48:], TrainConfig(epochs=2, seed=0))
    p = learner.predict_proba(X)
    assert p.shape == (64, 3) and np.all((p >= 0) & (p <= 1))


def test_unknown_method_is_a_user_error():
    with pytest.raises(UserError, match="unknown method 'magic'"):
        build("magic", (6, 5), 3)


def test_statnn_features_are_permutation_invariant():
    X, _ = _data(8)
    F = weight_statistics(X)
    Fp = weight_statistics(X[:, torch.randperm(6)][:, :, torch.randperm(5)])
    assert F.shape == (8, 7) and np.allclose(F, Fp)


def test_zoo_labels_and_determinism():
    from mvprobe.zoo import make_model_zoo

    cfg = ZooConfig(n_models=9, steps=(2, 4), ancestor_steps=3, seed=2, permute_hidden=0.5)
    a, b = make_model_zoo(cfg), make_model_zoo(cfg)
    assert (a.labels.sum(1) == cfg.subset_size).all()
    for k in a.weights:
        assert torch.equal(a.weights[k], b.weights[k])
    assert sorted(np.concatenate(list(a.split.values())).tolist()) == list(range(9))
    with pytest.raises(ValueError):
        ZooConfig(subset_size=10)
