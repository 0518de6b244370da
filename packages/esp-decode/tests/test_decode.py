"""Lossless decoding, call counts, KV rollback and the mask mechanism on tiny random models."""

import contextlib

import pytest
import torch
from esp_decode import ESPDecoder
from esp_decode.baselines import DRAFTERS, make_drafter
from esp_decode.config import ESPConfig, PLDConfig
from esp_decode.decode import generate

PROMPTS = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8], [3, 4] * 6 + [5]]
KNOBS = {"esp": [dict(esp=ESPConfig()), dict(esp=ESPConfig(num_masks=2, topk=(3, 2), max_nodes=5)),
                 dict(esp=ESPConfig(attach="root", mask_init="context_mean")),
                 dict(esp=ESPConfig(num_masks=3, topk=(4, 2, 2), max_nodes=16, attach="top")),
                 dict(esp=ESPConfig(shape="chain", mask_init="vocab_mean"))]}


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_every_drafter_equals_greedy_batch_1_and_3(tiny_models, arch, greedy):
    model = tiny_models[arch]
    refs = [greedy(model, p, 16) for p in PROMPTS]
    for name in DRAFTERS:
        for kw in KNOBS.get(name, [{}]):
            batched, stats = generate(model, PROMPTS, make_drafter(name, **kw), 16)
            assert batched == refs, (arch, name, kw)
            single = generate(model, [PROMPTS[1]], make_drafter(name, **kw), 16)[0][0]
            assert single == refs[1], (arch, name, kw)
            for st in stats:
                assert all(a >= 1 for a in st["accepted_lengths"])   # each call accepts >= 1 token
                assert st["model_calls"] <= st["new_tokens"]
                assert max(st["tree_sizes"]) <= kw.get("esp", ESPConfig()).max_nodes


@contextlib.contextmanager
def counted_forward(model):
    """Counts calls of the base model's forward (what `model_calls` must equal)."""
    base, counter = model.model, {"n": 0}
    orig = base.forward

    def counted(*a, **k):
        counter["n"] += 1
        return orig(*a, **k)

    base.forward = counted
    try:
        yield counter
    finally:
        del base.forward


def test_pld_with_one_match_makes_exactly_transformers_prompt_lookup_calls(tiny_llama):
    with counted_forward(tiny_llama) as counter:
        for prompt in PROMPTS:
            counter["n"] = 0
            out = tiny_llama.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                      max_new_tokens=20, do_sample=False, prompt_lookup_num_tokens=10,
                                      max_matching_ngram_size=2, pad_token_id=0)
            hf_calls = counter["n"]
            counter["n"] = 0
            new, st = generate(tiny_llama, [prompt], make_drafter("pld", pld=PLDConfig(max_matches=1)), 20)
            assert new[0] == out[0, len(prompt):].tolist()
            assert st[0]["model_calls"] == counter["n"] == hf_calls   # the counter around forward agrees


def test_every_drafter_stops_at_eos_where_model_generate_does(tiny_llama, greedy):
    eos = greedy(tiny_llama, PROMPTS[0], 16)[3]   # a token greedy decoding emits early
    refs = []
    for p in PROMPTS:
        out = tiny_llama.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                  max_new_tokens=16, do_sample=False, pad_token_id=0, eos_token_id=eos)
        refs.append(out[0, len(p):].tolist())
    assert refs[0][-1] == eos and len(refs[0]) <= 4 and any(len(r) != len(refs[0]) for r in refs)
    for name in DRAFTERS:
        new, st = generate(tiny_llama, PROMPTS, make_drafter(name, eos_token_id=eos), 16, eos_token_id=eos)
        assert new == refs, name
        assert [s["new_tokens"] for s in st] == [len(r) for r in refs], name


def test_model_calls_equal_a_counter_around_forward_for_every_drafter(tiny_llama):
    with counted_forward(tiny_llama) as counter:
        for name in DRAFTERS:
            for prompt in PROMPTS:
                counter["n"] = 0
                _, st = generate(tiny_llama, [prompt], make_drafter(name), 12)
                assert st[0]["model_calls"] == counter["n"] and counter["n"] >= 2, name


