"""ESP's mechanism on a small model whose masks predict: with the embedding-space probe ESP accepts
more than autoregressive decoding and more than the same tree, probes and items with the mask slots
left at the pad token's embedding (``esp-nullmask``)."""

import numpy as np
import pytest
from esp_decode.baselines import make_drafter
from esp_decode.config import ESPConfig
from esp_decode.core import mean_accepted_length
from esp_decode.decode import generate

TOKENS = 24
#: the tree the figures in README / docs were measured with (pinned: the defaults follow tune)
MECH = ESPConfig(num_masks=4, topk=(8, 4, 2, 2), max_nodes=48, mask_init="prompt_mean", attach="all")


def _accepted(model, prompts, name, cfg):
    dr = make_drafter(name, esp=cfg)
    new, st = generate(model, prompts, dr, TOKENS)
    mal = [mean_accepted_length(len(n), s["model_calls"]) for n, s in zip(new, st, strict=True)]
    return np.array(mal), new, st, dr


@pytest.fixture(scope="module")
def arms(trained_tiny):
    model, prompts = trained_tiny
    cfg = MECH
    return {name: _accepted(model, prompts, name, cfg) for name in ("ar", "esp", "esp-nullmask")}


def test_esp_accepts_more_than_ar_and_than_the_null_mask(arms):
    ar, esp, null = (arms[k][0] for k in ("ar", "esp", "esp-nullmask"))
    assert (ar == 1.0).all()
    assert esp.mean() > 1.4, esp.mean()                          # measured 1.66 (12 prompts x 24 tokens)
    assert esp.mean() - null.mean() > 0.2, (esp.mean(), null.mean())   # measured 1.66 vs 1.31
    assert (esp > null).sum() >= 9, (esp, null)                  # measured 11 of 12 prompts


def test_null_mask_keeps_the_tree_budget_and_the_items(arms):
    """Same tree shape and budget, same probes per host: only the mask slots' embedding differs, and
    both stay lossless."""
    _, esp_new, esp_st, _ = arms["esp"]
    _, null_new, null_st, _ = arms["esp-nullmask"]
    _, ar_new, _, _ = arms["ar"]
    assert esp_new == ar_new == null_new
    cfg = MECH
    for st in esp_st + null_st:
        assert max(st["tree_sizes"]) <= cfg.max_nodes
        # every call's items: root + nodes + num_masks per host (attach="all": root and every node)
        assert st["items"] == [(1 + t) * (1 + cfg.num_masks) for t in st["tree_sizes"]]


def test_mask_one_predicts_better_than_the_pad_embedding(trained_tiny, arms):
    """What the probe adds, pinned: the root's mask 1 top-1 accuracy against the model's own greedy
    token two steps ahead, with the prompt-mean embedding vs the pad's."""
    _, prompts = trained_tiny
    acc = {}
    for k in ("esp", "esp-nullmask"):
        _, new, _, dr = arms[k]
        acc[k] = dr.probe_accuracy([p + n for p, n in zip(prompts, new, strict=True)])["top1_depth1"]
    assert acc["esp"] > acc["esp-nullmask"] + 0.1, acc


def test_a_deeper_hosts_masks_equal_a_plain_causal_forward(trained_tiny):
    """After a call that accepted a path, the next tree's per-level distributions are the masks of
    the deepest accepted node: equal to a plain causal forward of context + accepted tokens + mask
    embeddings (positions contiguous), i.e. each mask sits right after its host."""
    import torch

    model, prompts = trained_tiny
    dr = make_drafter("esp", esp=MECH)
    seen = []
    orig = dr.observe

    def spy(b, rec):
        orig(b, rec)
        if rec.accepted:
            seen.append((list(rec.context), [rec.tree.tokens[a] for a in rec.accepted], dr.pending[b].clone()))

    dr.observe = spy
    generate(model, prompts[:1], dr, TOKENS)
    assert len(seen) >= 3
    emb = model.get_input_embeddings()
    mvec = dr.mask_vector(0)
    k = dr.cfg.num_masks
    for ctx, acc, pending in seen[:3]:
        with torch.no_grad():
            x = torch.cat([emb(torch.tensor([ctx + acc])), mvec.expand(1, k, -1)], 1)
            want = torch.softmax(model(inputs_embeds=x).logits[0, -k:].float(), -1)
        torch.testing.assert_close(pending, want, atol=1e-4, rtol=1e-3)


def test_tiny_lm_trains_a_fixed_step_count_whatever_the_budget():
    """The reproduction's tiny LM: the CPU-time budget is reported, never a stop; the train and
    held-out curves have one point per ``eval_every`` steps."""
    from esp_decode.tiny import train_tiny

    _, _, info = train_tiny(0, 0.0, 4, d=16, layers=1, seq=16, batch=3, eval_every=2)
    assert info["steps"] == 4 and info["over_budget"]
    assert info["curve"]["steps"] == [2, 4] and len(info["curve"]["heldout"]) == 2
