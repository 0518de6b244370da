"""Tests that catch mutants of NBCG's mechanism (tests/mutants.toml)."""

import torch
from nbcg.train import CoalitionMLP


def test_a_closed_gate_cuts_its_coalition_off_from_those_hidden_units():
    """Coalition k reads the shared layer through σ(g_k): with its gates closed on hidden units
    0-3, changing those units leaves k's logits unchanged and still moves the other coalition's;
    the gates are trained (they receive a gradient)."""
    torch.manual_seed(0)
    coal = [[0, 1], [2, 3]]
    model = CoalitionMLP(6, 8, coal, 4)
    with torch.no_grad():
        model.gates[0, :4] = -60.0
    x = torch.randn(16, 6)
    before = model(x).detach()
    with torch.no_grad():
        model.enc.weight[:4] += torch.randn(4, 6)
        model.enc.bias[:4] += 1.0
    after = model(x).detach()
    torch.testing.assert_close(after[:, coal[0]], before[:, coal[0]])
    assert (after[:, coal[1]] - before[:, coal[1]]).abs().max() > 1e-3
    model(x).sum().backward()
    assert model.gates.grad is not None and model.gates.grad[1].abs().sum() > 0