def test_decode_path_emits_no_deprecation_warning(tiny_llama):
    """transformers 5 renamed the cache keyword (``past_key_values`` -> ``cache``; the old name
    warns): the loop, the shared prefill and the reference pass the current name, also when the
    decoder's ``forward`` is wrapped (a call counter, an accelerate hook)."""
    import copy
    import warnings

    from esp_decode.decode import stack_caches
    from esp_decode.smol import hf_greedy, prefill

    base = tiny_llama.model
    orig = base.forward
    base.forward = lambda *a, **k: orig(*a, **k)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for name in DRAFTERS:
                generate(tiny_llama, PROMPTS, make_drafter(name), 6)
            pres = [prefill(tiny_llama, p) for p in PROMPTS]
            hf_greedy(tiny_llama, PROMPTS[0], 4, None, pres[0])
            stacked, lengths = stack_caches(tiny_llama, pres)
            generate(tiny_llama, PROMPTS, make_drafter("esp"), 4, cache=copy.deepcopy(stacked), cache_lengths=lengths)
            generate(tiny_llama, PROMPTS[:1], make_drafter("esp"), 4, temperature=0.8, seed=0)
    finally:
        del base.forward
    bad = [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    assert not bad, bad


def test_num_masks_zero_is_autoregressive(tiny_llama):
    ar_new, ar_st = generate(tiny_llama, PROMPTS, make_drafter("ar"), 12)
    new, st = generate(tiny_llama, PROMPTS, make_drafter("esp", esp=ESPConfig(num_masks=0)), 12)
    assert new == ar_new
    assert [s["model_calls"] for s in st] == [s["model_calls"] for s in ar_st] == [12, 12, 12]


def test_a_shared_prefill_gives_the_same_tokens_and_calls(tiny_llama):
    """One prompt's prefill copied into each drafter's cache (as the reproduction does): same output
    and the same call count as a fresh decode; a cache as long as the prompt is refused."""
    import copy

    from esp_decode.smol import hf_greedy, prefill

    from icml26_shared import UserError

    prompt = PROMPTS[0]
    pre = prefill(tiny_llama, prompt)
    assert pre.get_seq_length() == len(prompt) - 1
    assert hf_greedy(tiny_llama, prompt, 10, None, pre) == hf_greedy(tiny_llama, prompt, 10, None)
    for name in ("pld", "esp", "esp+pld"):
        fresh, st = generate(tiny_llama, [prompt], make_drafter(name), 10)
        shared, st2 = generate(tiny_llama, [prompt], make_drafter(name), 10, cache=copy.deepcopy(pre))
        assert shared == fresh and st2[0]["model_calls"] == st[0]["model_calls"], name
    with pytest.raises(UserError, match="longer"):
        generate(tiny_llama, [prompt[:3]], make_drafter("ar"), 4, cache=copy.deepcopy(pre))


def test_stacked_prefills_decode_as_one_batch_equal_to_batch_1(tiny_llama):
    """Per-prompt prefills of unequal lengths stacked into one padded cache (the reproduction's
    batched SmolLM2 path): every drafter gives, row by row, the tokens and calls of batch 1."""
    import copy

    from esp_decode.decode import stack_caches
    from esp_decode.smol import prefill

    from icml26_shared import UserError

    prompts = [PROMPTS[0], PROMPTS[1][:5], PROMPTS[2]]
    assert len({len(p) for p in prompts}) == 3
    stacked, lengths = stack_caches(tiny_llama, [prefill(tiny_llama, p) for p in prompts])
    assert lengths == [len(p) - 1 for p in prompts] and stacked.get_seq_length() == max(lengths)
    for name in ("ar", "pld", "lade", "stand", "esp", "esp+pld"):
        single = [generate(tiny_llama, [p], make_drafter(name), 10) for p in prompts]
        new, st = generate(tiny_llama, prompts, make_drafter(name), 10, cache=copy.deepcopy(stacked),
                           cache_lengths=lengths)
        assert new == [s[0][0] for s in single], name
        assert [x["model_calls"] for x in st] == [s[1][0]["model_calls"] for s in single], name
        if name in ("pld", "esp+pld"):   # not a short-circuit: drafts get accepted on the repetitive prompts
            assert max(x["mean_accepted_length"] for x in st) > 1.0, name
    with pytest.raises(UserError, match="cache_lengths"):
        generate(tiny_llama, prompts, make_drafter("ar"), 4, cache=copy.deepcopy(stacked), cache_lengths=lengths[:2])


def test_rollback_leaves_the_cache_of_a_fresh_prefill(tiny_llama):
    from transformers import DynamicCache

    cache = DynamicCache(config=tiny_llama.config)
    prompt = PROMPTS[0]
    new, _ = generate(tiny_llama, [prompt], make_drafter("esp+pld"), 10, cache=cache)
    kept = prompt + new[0][:-1]
    fresh = tiny_llama(input_ids=torch.tensor([kept]), use_cache=True).past_key_values
    assert cache.get_seq_length() == len(kept)
    for a, b in zip(cache.layers, fresh.layers, strict=True):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-5)


