"""The estimators at density < 1 (where no method short-circuits): per-row budgets keep what the
last rows need, the faithful baselines' own selection rules, chunked prefill, the backends."""

from __future__ import annotations

import math

import pytest
import torch
from unisparse import SparseConfig, core, estimate_block_mask
from unisparse.baselines import index_lists_to_blocks, search_minference
from unisparse.fast import flex_attention_blocks, fused_attention

from icml26_kernels import block_sparse_attention

BS = 16


def planted(t=512, d=32, seed=2, needle=(208, 224), late=400):
    """Weak random attention plus one far key block (the needle) that every late query (the
    question) attends to strongly; early queries attend to their own neighbourhood."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, t, d, generator=g) * 0.1
    k = torch.randn(1, 2, t, d, generator=g) * 0.1
    direction = torch.randn(d, generator=torch.Generator().manual_seed(9))
    k[:, :, needle[0]:needle[1]] += 3 * direction
    q[:, :, late:] += 3 * direction
    return q, k, torch.randn(1, 2, t, d, generator=g)


NEEDLE_BLOCK = 208 // BS
FAITHFUL = ("unisparse", "xattention", "flexprefill", "minference", "oracle")


@pytest.mark.parametrize("method", FAITHFUL)
def test_every_method_keeps_the_needle_in_the_last_rows(method):
    q, k, _ = planted()
    mask = estimate_block_mask(q, k, method=method, block_size=BS, density=0.2)
    assert float(core.block_density(mask, 512, 512, BS).mean()) <= 0.3
    assert mask[0, :, 400 // BS:, NEEDLE_BLOCK].all(), method


def test_random_selection_control_loses():
    q, k, _ = planted()
    mass = core.block_attention_mass(q, k, BS)
    ours = estimate_block_mask(q, k, method="unisparse", block_size=BS, density=0.2)
    rnd = estimate_block_mask(q, k, method="random", block_size=BS, density=0.2)
    assert not rnd[0, :, 400 // BS:, NEEDLE_BLOCK].all()
    assert (core.row_recall(mass, ours, 4) > core.row_recall(mass, rnd, 4) + 0.1).all()


def test_row_budget_gives_every_row_its_share():
    """allocation="row": each row keeps exactly max(forced, ceil(density x visible)) blocks, so the
    last rows are never starved (the per-head budget can spend them elsewhere)."""
    q, k, _ = planted()
    dens = 0.25
    mask = estimate_block_mask(q, k, block_size=BS, density=dens, allocation="row")
    valid = core.causal_block_valid(512, 512, BS)
    forced = core.forced_blocks(512, 512, BS, 1, 1)
    want = torch.maximum(forced.sum(-1), torch.ceil(dens * valid.sum(-1).float() - 1e-6).long())
    assert torch.equal(mask.sum(-1), want.expand(1, 2, -1))


def test_tau_allocation_is_a_per_row_threshold_meeting_the_budget():
    """allocation="tau": one top-p threshold for the call, bisected to the density budget — a
    concentrated row keeps few blocks, a diffuse row many; the mean density stays within it;
    and it keeps the planted needle in the last rows."""
    nq = 32
    valid = torch.ones(nq, nq, dtype=torch.bool).tril()
    sc = torch.full((1, 1, nq, nq), 1.0)
    sc[..., : 3 * nq // 4, 0] = 1e4  # early rows: all mass on one block
    sc = core.normalize_rows(sc, valid)
    forced = core.forced_blocks(nq * BS, nq * BS, BS, 1, 1)
    tau = core.select_blocks(sc, valid, forced, density=0.3, allocation="tau")
    dens = float((tau & valid).sum() / valid.sum())
    row = core.select_blocks(sc, valid, forced, density=0.3, allocation="row")
    assert 0.2 < dens <= 0.3 + 1e-6
    assert tau[0, 0, 20].sum() == forced[20].sum()  # concentrated row: only sink + diagonal
    # fewer blocks in all, yet the diffuse last row gets more than its equal share
    assert tau.sum() < row.sum() and tau[0, 0, -1].sum() > row[0, 0, -1].sum()
    q, k, _ = planted()
    mask = estimate_block_mask(q, k, block_size=BS, density=0.2, allocation="tau")
    assert float(core.block_density(mask, 512, 512, BS).mean()) <= 0.2 + 1e-6
    assert mask[0, :, 400 // BS:, NEEDLE_BLOCK].all()


def test_head_allocation_can_starve_the_last_row():
    """The failure mode of issue 13: concentrated early rows, diffuse last rows — the per-head
    budget goes to the early rows' top blocks and the last row keeps little beyond sink+local."""
    nq = 16
    valid = torch.ones(nq, nq, dtype=torch.bool).tril()
    sc = torch.rand(1, 1, nq, nq, generator=torch.Generator().manual_seed(0)) * 0.01
    sc[..., : nq // 2, :] += 1.0  # early rows: high scores everywhere
    sc = sc * valid
    forced = core.forced_blocks(nq * BS, nq * BS, BS, 1, 1)
    head = core.select_blocks(sc, valid, forced, density=0.3, allocation="head")
    row = core.select_blocks(sc, valid, forced, density=0.3, allocation="row")
    assert head[..., -1, :].sum() == 2 < row[..., -1, :].sum()


def test_xattention_threshold_is_per_row_top_p_and_meets_density():
    q, k, _ = planted(seed=5)
    for tau in (0.5, 0.8):
        mask = estimate_block_mask(q, k, method="xattention", block_size=BS, density=None, tau=tau)
        from unisparse.baselines import xattention

        sc = xattention(q, k, SparseConfig(block_size=BS, xattn_stride=8))
        assert ((sc * mask).sum(-1) >= tau - 1e-5).all()
    mask = estimate_block_mask(q, k, method="xattention", block_size=BS, density=0.3)
    dens = float(core.block_density(mask, 512, 512, BS).mean())
    assert 0.2 < dens <= 0.3


@pytest.mark.parametrize("t,s", [(80, 112), (112, 112), (100, 100), (37, 130), (16, 16)])
def test_index_lists_to_blocks_is_the_exact_cover(t, s):
    """0.3.8's prefix-count cover equals the element-level definition: prefill and chunk
    offsets, ragged query rows and key blocks, dense and sparse selections."""
    g = torch.Generator().manual_seed(t * s)
    for p in (0.02, 0.1, 0.5):
        vert, slash = torch.rand(2, 3, s, generator=g) < p, torch.rand(2, 3, s, generator=g) < p
        got = index_lists_to_blocks(vert, slash, t, s, BS)
        qpos = torch.arange(t)[:, None] + (s - t)
        kpos = torch.arange(s)[None, :]
        elem = (vert[..., kpos] | slash[..., (qpos - kpos).clamp(min=0)]) & (kpos <= qpos)
        nq, nk = math.ceil(t / BS), math.ceil(s / BS)
        want = torch.nn.functional.pad(elem, (0, nk * BS - s, 0, nq * BS - t)).reshape(
            2, 3, nq, BS, nk, BS).any(5).any(3)
        valid = core.causal_block_valid(t, s, BS)
        assert torch.equal(got & valid, want), p


def test_presorted_selectors_meet_their_definitions():
    """FlexPrefill's cumulative-γ and MInference's top-n index lists, sorted once per call
    (0.3.8): γ keeps the fewest largest entries reaching γ, n keeps the n largest."""
    from unisparse.baselines import _count_selector, _cum_selector

    g = torch.Generator().manual_seed(3)
    x = torch.softmax(torch.randn(2, 3, 200, generator=g) * 3, -1)
    cum, top = _cum_selector(x), _count_selector(x)
    for gamma in (0.05, 0.5, 0.9, 0.999):
        m = cum(gamma)
        kept = (x * m).sum(-1)
        smallest = torch.where(m, x, torch.full_like(x, 2.0)).amin(-1)
        assert (kept >= gamma - 1e-6).all() and (kept - smallest < gamma - 1e-7).all()
        assert (smallest >= torch.where(m, torch.zeros_like(x), x).amax(-1)).all()
    for n in (1, 7, 200, 500):
        m = top(n)
        assert (m.sum(-1) == min(n, 200)).all()
        lo = torch.where(m, x, torch.full_like(x, 2.0)).amin(-1)
        assert (lo >= torch.where(m, torch.zeros_like(x), x).amax(-1)).all()


def test_minference_search_picks_the_pattern_that_fits():
    """The offline search keeps, per head, the pattern with the best recall: never the local
    window for a head that reads a few far keys."""
    t, d = 256, 16
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, t, d, generator=g) * 0.05
    k = torch.randn(1, 2, t, d, generator=g) * 0.05
    dirs = torch.randn(2, d, generator=g)
    k[0, 1, [40, 41, 130]] += 6 * dirs[1]
    q[0, 1] += 6 * dirs[1]  # head 1: every query reads keys 40, 41, 130 (vertical lines)
    pos = torch.arange(t, dtype=torch.float)[:, None]
    freq = torch.arange(1, d // 2 + 1, dtype=torch.float)[None, :] / 40
    rot = torch.cat([torch.cos(pos * freq), torch.sin(pos * freq)], -1) * 4
    q[0, 0], k[0, 0] = rot, rot  # head 0: attends to nearby positions (local)
    cfg = SparseConfig(method="minference", block_size=BS, density=0.2, last_q=32)
    pats = search_minference([(q, k)], cfg)
    assert pats[1] != "ashape", "a local window cannot reach keys 40/41/130"
    from unisparse.config import MINFERENCE_PATTERNS

    mass = core.block_attention_mass(q, k, BS)
    rec = {p: core.attention_recall(q, k, estimate_block_mask(q, k, cfg.with_(patterns=(p, p))),
                                    BS, mass=mass)[0] for p in MINFERENCE_PATTERNS}
    for h in range(2):  # the chosen pattern is the best one of each head
        assert all(rec[pats[h]][h] >= rec[p][h] - 1e-6 for p in MINFERENCE_PATTERNS)
    assert rec["ashape"][1] < rec[pats[1]][1] - 0.2


@pytest.mark.parametrize("method,answer", [("unisparse", 0), ("oracle", 64), ("ashape", 64)])
def test_chunked_prefill_equals_one_shot_at_the_same_selection(method, answer):
    """Per-row budgets make the selection of a block-aligned chunk (queries after a cached
    prefix) identical to the same rows of the one-shot selection, and the chunk's output equal
    to the one-shot output's rows — estimation and attention both run chunk by chunk. (UniSparse's
    answer-row pass rescores each chunk's own last rows: off here, checked below.)"""
    q, k, v = planted(t=384)
    kw = dict(method=method, block_size=BS, density=0.3, answer_queries=answer)
    one = estimate_block_mask(q, k, **kw)
    full = block_sparse_attention(q, k, v, one, block_size=BS, causal=True)
    outs = []
    for c0, c1 in ((0, 128), (128, 256), (256, 384)):
        m = estimate_block_mask(q[:, :, c0:c1], k[:, :, :c1], **kw)
        assert torch.equal(m, one[..., c0 // BS:c1 // BS, :c1 // BS]), (c0, c1)
        outs.append(block_sparse_attention(q[:, :, c0:c1], k[:, :, :c1], v[:, :, :c1], m,
                                           block_size=BS, causal=True))
    torch.testing.assert_close(torch.cat(outs, 2), full, atol=1e-5, rtol=1e-5)


def test_chunked_prefill_with_answer_rows():
    """With the default answer-row pass, the last chunk (which holds the question) selects
    exactly the one-shot rows; an earlier chunk differs from the one-shot selection only in its
    own answer rows (the rows holding its last 64 queries)."""
    q, k, _v = planted(t=384)
    one = estimate_block_mask(q, k, block_size=BS, density=0.3)
    last = estimate_block_mask(q[:, :, 256:], k, block_size=BS, density=0.3)
    assert torch.equal(last, one[..., 256 // BS:, :])
    mid = estimate_block_mask(q[:, :, 128:256], k[:, :, :256], block_size=BS, density=0.3)
    r = (128 - 64) // BS  # the chunk's first answer row
    assert torch.equal(mid[..., :r, :], one[..., 128 // BS:128 // BS + r, :256 // BS])


@pytest.mark.parametrize("t,s,hkv", [(300, 300, 2), (100, 300, 1), (256, 256, 4)])
def test_fused_and_flex_backends_equal_the_kernel(t, s, hkv):
    g = torch.Generator().manual_seed(t + s)
    q = torch.randn(1, 4, t, 16, generator=g)
    k, v = torch.randn(1, hkv, s, 16, generator=g), torch.randn(1, hkv, s, 16, generator=g)
    mask = estimate_block_mask(q, k, block_size=BS, density=0.3)
    ref = block_sparse_attention(q, k, v, mask, block_size=BS, causal=True)
    torch.testing.assert_close(fused_attention(q, k, v, mask, BS), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(flex_attention_blocks(q, k, v, mask, BS), ref, atol=1e-5, rtol=1e-5)


def test_metrics_of_the_full_mask():
    q, k, _ = planted(t=256)
    full = core.causal_block_valid(256, 256, BS).expand(1, 2, -1, -1)
    mass = core.block_attention_mass(q, k, BS)
    torch.testing.assert_close(core.row_recall(mass, full, 3), torch.ones(1, 2))
    assert core.kept_flop_ratio(full, 256, 256, BS) == pytest.approx(
        (16 * 17 / 2 - 8) / (16 * 17 / 2))
    assert core.block_hit(full, [3], 2).all()


def _dense_restricted(q, k, v, mask, bs):
    """Dense causal attention in fp64 with every key outside the kept blocks masked out (a query
    that sees no key gives 0)."""
    t, s, grp = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    elem = mask.repeat_interleave(bs, -2).repeat_interleave(bs, -1)[..., :t, :s]
    elem = elem & (torch.arange(s)[None, :] <= torch.arange(t)[:, None] + (s - t))
    sc = q.double() @ k.double().repeat_interleave(grp, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    p = torch.softmax(sc.masked_fill(~elem, -math.inf), -1).nan_to_num(0.0)
    return (p @ v.double().repeat_interleave(grp, 1)).float()


@pytest.mark.parametrize("t,s,h,hkv,method", [(300, 300, 6, 2, "unisparse"),
                                               (200, 330, 4, 1, "xattention"),
                                               (256, 256, 4, 4, "random"),
                                               (256, 320, 4, 2, "unisparse")])
def test_fused_backend_is_exact_on_the_kept_blocks(t, s, h, hkv, method):
    """fp32 within 1e-5 of dense attention restricted to the same mask, at density < 1, with
    GQA, a ragged tail and (t < s) a chunk's offset (block-aligned in the last case: the
    ``fused`` backend's shared-mask path); plus a mask with empty and cut rows."""
    g = torch.Generator().manual_seed(t * s + h)
    q = torch.randn(2, h, t, 16, generator=g)
    k, v = torch.randn(2, hkv, s, 16, generator=g), torch.randn(2, hkv, s, 16, generator=g)
    mask = estimate_block_mask(q, k, method=method, block_size=BS, density=0.3)
    assert float(core.block_density(mask, t, s, BS).mean()) < 0.5
    got = fused_attention(q, k, v, mask, BS)
    torch.testing.assert_close(got, _dense_restricted(q, k, v, mask, BS), atol=1e-5, rtol=1e-5)
    rough = torch.rand(mask.shape, generator=g) < 0.3  # no sink or diagonal guaranteed
    torch.testing.assert_close(fused_attention(q, k, v, rough, BS),
                               _dense_restricted(q, k, v, rough, BS), atol=1e-5, rtol=1e-5)


def test_fused_backend_at_density_one_is_sdpa():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 250, 16, generator=g)
    k, v = torch.randn(1, 2, 250, 16, generator=g), torch.randn(1, 2, 250, 16, generator=g)
    mask = estimate_block_mask(q, k, block_size=BS, density=1.0)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    torch.testing.assert_close(fused_attention(q, k, v, mask, BS), want, atol=1e-5, rtol=1e-5)


def test_fused_backend_shared_mask_path_is_exact_and_not_the_full_map():
    """The fast path of ``fused`` (aligned prefill, diagonal kept: one shared mask per call) at
    density 0.25 equals dense attention restricted to the selection, and differs from dense
    causal attention (the selection really drops blocks)."""
    g = torch.Generator().manual_seed(11)
    q = torch.randn(1, 4, 512, 16, generator=g) * 2
    k, v = torch.randn(1, 2, 512, 16, generator=g) * 2, torch.randn(1, 2, 512, 16, generator=g)
    mask = estimate_block_mask(q, k, block_size=BS, density=0.25)
    assert float(core.block_density(mask, 512, 512, BS).mean()) < 0.35
    got = fused_attention(q, k, v, mask, BS)
    torch.testing.assert_close(got, _dense_restricted(q, k, v, mask, BS), atol=1e-5, rtol=1e-5)
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    assert float((got - dense).abs().max()) > 1e-2


@pytest.mark.parametrize("density", [1.0, 0.3])
def test_fused_backend_in_bf16_errs_like_sdpa_in_bf16(density):
    """bf16 inputs run in bf16 (0.3.8, the model's own precision): the error against fp64
    attention on the same kept blocks is at most 2x PyTorch's own bf16 SDPA error on dense
    causal attention (the kernels' tolerance rule); the output stays bf16."""
    g = torch.Generator().manual_seed(21)
    q = (torch.randn(1, 6, 300, 32, generator=g) * 2).bfloat16()
    k = (torch.randn(1, 2, 300, 32, generator=g) * 2).bfloat16()
    v = torch.randn(1, 2, 300, 32, generator=g).bfloat16()
    mask = estimate_block_mask(q.float(), k.float(), block_size=BS, density=density)
    got = fused_attention(q, k, v, mask, BS)
    assert got.dtype == torch.bfloat16

    def err(x, ref):
        return float((x.double() - ref.double()).norm() / ref.double().norm())

    kk, vv = k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    sdpa_err = err(sdpa, dense_fp64(q, kk, vv))
    assert 0 < err(got, _dense_restricted(q, k, v, mask, BS)) <= 2 * sdpa_err


def dense_fp64(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            is_causal=True)
