"""Phase-aware hooks on tiny random-init Llama and Qwen2 models: pass counts inside generate,
identities at alpha = 0 / 1, patchback, forced choice against a no-cache reference, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decodeshare.core import random_basis
from decodeshare.hooks import DecodeOnlyIntervention, collect_decode_states, get_layer
from decodeshare.io import tiny_model
from decodeshare.readout import prepare, score, score_no_cache
from decodeshare.tasks import by_task, make_tasks

from icml26_shared import UserError

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param, seed=0)


@pytest.fixture(scope="module")
def batch(tiny):
    model, tok = tiny
    items = by_task(make_tasks(3, seed=1, tasks=("larger",)))["larger"]
    return prepare(model, tok, items)


def Q4(d=64, seed=0):
    return torch.as_tensor(random_basis(d, 4, seed), dtype=torch.float32)


def test_generate_touches_no_prefill_and_every_decode_pass(tiny):
    model, tok = tiny
    ids = tok(["Question: 2+2"], return_tensors="pt")
    for n in (2, 5):
        with DecodeOnlyIntervention(model, 1, Q4(), 1.0) as iv:
            model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        assert iv.calls == {"prefill": 0, "decode": n - 1}
        assert iv.seen == {"prefill": 1, "decode": n - 1}


def test_alpha_zero_is_bit_exact_and_alpha_one_removes_the_subspace(tiny, batch):
    model, _ = tiny
    clean = score(model, batch)
    with DecodeOnlyIntervention(model, 1, Q4(), 0.0) as iv:
        assert np.array_equal(score(model, batch), clean)
    assert iv.calls["decode"] > 0
    seen = []
    layer = get_layer(model, 1)
    Q = Q4()
    with DecodeOnlyIntervention(model, 1, Q, 1.0):
        h = layer.register_forward_hook(lambda m, a, out: seen.append(
            (out[0] if isinstance(out, tuple) else out).detach().clone()))
        removed = score(model, batch)
        h.remove()
    assert seen and all((x @ Q).abs().max() < 1e-5 for x in seen if x.shape[1] == 1)
    assert not np.allclose(removed, clean, atol=1e-4)  # the removal is not a no-op


def test_each_decode_pass_loses_exactly_its_shared_component(tiny):
    """Hooks around the intervention see the layer's output before and after it: at alpha a decode
    pass becomes h - alpha Q Q^T h (the part orthogonal to Q untouched), the prefill stays h."""
    model, tok = tiny
    layer = get_layer(model, 1)
    Q = Q4()
    before, after = [], []

    def grab(store):
        return lambda m, a, out: store.append((out[0] if isinstance(out, tuple) else out).detach().clone())

    ids = tok(["Question: 2+2"], return_tensors="pt")
    pre = layer.register_forward_hook(grab(before))  # registered first: runs before the intervention
    try:
        with DecodeOnlyIntervention(model, 1, Q, 0.7):
            post = layer.register_forward_hook(grab(after))
            model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
            post.remove()
    finally:
        pre.remove()
    assert len(before) == len(after) == 4 and before[0].shape[1] > 1
    torch.testing.assert_close(after[0], before[0], rtol=0, atol=0)  # the prefill: untouched
    for h, out in zip(before[1:], after[1:], strict=True):
        torch.testing.assert_close(out, h - 0.7 * (h @ Q) @ Q.T, rtol=1e-5, atol=1e-5)
        assert (h @ Q).abs().max() > 1e-3  # there was a shared component to remove


def test_prefill_is_never_modified(tiny, batch):
    model, tok = tiny
    item = batch.items[0]
    Q = Q4()
    layer = get_layer(model, 0)
    seen = []
    with DecodeOnlyIntervention(model, 0, Q, 1.0):
        h = layer.register_forward_hook(lambda m, a, out: seen.append(
            (out[0] if isinstance(out, tuple) else out).detach().clone()))
        prepare(model, tok, [item])
        h.remove()
    assert len(seen) == 1 and seen[0].shape[1] > 1 and (seen[0] @ Q).abs().max() > 1e-3


def test_full_window_patchback_restores_clean_logits(tiny, batch):
    model, _ = tiny
    clean = score(model, batch)
    Q = Q4()
    with DecodeOnlyIntervention(model, 1, Q, record=True) as rec:
        score(model, batch)
    with DecodeOnlyIntervention(model, 1, Q, 1.0, "patch", donor=rec.recorded) as iv:
        patched = score(model, batch)
    np.testing.assert_allclose(patched, clean, atol=1e-4)
    assert iv.calls["decode"] == len(rec.recorded) and iv.calls["prefill"] == 0
    with DecodeOnlyIntervention(model, 1, Q, 1.0, "patch", donor=rec.recorded[::-1]):
        shuffled = score(model, batch)
    assert not np.allclose(shuffled, clean, atol=1e-4)  # a time-shuffled donor does not restore


def test_forced_choice_with_the_cache_equals_a_no_cache_reference(tiny, batch):
    model, tok = tiny
    got = score(model, batch)
    ref = np.stack([score_no_cache(model, tok, it) for it in batch.items])
    assert max(len(o) for row in batch.options for o in row) > 1  # multi-token options
    np.testing.assert_allclose(got, ref, atol=2e-4)
    np.testing.assert_array_equal(score(model, batch), got)  # the shared cache is restored


def test_collect_counts_and_phases(tiny):
    model, tok = tiny
    prompts = {"a": ["Question: hello", "Question: hi there"], "b": ["Question: x y z"]}
    st = collect_decode_states(model, tok, prompts, [0, 1], 4, phase="both")
    assert st["prefill"][1]["a"].shape == (2, 64)
    assert st["decode"][0]["b"].shape[0] <= 3 and st["decode"][1]["a"].shape[1] == 64


def test_bad_input_is_a_user_error(tiny):
    model, _ = tiny
    with pytest.raises(UserError, match="out of range"):
        DecodeOnlyIntervention(model, 7, Q4(), 1.0)
    with pytest.raises(UserError, match="width"):
        DecodeOnlyIntervention(model, 0, torch.zeros(32, 2), 1.0)