def test_esp_tree_comes_from_the_mask_tokens(tiny_llama):
    """The second call's level-1 candidates are the top-K of mask 1's distribution computed
    independently (prompt + mask embeddings, plain causal forward)."""
    prompt = PROMPTS[2]
    cfg = ESPConfig(num_masks=3, topk=(4, 2, 2), max_nodes=20, mask_init="prompt_mean")
    dr = make_drafter("esp", esp=cfg)
    seen = []
    orig = dr.draft

    def spy(b, ctx, depth):
        tree, probes = orig(b, ctx, depth)
        seen.append((list(ctx), tree))
        return tree, probes

    dr.draft = spy
    generate(tiny_llama, [prompt], dr, 3)
    emb = tiny_llama.get_input_embeddings()
    mvec = emb.weight[torch.tensor(prompt)].mean(0)
    with torch.no_grad():
        x = torch.cat([emb(torch.tensor([prompt])), mvec.expand(1, 3, -1)], 1)
        logits = tiny_llama(inputs_embeds=x).logits[0]
    bonus = seen[1][0][-1]
    assert bonus == int(logits[len(prompt) - 1].argmax())
    level1 = [tok for tok, par in zip(seen[1][1].tokens, seen[1][1].parents, strict=True) if par == -1]
    assert sorted(level1) == sorted(torch.topk(logits[len(prompt)], 4).indices.tolist())   # mask 1 -> t+2
    assert len(seen[0][1]) == 0   # prefill: no predictions yet, masks only


def test_sampling_preserves_the_target_distribution_end_to_end(make_tiny, two_step_law_pvalue):
    """Joint law of tokens 2 and 3 under ESP trees (token 2 is drafted by the tree of the second
    call: with only 2 tokens no tree would be verified) equals the model's, marginalised over
    token 1 (chi-square)."""
    model = make_tiny("llama", vocab=5, seed=3)
    prompt = [1, 2, 3, 1]
    n = 1000
    new, stats = generate(model, [prompt] * n, make_drafter("esp", esp=ESPConfig(num_masks=2, topk=(3, 2), max_nodes=6)),
                          3, temperature=1.0, seed=0)
    assert all(s["tree_sizes"][1] > 0 for s in stats)
    assert two_step_law_pvalue(model, prompt, new) > 1e-3


def test_decoder_api_and_unsupported_models(tiny_llama, greedy):
    out, stats = ESPDecoder(tiny_llama, None).generate(torch.tensor([PROMPTS[0]]), 8)
    assert out[0, len(PROMPTS[0]):].tolist() == greedy(tiny_llama, PROMPTS[0], 8)
    assert stats["model_calls"] >= 1 and sum(stats["accepted_lengths"]) == 8
    from transformers import GPT2Config, GPT2LMHeadModel

    from icml26_shared import UserError

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=20))
    with pytest.raises(UserError, match="4-D"):
        generate(gpt2, [[1, 2]], make_drafter("esp"), 4)
    with pytest.raises(UserError, match="max_new_tokens"):
        generate(tiny_llama, [[1, 2]], make_drafter("esp"), 0)


