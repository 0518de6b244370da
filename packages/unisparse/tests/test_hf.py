"""The Hugging Face patch on a tiny Llama built here: identical greedy generation at full density,
dense decoding with the KV cache, clean unpatch, clear errors."""

from __future__ import annotations

import copy

import pytest
import torch
import unisparse
from unisparse.io import patch_state

transformers = pytest.importorskip("transformers")


@pytest.fixture
def ids():
    return torch.randint(0, 96, (1, 150), generator=torch.Generator().manual_seed(1))


def test_full_density_generates_the_same_tokens(tiny, ids):
    with torch.no_grad():
        want = tiny.generate(ids, max_new_tokens=10, do_sample=False)
        ref_logits = tiny(ids).logits
    model = unisparse.patch(tiny, method="unisparse", density=1.0, block_size=32, min_seq_len=64)
    try:
        assert model is tiny
        with torch.no_grad():
            got = tiny.generate(ids, max_new_tokens=10, do_sample=False)
            logits = tiny(ids).logits
        st = patch_state(tiny)
        assert st.calls_sparse >= 2, "the prefill must take the sparse path"
        assert st.densities and min(st.densities) == 1.0
        torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-4)
        assert torch.equal(got, want)
    finally:
        unisparse.unpatch(tiny)


def test_sparse_prefill_changes_logits_but_decoding_stays_dense(tiny, ids):
    with torch.no_grad():
        ref = tiny(ids, use_cache=True)
    unisparse.patch(tiny, method="unisparse", density=0.2, block_size=16, min_seq_len=32)
    try:
        with torch.no_grad():
            sparse = tiny(ids, use_cache=True)
            assert not torch.allclose(sparse.logits, ref.logits), "density 0.2 should be sparse"
            st = patch_state(tiny)
            before = st.calls_dense
            # one decoding step from the *same* cache: patched == unpatched (dense path)
            nxt = torch.tensor([[5]])
            cache = copy.deepcopy(ref.cache)  # transformers 5: `cache`, not `past_key_values`
            a = tiny(nxt, cache=cache, use_cache=True).logits
            assert st.calls_dense == before + tiny.config.num_hidden_layers
    finally:
        unisparse.unpatch(tiny)
    with torch.no_grad():
        b = tiny(nxt, cache=copy.deepcopy(ref.cache), use_cache=True).logits
    torch.testing.assert_close(a, b)


def test_unpatch_restores(tiny, ids):
    with torch.no_grad():
        before = tiny(ids).logits
    original = tiny.config._attn_implementation
    unisparse.patch(tiny, method="xattention", density=0.3, block_size=16)
    unisparse.patch(tiny, method="minference", density=0.3, block_size=16)  # re-patch
    unisparse.unpatch(tiny)
    assert tiny.config._attn_implementation == original
    assert patch_state(tiny) is None
    assert not any(hasattr(m, "_unisparse") for m in tiny.modules())
    with torch.no_grad():
        assert torch.equal(tiny(ids).logits, before)


def test_short_prompts_and_padding_stay_dense(tiny):
    unisparse.patch(tiny, method="unisparse", density=0.2, block_size=16, min_seq_len=64)
    try:
        st = patch_state(tiny)
        with torch.no_grad():
            tiny(torch.randint(0, 96, (1, 40)))
            assert st.calls_sparse == 0
            x = torch.randint(0, 96, (2, 80))
            am = torch.ones_like(x)
            am[1, :10] = 0  # left padding: an explicit mask, so the dense path
            tiny(x, attention_mask=am)
            assert st.calls_sparse == 0
    finally:
        unisparse.unpatch(tiny)


def test_cpu_prompts_below_the_break_even_stay_dense_by_default(tiny, ids):
    """No ``min_seq_len``: on a CPU a prompt shorter than the measured break-even stays dense
    (issue 45 item 7); an explicit ``min_seq_len`` still sends it sparse."""
    from unisparse.io import CPU_MIN_SEQ_LEN, default_min_seq_len

    assert default_min_seq_len("cpu", 64) == CPU_MIN_SEQ_LEN > ids.shape[1]
    assert default_min_seq_len("meta", 64) == 128  # not a CPU: two blocks
    unisparse.patch(tiny, method="unisparse", density=0.2, block_size=16)
    try:
        with torch.no_grad():
            tiny(ids)
        assert patch_state(tiny).calls_sparse == 0 and patch_state(tiny).calls_dense > 0
    finally:
        unisparse.unpatch(tiny)
    unisparse.patch(tiny, method="unisparse", density=0.2, block_size=16, min_seq_len=32)
    try:
        with torch.no_grad():
            tiny(ids)
        assert patch_state(tiny).calls_sparse == tiny.config.num_hidden_layers
    finally:
        unisparse.unpatch(tiny)


def test_unsupported_family_is_a_user_error():
    from icml26_shared import UserError

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=64))
    with pytest.raises(UserError, match="unsupported model family 'gpt2'"):
        unisparse.patch(gpt2)


def test_bad_patch_options_are_user_errors(tiny):
    from icml26_shared import UserError

    with pytest.raises(UserError, match="divide"):
        unisparse.patch(tiny, block_size=32, granularities=(12,))
    with pytest.raises(UserError, match="unknown method"):
        unisparse.patch(tiny, method="bogus")
    assert patch_state(tiny) is None


@pytest.mark.parametrize("family", ["Qwen2", "Mistral", "Qwen3"])
def test_other_families_full_density_is_exact(family):
    cfg_cls = getattr(transformers, f"{family}Config", None)
    model_cls = getattr(transformers, f"{family}ForCausalLM", None)
    if cfg_cls is None or model_cls is None:
        pytest.skip(f"{family} not in this transformers")
    torch.manual_seed(0)
    cfg = cfg_cls(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  head_dim=16)
    model = model_cls(cfg).eval()
    x = torch.randint(0, 96, (1, 130), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(x).logits
        unisparse.patch(model, method="unisparse", density=1.0, block_size=32, min_seq_len=64)
        got = model(x).logits
        assert patch_state(model).calls_sparse == 2
        unisparse.unpatch(model)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
