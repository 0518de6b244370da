"""Tests that catch mutants of NBCG's mechanism (tests/mutants.toml)."""

import numpy as np
import pytest
import torch
from nbcg.baselines import ARMS
from nbcg.config import NBCGConfig
from nbcg.train import CoalitionMLP, hidden_masks, train


def _outside_units_do_not_reach(model, coal, x):
    """For each coalition k: perturbing the hidden units outside its mask leaves k's logits
    unchanged; returns whether some other coalition's logits moved each time."""
    moved = []
    for k, c in enumerate(coal):
        out = torch.nonzero(model.mask[k] == 0).flatten()
        assert len(out) > 0, "the mask restricts nothing"
        before = model(x).detach()
        saved = model.enc.weight.detach().clone(), model.enc.bias.detach().clone()
        with torch.no_grad():
            model.enc.weight[out] += torch.randn(len(out), model.enc.weight.shape[1])
            model.enc.bias[out] += 1.0
        after = model(x).detach()
        with torch.no_grad():
            model.enc.weight.copy_(saved[0])
            model.enc.bias.copy_(saved[1])
        torch.testing.assert_close(after[:, c], before[:, c])
        others = [j for j in range(after.shape[1]) if j not in c]
        moved.append(bool((after[:, others] - before[:, others]).abs().max() > 1e-4))
    return moved


def test_coalition_logits_unchanged_when_hidden_units_outside_its_mask_change():
    """As built (and as trained by the real loop): coalition k reads only the shared block and its
    own private units; the no-mask ablation reads everything."""
    torch.manual_seed(0)
    coal = [[0, 1], [2, 3], [4]]
    M = hidden_masks(coal, 16)
    assert M[:, :8].eq(1).all() and M[:, 8:].sum(0).eq(1).all()     # shared block + a partition
    x = torch.randn(32, 6)
    assert all(_outside_units_do_not_reach(CoalitionMLP(6, 16, coal, 5), coal, x))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(128, 6)).astype(np.float32)
    Y = (X[:, :5] > 0.3).astype(np.float32)
    model, _ = train(X, Y, coal, ARMS["nbcg-bce"], NBCGConfig(epochs=2, hidden=16, batch_size=32), 0)
    assert all(_outside_units_do_not_reach(model, coal, x))
    open_model = CoalitionMLP(6, 16, coal, 5, masked=False)
    assert bool(open_model.mask.eq(1).all())
    with pytest.raises(AssertionError):
        _outside_units_do_not_reach(open_model, coal, x)
    assert not [n for n, _ in model.named_parameters() if "gate" in n]    # no gate parameters left
