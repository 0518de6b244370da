"""Tests that catch mutants of FiGuRO's mechanism (tests/mutants.toml)."""

from __future__ import annotations

from figuro.core import simulate
from figuro.estimator import FiGuRO

TINY = dict(latent_dim=6, pretrain_epochs=6, update_every=2, max_rounds=30)


def test_fidelity_stops_the_ranks_at_the_data_dimensions():
    """One shared and one private dimension per view: the fidelity rule stops every rank at 1 or 2
    (it reverts the cut to 0 that breaks reconstruction); a rule that never sees a violation lets
    every rank fall to k_min = 0."""
    x1, x2, _ = simulate(1, 1, 1, n=200, dim=10, seed=0)
    est = FiGuRO(random_state=0, **TINY).fit([x1, x2])
    final = est.rank_history_[-1]
    assert all(1 <= k <= 2 for k in final.values()), final
    assert any(e.startswith("revert") for e in est.events_), est.events_
