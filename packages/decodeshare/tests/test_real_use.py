"""Real-model details: generation ends at every id of ``generation_config.eos_token_id`` (Llama-3
chat models list two), and the width is read through ``text_config`` on multimodal wrappers."""

from __future__ import annotations

import pytest
import torch
from decodeshare.core import random_basis
from decodeshare.hooks import (
    DecodeOnlyIntervention,
    collect_decode_states,
    encode_left,
    eos_ids,
    hidden_size,
)
from decodeshare.io import tiny_model

torch.set_num_threads(1)


def test_collect_stops_at_every_eos_of_the_generation_config():
    model, tok = tiny_model("llama", seed=0)
    prompts = {"a": ["Question: 2+2", "Question: hello"], "b": ["Question: x"]}
    full = collect_decode_states(model, tok, prompts, 1, 5)
    assert sum(len(x) for x in full.values()) == 3 * 4  # nothing ends: 4 decode passes per prompt
    first, second = [], []
    for texts in prompts.values():  # left-padded per task, as collect batches them
        ids, mask = encode_left(tok, texts)
        new = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False,
                             pad_token_id=0)[:, ids.shape[1]:]
        first += new[:, 0].tolist()
        second += new[:, 1].tolist()
    stop = sorted(set(second))
    assert not set(stop) & set(first)
    model.generation_config.eos_token_id = [1, *stop]  # each row's second new token ends it
    try:
        assert eos_ids(model, tok) == [1, *stop]
        stopped = collect_decode_states(model, tok, prompts, 1, 5)
    finally:
        model.generation_config.eos_token_id = 1
    # the one decode pass that reads the first new token is kept, every pass after an EOS dropped
    assert sum(len(x) for x in stopped.values()) == 3


class _TextConfigOnly:
    """A multimodal wrapper's config: no top-level hidden_size, the decoder's under text_config."""

    def __init__(self, text):
        self.text = text

    def get_text_config(self):
        return self.text


def test_hidden_size_through_text_config():
    model, _ = tiny_model("llama", seed=0)
    wrapper = torch.nn.Module()
    wrapper.model = model  # layers at model.model.layers, as in Llava-style wrappers
    wrapper.config = _TextConfigOnly(model.config)
    assert not hasattr(wrapper.config, "hidden_size") and hidden_size(wrapper) == 64
    Q = torch.as_tensor(random_basis(64, 3, 0), dtype=torch.float32)
    with DecodeOnlyIntervention(wrapper, 1, Q, 1.0) as iv:
        model.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=3, min_new_tokens=3,
                       do_sample=False, pad_token_id=0)
    assert iv.calls == {"prefill": 0, "decode": 2}
    with pytest.raises(Exception, match="width"):
        DecodeOnlyIntervention(wrapper, 1, torch.zeros(32, 2), 1.0)


def test_char_tokenizer_round_trips():
    from decodeshare.io import char_tokenizer

    tok = char_tokenizer()
    assert tok.decode(tok("edcba 579", add_special_tokens=False).input_ids) == "edcba 579"
