"""Matched correspondence (issue 57, item 1): each entity's probe reads the slot that holds it in
that clip (Hungarian on slot-mask / entity-cell overlap), so a slot index that names a different
entity in every clip does not cap the score."""

from __future__ import annotations

import numpy as np
import pytest
from flam_wm.evaluate import (
    chance_per_entity,
    correspondence,
    matched_accuracy,
    matched_hits,
    matched_latents,
    probe_matrix,
    slot_owners,
)

ANGLE = np.array([[0.0, 0.0], [0.0, 1.0], [0.0, -1.0], [-1.0, 0.0], [1.0, 0.0]])  # one point per action


def _world(clips: int, seed: int, t: int = 6, e: int = 3, k: int = 4, tokens: int = 16):
    """Latents that copy the true actions into a slot chosen by a random per-clip permutation, masks
    that put each entity's one cell in that same slot, the other slots noise."""
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, 5, size=(clips, t - 1, e))
    perm = np.stack([rng.permutation(k)[:e] for _ in range(clips)])            # [clips, E]: entity -> slot
    lat = 0.05 * rng.standard_normal((clips, t - 1, k, 2))
    for i in range(clips):
        for j in range(e):
            lat[i, :, perm[i, j]] += ANGLE[acts[i, :, j]]
    labels = -np.ones((clips, t, tokens), np.int64)
    labels[..., :e] = np.arange(e)                                             # entity j on cell j
    masks = np.full((clips, t, tokens, k), 1.0 / k)
    for i in range(clips):
        masks[i, :, :e] = 0.0
        masks[i, :, np.arange(e), perm[i]] = 1.0
    return lat, acts, masks, labels, perm


def test_matched_correspondence_is_one_under_a_per_clip_slot_permutation_and_slot_index_is_not():
    lat, acts, masks, labels, perm = _world(80, 0)
    owners = slot_owners(masks, labels, 3)
    assert np.array_equal(owners, perm)
    fit, ev = slice(0, 50), slice(50, 80)
    m_fit, m_ev = matched_latents(lat[fit], owners[fit]), matched_latents(lat[ev], owners[ev])
    a_fit, a_ev = acts[fit].reshape(-1, 3), acts[ev].reshape(-1, 3)
    matched = matched_accuracy(m_fit, a_fit, m_ev, a_ev)
    assert np.allclose(matched, 1.0)
    hits = matched_hits(m_fit, a_fit, m_ev, a_ev)               # per transition: the clustered interval's units
    assert hits.shape == a_ev.shape and np.allclose(hits.reshape(30, -1).mean(1), 1.0)
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
    slot_index, _ = correspondence(probe_matrix(flat(lat[fit]), a_fit, flat(lat[ev]), a_ev), chance_per_entity(a_ev))
    assert slot_index < 0.9, slot_index


def test_fewer_slots_than_entities_read_their_largest_overlap_and_bad_shapes_are_refused():
    masks = np.ones((2, 3, 4, 1))
    labels = np.zeros((2, 3, 4), np.int64)
    assert slot_owners(masks, labels, 3).tolist() == [[0, 0, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="different tokens"):
        slot_owners(masks, labels[..., :3], 3)


def test_slot_positions_line_up_with_the_latents():
    """Item 0's second probe reads the latent + its slot's current position: ``slot_positions`` gives, per
    transition row of ``latents``, each slot's centroid at the transition's first frame (the slots' last two
    numbers); models without slot positions give None."""
    import torch
    from flam_wm.config import ModelConfig
    from flam_wm.core import WorldModel
    from flam_wm.evaluate import latents, slot_positions
    from flam_wm.sprites import generate

    torch.manual_seed(0)
    video = generate(2, 3, 4, size=16, seed=1)[0]
    flam = WorldModel(ModelConfig(model="flam", slots=3, latent_dim=6, width=16, size=16)).eval()
    pos = slot_positions(flam, video)
    assert pos.shape == (3 * 3, 3, 2) and latents(flam, video).shape[:2] == pos.shape[:2]
    with torch.no_grad():
        s = flam.slots(flam.tokenize(video))
    assert np.allclose(pos.reshape(3, 3, 3, 2), s[:, :-1, :, -2:].numpy())
    lam = WorldModel(ModelConfig(model="lam", slots=1, latent_dim=6, width=16, size=16))
    one = WorldModel(ModelConfig(model="flam", slots=3, latent_dim=6, width=16, size=16, one_latent=True))
    assert slot_positions(lam, video) is None and slot_positions(one, video) is None