def test_lazy_head_and_depth_wise_verification_match_the_full_computation(tiny_llama):
    """``ItemProbs`` rows equal the softmax of the LM head over every item, and the batched
    depth-wise greedy verification equals ``core.verify_greedy`` on the full argmax, row by row;
    the head runs only on the root and the accepted path."""
    from esp_decode.core import build_tree, verify_greedy
    from esp_decode.decode import ItemProbs, verify_greedy_batched

    head = tiny_llama.get_output_embeddings()
    seen = {"rows": 0}

    def counting(x):
        seen["rows"] += x.shape[0]
        return torch.nn.functional.linear(x, head.weight)

    counting.weight = head.weight
    g = torch.Generator().manual_seed(0)
    hiddens, trees, items = [], [], []
    for k in range(3):
        h = torch.randn(12, tiny_llama.config.hidden_size, generator=g)
        full = head(h).float()
        # trees whose level 1 holds the root's argmax, so some rows accept a path
        probs = torch.softmax(full[:3] * 3, -1)
        tree = build_tree(probs, (4, 2, 2), 8 + k)
        hiddens.append((h, full))
        trees.append(tree)
        items.append(ItemProbs(h[: 1 + len(tree) + 2], counting, 0.0))
    out = verify_greedy_batched(items, trees)
    for (_h, full), tree, got in zip(hiddens, trees, out, strict=True):
        assert got == verify_greedy(tree, full[: 1 + len(tree)].argmax(-1).tolist())
    assert seen["rows"] == sum(1 + len(acc) for acc, _ in out) < sum(1 + len(t) for t in trees)
    h, full = hiddens[0]
    m = len(items[0])
    torch.testing.assert_close(items[0][[m - 1, 0]], torch.softmax(full[[m - 1, 0]], -1))
    torch.testing.assert_close(items[0][1:3], torch.softmax(full[1:3], -1))
    assert items[0].shape == (m, full.shape[-1])


@pytest.mark.parametrize("warp", [dict(top_k=3), dict(top_p=0.7)])
def test_top_k_top_p_sampling_follows_the_warped_distribution(make_tiny, warp):
    """Tokens 2-3 sampled through ESP trees follow the joint law of transformers' top-k / top-p
    warped target (chi-square on the cells the warp keeps; no sample where it removes mass)."""
    import numpy as np
    from scipy.stats import chisquare
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    model = make_tiny("llama", vocab=5, seed=3)
    w = TopKLogitsWarper(warp["top_k"]) if "top_k" in warp else TopPLogitsWarper(warp["top_p"])
    prompt = [1, 2, 3, 1]
    n = 1000
    new, stats = generate(model, [prompt] * n, make_drafter("esp", esp=ESPConfig(num_masks=2, topk=(3, 2), max_nodes=6)),
                          3, temperature=1.0, seed=0, **warp)
    assert all(s["tree_sizes"][1] > 0 for s in stats)

    def law(ids):
        with torch.no_grad():
            return torch.softmax(w(None, model(input_ids=torch.tensor(ids)).logits[:, -1].float()), -1)

    p1 = law([prompt])[0]
    p2 = law([[*prompt, t] for t in range(5)])
    p3 = law([[*prompt, a, b] for a in range(5) for b in range(5)]).reshape(5, 5, 5)
    expected = (p1[:, None, None] * p2[:, :, None] * p3).sum(0).double().numpy().ravel()
    counts = np.zeros(25)
    for _, b, c in new:
        counts[b * 5 + c] += 1
    keep = expected > 0
    assert counts[~keep].sum() == 0 and (~keep).any()     # the warp removed mass, and no sample landed there
    assert chisquare(counts[keep], expected[keep] * n / expected[keep].sum()).pvalue > 1e-3
