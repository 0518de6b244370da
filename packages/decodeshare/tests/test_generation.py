"""Generation exact match: the cached greedy loop equals ``model.generate``, decode-only edits
reach it, and the protocol scores ``{"id", "task", "prompt", "target"}`` items."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decodeshare.core import random_basis
from decodeshare.hooks import DecodeOnlyIntervention, encode_left
from decodeshare.io import tiny_model
from decodeshare.protocol import Protocol
from decodeshare.readout import (
    chat_body,
    exact_match,
    generate_cached,
    generated_texts,
    normalise,
    prepare_gen,
)

torch.set_num_threads(1)
PROMPTS = ["2+2=", "the cat", "hello, world", "x y z w"]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param, seed=0)


def _items(tok, targets=None):
    return [{"id": str(i), "task": "gen", "prompt": p, "target": "" if targets is None else targets[i]}
            for i, p in enumerate(PROMPTS)]


def test_cached_greedy_equals_generate_and_counts_decode_passes(tiny):
    model, tok = tiny
    n = 6
    b = prepare_gen(model, tok, _items(tok), n)
    with DecodeOnlyIntervention(model, 1, torch.zeros(64, 1), 0.0) as iv:
        got = generate_cached(model, b)
    assert iv.calls == {"prefill": 0, "decode": n - 1}
    ids, mask = encode_left(tok, [chat_body(tok, p) for p in PROMPTS])
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=0, eos_token_id=None)[:, ids.shape[1]:]
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    torch.testing.assert_close(generate_cached(model, b), got, rtol=0, atol=0)  # the cache is restored


def test_exact_match_normalisation():
    assert normalise("  Paris.\nmore text") == "paris"
    assert exact_match(["Paris.", " 42 ", "4 2"], ["paris", "42", "42"]).tolist() == [1.0, 1.0, 0.0]


def test_protocol_scores_generation_and_patchback_restores_it(tiny):
    model, tok = tiny
    b = prepare_gen(model, tok, _items(tok), 6)
    clean = generated_texts(tok, b, generate_cached(model, b))
    items = _items(tok, clean)  # the targets are the clean continuations: clean exact match = 1
    rng = np.random.default_rng(0)
    dec = {t: rng.standard_normal((40, 64)) @ random_basis(64, 64, s).T * np.linspace(3, 0.1, 64)
           for s, t in enumerate(("a", "b", "c"))}
    proto = Protocol(model, tok, 1, dec, None, {"gen": items}, gen_tokens=6)
    assert proto.is_generation("gen")
    assert proto.correct("gen", proto.clean["gen"]).tolist() == [1.0] * len(PROMPTS)
    basis = random_basis(64, 24, 3)
    removed = proto.correct("gen", proto.run("gen", basis))
    assert removed.mean() < 1.0  # the decode-only removal reaches the generated text
    with DecodeOnlyIntervention(model, 1, torch.eye(64), record=True) as rec:
        proto.evaluate("gen")
    donor = [(h.double() @ torch.as_tensor(basis @ basis.T)).float() for h in rec.recorded]
    patched = proto.run("gen", basis, 1.0, "patch", donor=donor)
    assert proto.correct("gen", patched).tolist() == [1.0] * len(PROMPTS)
    assert all(c["prefill"] == 0 and c["decode"] == 5 for c in proto.all_calls)
