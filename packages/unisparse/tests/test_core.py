"""What the method guarantees: pooling identities, exactness at full density, forced blocks,
causality, top-p minimality and monotonicity, budgets, recall of the full mask."""

from __future__ import annotations

import math

import pytest
import torch
from unisparse import METHODS, SparseConfig, attention_recall, core, estimate_block_mask
from unisparse.sparse import sparse_prefill_attention


def qkv(b=1, h=4, hkv=2, t=200, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, t, d, generator=g), torch.randn(b, hkv, t, d, generator=g),
            torch.randn(b, hkv, t, d, generator=g))


def dense_causal(q, k, v):
    g = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1),
        is_causal=True)


def test_avg_pool_is_mean_of_members():
    x = torch.randn(2, 3, 10, 4)
    p = core.avg_pool_seq(x, 4)
    assert p.shape == (2, 3, 3, 4)
    torch.testing.assert_close(p[:, :, 1], x[:, :, 4:8].mean(2))
    torch.testing.assert_close(p[:, :, 2], x[:, :, 8:10].mean(2))  # ragged group: real members only


def test_granularity_one_gives_exact_block_attention():
    q, k, _ = qkv(t=70)
    bs = 16
    got = core.composite_block_scores(q, k.repeat_interleave(2, 1), 1, 70, 70, bs, 1 / 4)
    p = torch.softmax((q @ k.repeat_interleave(2, 1).transpose(-1, -2) / 4).masked_fill(
        torch.ones(70, 70, dtype=torch.bool).triu(1), -math.inf), -1)
    p = torch.nn.functional.pad(p, (0, 80 - 70, 0, 80 - 70)).reshape(1, 4, 5, 16, 5, 16)
    want = p.sum(-1).sum(3) / torch.tensor([16, 16, 16, 16, 6.0])[:, None]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.sum(-1), torch.ones(1, 4, 5), atol=1e-5, rtol=0)


@pytest.mark.parametrize("t,s", [(200, 200), (150, 230), (64, 64)])
def test_block_attention_mass_is_the_exact_block_mass(t, s):
    """The oracle's mass (0.3.8: tiled over the causal triangle) equals the dense fp64 softmax
    summed per block over all queries / T: a prefill, a chunk with ragged blocks, one block."""
    g = torch.Generator().manual_seed(t + s)
    q, k = torch.randn(1, 4, t, 16, generator=g) * 3, torch.randn(1, 2, s, 16, generator=g) * 3
    sc = q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2) / 4
    p = torch.softmax(sc.masked_fill(torch.arange(s)[None, :] > torch.arange(t)[:, None] + s - t,
                                     -math.inf), -1)
    nq, nk = math.ceil(t / 32), math.ceil(s / 32)
    p = torch.nn.functional.pad(p, (0, nk * 32 - s, 0, nq * 32 - t))
    want = p.reshape(1, 4, nq, 32, nk, 32).sum((3, 5)) / t
    torch.testing.assert_close(core.block_attention_mass(q, k, 32).double(), want,
                               atol=1e-6, rtol=1e-5)


def _composite_reference(qc, kc, g, gk, t, s, bs, scale):
    """The composite-level causal softmax in one piece, summed onto the block grid (fp64)."""
    mq, mk = qc.shape[2], kc.shape[2]
    last_q = (torch.arange(mq) * g + g - 1).clamp(max=t - 1) + (s - t)
    sc = (qc.double() @ kc.double().transpose(-1, -2)) * scale
    p = torch.softmax(sc.masked_fill((torch.arange(mk) * gk)[None, :] > last_q[:, None],
                                     -math.inf), -1)
    nq, nk = math.ceil(t / bs), math.ceil(s / bs)
    rq, rk = bs // g, bs // gk
    p = torch.nn.functional.pad(p, (0, nk * rk - mk, 0, nq * rq - mq))
    blk = p.reshape(*p.shape[:2], nq, rq, nk, rk).sum((3, 5))
    real = torch.nn.functional.pad(torch.ones(mq), (0, nq * rq - mq)).reshape(nq, rq).sum(1)
    return (blk / real[:, None]).float()


@pytest.mark.parametrize("t,s,g,gk", [(300, 300, 16, 1), (250, 330, 16, 4), (300, 300, 4, 2),
                                      (290, 290, 16, 16)])
