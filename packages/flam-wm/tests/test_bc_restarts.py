"""0.9.3's restart rule for the cloned policy (README, "Dev check of BC at 10% labels"): while every
start so far sits on the keypoint plateau (its fit cross-entropy near the labels' entropy), more starts
are made, up to MAX_RESTARTS; where one of the first three has left it nothing changes."""

from __future__ import annotations

import numpy as np
from flam_wm import bc


def _data(n: int = 64):
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, size=(n, 32, 32, 3), dtype=np.uint8), rng.integers(1, 5, size=n)


def _scripted(monkeypatch, fits: list[float]) -> list[bc.Policy]:
    """Make start r's fit cross-entropy fits[r]; returns the policies in the order they were made."""
    made: list[bc.Policy] = []
    monkeypatch.setattr(bc, "_fit_loss", lambda pol, x, y: made.append(pol) or fits[len(made) - 1])
    return made


def test_more_starts_while_all_sit_on_the_plateau_and_the_first_that_leaves_it_is_kept(monkeypatch):
    frames, labels = _data()
    h = float(-sum(p * np.log(p) for p in np.bincount(labels)[1:] / len(labels)))
    plateau, off = 0.99 * h, 0.3 * h
    made = _scripted(monkeypatch, [plateau, plateau, plateau, plateau, off, 0.1])
    pol = bc.clone(frames, labels, 32, steps=1, batch=8, seed=3)
    assert len(made) == 5 and pol is made[4]                 # stopped at the first start off the plateau
    made = _scripted(monkeypatch, [plateau] * 20)
    bc.clone(frames, labels, 32, steps=1, batch=8, seed=3)
    assert len(made) == bc.MAX_RESTARTS                      # ... and never more than MAX_RESTARTS
    made = _scripted(monkeypatch, [plateau] * 20)            # switched off: the old best of three
    bc.clone(frames, labels, 32, steps=1, batch=8, seed=3, max_restarts=3)
    assert len(made) == 3


def test_three_starts_as_before_when_one_has_left_the_plateau(monkeypatch):
    frames, labels = _data()
    made = _scripted(monkeypatch, [1.3, 0.2, 1.3, 0.0, 0.0])
    pol = bc.clone(frames, labels, 32, steps=1, batch=8, seed=3)
    assert len(made) == 3 and pol is made[1]
