"""Steering mechanics on a tiny (untrained) toy VLM: alpha = 0 is bit-identical, the position
masks touch only what they name, the sign of alpha moves states along the direction, AMPS."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mc2_bench.config import ToyConfig
from mc2_bench.core import steer_update
from mc2_bench.offline.digits import digits_items
from mc2_bench.offline.toy import N_PATCH, ToyVLM
from mc2_bench.offline.toy_adapter import ToyAdapter
from mc2_bench.steering import SteeringHook


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = ToyVLM(ToyConfig(n_layers=3, d_model=16, n_heads=2)).eval()
    rng = np.random.default_rng(0)
    imgs = rng.uniform(0, 16, (6, 8, 8)).astype(np.float32)
    pairs = digits_items(imgs, np.arange(6), range(6), seed=0)
    lookup = {it.image: im for it, im in pairs}
    return ToyAdapter(model, lookup.__getitem__), [p[0] for p in pairs]


def _states(ad, items, hook=None):
    if hook is not None:
        hook.attach(ad)
    try:
        logits = ad._forward(items, "single", 0, None)
        ids, pix = ad._encode(items, "single", 0, None)
        ad.position_info = {"image_mask": ad.model.image_mask(ids), "prompt_len": ids.shape[1],
                            "context_mask": ad.model.context_mask(ids)}
        with torch.no_grad():
            _, hs = ad.model(ids, pix, hidden=True)
    finally:
        if hook is not None:
            hook.remove()
    return logits, hs


def test_alpha_zero_is_bit_identical(setup):
    ad, items = setup
    v = np.ones(16)
    ref, _ = _states(ad, items)
    out, _ = _states(ad, items, SteeringHook([1], v, 0.0))
    assert torch.equal(ref, out)
    moved, _ = _states(ad, items, SteeringHook([1], v, 0.5))
    assert not torch.equal(ref, moved)


def test_generated_positions_leave_prompt_states_untouched(setup):
    ad, items = setup
    v = np.random.default_rng(1).standard_normal(16)
    _, ref = _states(ad, items)
    _, gen = _states(ad, items, SteeringHook([0, 1], v, 2.0, positions="generated"))
    _, allp = _states(ad, items, SteeringHook([0, 1], v, 2.0, positions="all"))
    assert all(torch.equal(a, b) for a, b in zip(ref, gen))
    assert not torch.equal(ref[1], allp[1])


def test_image_tokens_touch_only_image_positions(setup):
    ad, items = setup
    v = np.random.default_rng(2).standard_normal(16)
    _, ref = _states(ad, items)
    hook = SteeringHook([0], v, 1.0, positions="image_tokens")
    _, out = _states(ad, items, hook)
    diff = (out[0] - ref[0]).abs().sum(-1)  # at the hooked layer's own output
    img = torch.zeros_like(diff, dtype=torch.bool)
    img[:, 1:1 + N_PATCH] = True
    assert (diff[img] > 0).all() and (diff[~img] == 0).all()
    assert hook.touched[0] == 2 * len(items) * N_PATCH  # two forwards, N_PATCH positions each
    hook_t = SteeringHook([0], v, 1.0, positions="text_tokens")
    _, out_t = _states(ad, items, hook_t)
    dt = (out_t[0] - ref[0]).abs().sum(-1)
    assert (dt[img] == 0).all() and (dt[~img] > 0).all()


def test_context_touches_only_the_text_context_positions(setup):
    ad, items = setup
    v = np.random.default_rng(4).standard_normal(16)
    _, ref = _states(ad, items)
    hook = SteeringHook([0], v, 1.0, positions="context")
    _, out = _states(ad, items, hook)
    diff = (out[0] - ref[0]).abs().sum(-1)
    ctx = torch.zeros_like(diff, dtype=torch.bool)
    ctx[:, 1 + N_PATCH:1 + N_PATCH + 3] = True  # CTX, source, digit
    assert (diff[ctx] > 0).all() and (diff[~ctx] == 0).all()
    assert hook.touched[0] == 2 * len(items) * 3
    none = SteeringHook([0], v, 1.0, positions="context").attach(ad)  # base_image shows no context
    with none:
        ad._forward(items, "base_image", 0, None)
    assert none.touched[0] == 0


def test_positive_alpha_moves_along_the_direction():
    h = torch.randn(3, 5, 8)
    v = torch.randn(8)
    v = v / v.norm()
    up, down = steer_update(h, v, 0.5), steer_update(h, v, -0.5)
    assert ((up - h) @ v > 0).all() and ((down - h) @ v < 0).all()
    assert torch.allclose((up - h).norm(dim=-1), 0.5 * h.norm(dim=-1), atol=1e-5)


def test_amps_leaves_states_on_the_target_side_and_pushes_the_others():
    v = torch.tensor([1.0, 0.0])
    h = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]])  # normalised projections +1 (vision side) and -1
    out = steer_update(h, v, 0.5, amps=(1.0, -1.0))
    assert torch.equal(out[0, 0], h[0, 0])  # already as "vision" as follow-image states
    assert out[0, 1, 0] > h[0, 1, 0]
    uniform = steer_update(h, v, 0.5)
    assert not torch.equal(uniform[0, 0], h[0, 0])


def test_layer_out_of_range_is_refused(setup):
    ad, _ = setup
    with pytest.raises(ValueError, match="out of range"):
        SteeringHook([7], np.ones(16), 1.0).attach(ad)


class Planted:
    """A mock adapter whose single-mode answer is vision for even items and text for odd ones,
    with the last-position state at layer 0 = +d or -d (plus noise) accordingly."""

    def __init__(self, d, seed=0):
        self.d, self.rng = d, np.random.default_rng(seed)

    def _vision(self, it):
        return int(it.id[1:]) % 2 == 0

    def answer(self, items, mode, order, answer_mode="letter", follow=None):
        from mc2_bench.core import modality_to_letter

        return [{"letter": modality_to_letter("vision" if self._vision(it) else "text", order),
                 "text": "", "prompt": ""} for it in items]

    def hidden(self, items, mode, order, follow=None):
        assert mode == "single" and follow is None
        s = np.array([1.0 if self._vision(it) else -1.0 for it in items])
        return (s[:, None] * self.d + 0.05 * self.rng.standard_normal((len(items), len(self.d))))[:, None]


def test_answer_contrast_groups_states_by_the_models_own_answer():
    from mc2_bench.core import MC2Item
    from mc2_bench.protocol import fit_direction, hidden_pairs

    d = np.random.default_rng(5).standard_normal(12)
    d /= np.linalg.norm(d)
    items = [MC2Item(f"i{k}", "t", "q", "one", "two", "Report 1: two.") for k in range(10)]
    hv, ht = hidden_pairs(Planted(d), items, 0, "answer")
    assert len(hv) == len(ht) == 10  # 5 vision + 5 text items, both orders
    v, (c_vis, c_txt) = fit_direction(Planted(d), items, 0, contrast="answer")
    assert float(v @ d) > 0.99 and c_vis > 0 > c_txt  # points toward the vision-answered states
    with pytest.raises(ValueError, match="contrast"):
        hidden_pairs(Planted(d), items, 0, "nope")
    with pytest.raises(ValueError, match="each modality"):
        hidden_pairs(Planted(d), items[:1], 0, "answer")  # only vision answers: no contrast


def test_amps_takes_one_statistic_per_layer(setup):
    ad, items = setup
    v = np.random.default_rng(4).standard_normal(16)
    _, ref = _states(ad, items)
    # layer 0 thinks every state is already on the vision side (no step); layer 1 pushes fully
    hook = SteeringHook([0, 1], v, 1.0, adaptive="amps", amps_stats={0: (-9.0, -10.0), 1: (10.0, 9.0)})
    _, out = _states(ad, items, hook)
    assert torch.equal(out[0], ref[0]) and not torch.equal(out[1], ref[1])