def test_tiled_composite_scores_equal_the_one_piece_softmax(t, s, g, gk, monkeypatch):
    """0.3.6's tiled estimate (row chunks x key tiles, rescaled to a running max) with tiles far
    smaller than the input: many chunks and tiles, ragged query and key blocks, a chunk offset,
    large logits (a tile max far below the row max must be rescaled, not dropped)."""
    monkeypatch.setattr(core, "KEY_TILE", 32)
    monkeypatch.setattr(core, "SCORE_CHUNK_ELEMS", 2 * 4 * 64)
    gen = torch.Generator().manual_seed(t + g)
    q, k = torch.randn(1, 2, t, 8, generator=gen) * 4, torch.randn(1, 2, s, 8, generator=gen) * 4
    qc, kc = core.avg_pool_seq(q, g), core.avg_pool_seq(k, gk)
    got = core.composite_block_scores(qc, kc, g, t, s, 16, 0.5, gk)
    torch.testing.assert_close(got, _composite_reference(qc, kc, g, gk, t, s, 16, 0.5),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_full_density_is_dense_attention(method):
    q, k, v = qkv(t=150)
    out = sparse_prefill_attention(q, k, v, method=method, block_size=32, density=1.0)
    assert (out.double() - dense_causal(q, k, v)).abs().max() < 1e-5
    out = sparse_prefill_attention(q, k, v, method=method, block_size=32, density=None, tau=1.0)
    assert (out.double() - dense_causal(q, k, v)).abs().max() < 1e-5


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("budget", [dict(density=0.1), dict(density=0.3, allocation="row"),
                                    dict(density=None, tau=0.5), dict(density=0.2, tau=0.8)])
def test_sink_and_local_kept_and_nothing_above_diagonal(method, budget):
    q, k, _ = qkv(t=300, seed=3)
    cfg = SparseConfig(method=method, block_size=16, local_blocks=2, **budget)
    mask = estimate_block_mask(q, k, cfg)
    n = mask.shape[-1]
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    assert not (mask & ~tril).any(), "a block above the causal diagonal was kept"
    assert mask[..., :, 0].all(), "sink column dropped"
    assert mask.diagonal(dim1=-2, dim2=-1).all(), "diagonal block dropped"
    assert mask.diagonal(offset=-1, dim1=-2, dim2=-1).all(), "local band dropped"


def test_density_budget_is_respected():
    q, k, _ = qkv(t=512, seed=1)
    for alloc in ("head", "row"):
        mask = estimate_block_mask(q, k, block_size=16, density=0.25, allocation=alloc)
        dens = core.block_density(mask, 512, 512, 16)
        forced = core.forced_blocks(512, 512, 16, 1, 1).sum() / core.causal_block_valid(512, 512, 16).sum()
        assert (dens <= max(0.25, forced) + 1 / 32 + 1e-6).all(), (alloc, dens)
        assert (dens >= 0.2).all()


def test_top_p_is_minimal_and_monotone():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(1, 2, 8, 8, generator=g)
    valid = torch.ones(8, 8, dtype=torch.bool).tril()
    scores = core.normalize_rows(scores, valid)
    forced = torch.zeros(8, 8, dtype=torch.bool)
    prev = None
    for tau in (0.3, 0.5, 0.7, 0.9):
        mask = core.select_blocks(scores, valid, forced, tau=tau)
        mass = (scores * mask).sum(-1)
        assert (mass >= tau - 1e-6).all()
        # dropping the smallest kept block falls below tau (minimality)
        smallest = torch.where(mask, scores, torch.full_like(scores, 9.0)).amin(-1)
        assert (mass - smallest < tau).all()
        if prev is not None:
            assert (prev <= mask).all(), "selection must grow with tau"
        prev = mask


def test_min_blocks_respected():
    q, k, _ = qkv(t=256)
    mask = estimate_block_mask(q, k, block_size=16, density=None, tau=0.01, min_blocks=5)
    valid = core.causal_block_valid(256, 256, 16)
    assert (mask.sum(-1) >= valid.sum(-1).clamp(max=5)).all()


def test_recall_of_full_mask_is_one_and_error_zero():
    q, k, v = qkv(t=100)
    full = core.causal_block_valid(100, 100, 32).expand(1, 4, -1, -1)
    torch.testing.assert_close(attention_recall(q, k, full, 32), torch.ones(1, 4))
    part = full.clone()
    part[..., 3, 1] = False
    assert (attention_recall(q, k, part, 32) < 1).all()


def test_gqa_union_contains_each_heads_mask():
    q, k, _ = qkv(h=6, hkv=2, t=256, seed=5)
    own = estimate_block_mask(q, k, block_size=16, density=0.2, gqa="head")
    union = estimate_block_mask(q, k, block_size=16, density=0.2, gqa="union")
    assert (own <= union).all()
    assert torch.equal(union[:, 0], union[:, 1]) and torch.equal(union[:, 0], union[:, 2])


def test_unisparse_finds_a_planted_needle_block():
    """A far key block that every late query attends to strongly must be selected."""
    q, k, _ = qkv(h=1, hkv=1, t=512, d=32, seed=2)
    q, k = q * 0.1, k * 0.1
    direction = torch.randn(32, generator=torch.Generator().manual_seed(9))
    k[:, :, 208:224] += 3 * direction  # needle keys = key block 13 (block size 16)
    q[:, :, 400:] += 3 * direction
    for method in ("unisparse", "xattention"):
        mask = estimate_block_mask(q, k, block_size=16, density=0.2, method=method)
        assert mask[0, 0, 400 // 16:, 13].all(), method
    # the estimator matters: random selection at this budget misses it
    mask = estimate_block_mask(q, k, block_size=16, density=0.2, method="random")
    assert not mask[0, 0, 400 // 16:, 13].all()


@pytest.mark.parametrize("bad", [dict(block_size=48), dict(granularities=(24,)),
                                 dict(method="nope"), dict(density=0.0), dict(tau=1.5),
                                 dict(combine="sum"), dict(gqa="vote")])
def test_bad_config_is_a_user_error(bad):
    from icml26_shared import UserError

    q, k, _ = qkv(t=64)
    with pytest.raises(UserError):
        estimate_block_mask(q, k, **bad)


def test_bad_shapes_are_user_errors():
    from icml26_shared import UserError

    q, k, v = qkv(h=4, hkv=2, t=64)
    with pytest.raises(UserError, match="head dims"):
        sparse_prefill_attention(q, k[..., :8], v[..., :8])
    with pytest.raises(UserError, match="multiple"):
        sparse_prefill_attention(q[:, :3], k, v)


@pytest.mark.parametrize("method", ["unisparse", "xattention", "flexprefill", "minference"])
def test_chunked_prefill_chunk_attends_to_cache_causally(method):
    """A later chunk (T < S, queries aligned to the last keys) gets a valid mask; full density is
    exact against dense bottom-right causal attention (what MInference's estimator cannot do)."""
    q, k, v = qkv(t=256, seed=4)
    qc = q[:, :, 160:]  # the last 96 queries: a chunk after 160 cached tokens
    mask = estimate_block_mask(qc, k, method=method, block_size=32, density=0.3)
    valid = core.causal_block_valid(96, 256, 32)
    assert not (mask & ~valid).any() and mask[..., 0].all()
    out = sparse_prefill_attention(qc, k, v, method=method, block_size=32, density=1.0)
    want = dense_causal(q, k, v)[:, :, 160:]
    assert (out.double() - want).abs().max() < 1e-5


def _second_granularity_needle(bs=16, t=512, d=32):
    """A needle block whose key pair ``+a·u, −a·u`` cancels when a block's keys are pooled: the
    late queries (along ``u``) find it at key granularity 1 only."""
    q, k, _ = qkv(h=1, hkv=1, t=t, d=d, seed=4)
    q, k = q * 0.1, k * 0.1
    u = torch.randn(d, generator=torch.Generator().manual_seed(11))
    u = u / u.norm()
    k[:, :, 13 * bs + 3] += 6 * u  # key block 13
    k[:, :, 13 * bs + 9] -= 6 * u
    q[:, :, 400:] += 3 * u
    return q, k


@pytest.mark.parametrize("combine", ["mean", "max"])
def test_fusion_sees_a_structure_only_the_second_granularity_shows(combine):
    """The multi-granularity fusion must use every map: with ``((b, b), (b, 1))`` the needle block
    is kept in every late row; the first granularity alone (block-pooled keys) does not keep it."""
    q, k = _second_granularity_needle()
    kw = dict(block_size=16, density=0.2, answer_queries=0, combine=combine)
    first = estimate_block_mask(q, k, granularities=((16, 16),), **kw)
    assert not first[0, 0, 400 // 16:, 13].all()  # invisible at the first granularity
    both = estimate_block_mask(q, k, granularities=((16, 16), (16, 1)), **kw)
    assert both[0, 0, 400 // 16:, 13].all()
    fused = core._fused_scores(q, k, 16, ((16, 16), (16, 1)), combine, 1 / math.sqrt(32))
    maps = torch.stack([core._fused_scores(q, k, 16, (g,), combine, 1 / math.sqrt(32))
                        for g in ((16, 16), (16, 1))])
    torch.testing.assert_close(fused, maps.mean(0) if combine == "mean" else maps.amax(0))


def test_estimator_tiles_are_sized_per_device():
    assert core.tiles("cpu") == (core.KEY_TILE, core.SCORE_CHUNK_ELEMS)
    key_tile, chunk = core.tiles("cuda")
    assert key_tile >= 8 * core.KEY_TILE and chunk >= 64 * core.SCORE_CHUNK_ELEMS
