"""UniSparse maths as pure functions: composite tokens, block scores, block selection, metrics.

Shapes: ``q [B, H, T, D]``, ``k, v [B, Hkv, S, D]`` (``H`` a multiple of ``Hkv``), causal prefill
with queries aligned to the last ``T`` keys (``T == S`` for a plain prefill, ``T < S`` for a chunk
of a chunked prefill). Block scores ``[B, H, NQ, NK]`` are non-negative and sum to one over each
query-block row's causally visible key blocks.
"""

from __future__ import annotations

import math

import torch

#: composite scores computed at once (elements): a tile of query-block rows x ``KEY_TILE`` keys
#: small enough to stay in cache across the matmul, max, exp and block-sum passes
SCORE_CHUNK_ELEMS = 1 << 20
KEY_TILE = 2048
#: on a GPU the loop's launches, not the cache, are the cost: tiles of 64M scores (256 MB fp32)
#: and 16k keys, about 130 loop steps at 128k tokens and 32 heads instead of ~4k [R, issue 45]
GPU_SCORE_CHUNK_ELEMS = 1 << 26
GPU_KEY_TILE = 16384


def tiles(device) -> tuple[int, int]:
    """``(key_tile, score_chunk_elems)`` of the tiled estimate on ``device``."""
    if torch.device(device).type == "cuda":
        return GPU_KEY_TILE, GPU_SCORE_CHUNK_ELEMS
    return KEY_TILE, SCORE_CHUNK_ELEMS


def n_blocks(n: int, block_size: int) -> int:
    return math.ceil(n / block_size)


def causal_block_valid(t: int, s: int, block_size: int, device=None) -> torch.Tensor:
    """``[NQ, NK]`` bool: key block ``j`` holds a key some query of block ``i`` may see."""
    nq, nk = n_blocks(t, block_size), n_blocks(s, block_size)
    last_q = (torch.arange(nq, device=device) * block_size + block_size - 1).clamp(max=t - 1) + (s - t)
    first_k = torch.arange(nk, device=device) * block_size
    return first_k[None, :] <= last_q[:, None]


def avg_pool_seq(x: torch.Tensor, g: int) -> torch.Tensor:
    """Composite tokens [P]: ``x̃_t = mean(x_{t·g}, …, x_{t·g+g−1})`` along dim 2; a ragged last
    group averages only its real members. ``[B, H, N, D] → [B, H, ceil(N/g), D]`` in fp32."""
    if g == 1:
        return x.float()
    b, h, n, d = x.shape
    m = n_blocks(n, g)
    pad = m * g - n
    xf = x.float()
    if pad:
        xf = torch.cat([xf, xf.new_zeros(b, h, pad, d)], dim=2)
    counts = torch.full((m,), float(g), device=x.device)
    counts[-1] = g - pad
    return xf.reshape(b, h, m, g, d).sum(3) / counts[:, None]


def _expand_kv(x: torch.Tensor, h: int) -> torch.Tensor:
    return x if x.shape[1] == h else x.repeat_interleave(h // x.shape[1], dim=1)


def composite_block_scores(qc: torch.Tensor, kc: torch.Tensor, g: int, t: int, s: int,
                           block_size: int, scale: float, gk: int | None = None) -> torch.Tensor:
    """Softmax attention between composite queries ``qc [B,H,⌈T/g⌉,Dc]`` (each covering ``g``
    consecutive queries) and composite keys ``kc [B,H,⌈S/gk⌉,Dc]`` (each covering ``gk``
    consecutive keys; ``gk=None``: ``g``) under the causal mask at composite level, summed onto
    the block grid: ``[B,H,NQ,NK]``, each row summing to one.

    Each composite query sees a prefix of the composite keys. The work runs flash-style over
    tiles — a chunk of query-block rows × ``KEY_TILE`` composite keys, at most
    ``SCORE_CHUNK_ELEMS`` scores, held in cache — and only over the keys a chunk's last row
    sees (the causal triangle, not the square): per tile one matmul, the mask on the ragged
    tail only, one in-place ``exp`` against the tile's row max and a block sum; the tiles'
    block sums are rescaled to a common max as the row advances (0.3.6)."""
    gk = g if gk is None else gk
    b, h, mq, _ = qc.shape
    mk = kc.shape[2]
    rq, rk = block_size // g, block_size // gk
    nq, nk = n_blocks(t, block_size), n_blocks(s, block_size)
    dev = qc.device
    last_q = (torch.arange(mq, device=dev) * g + g - 1).clamp(max=t - 1) + (s - t)
    n_vis = (torch.div(last_q, gk, rounding_mode="floor") + 1).clamp(max=mk)  # visible prefix
    nv = n_vis.tolist()
    if mk < nk * rk:  # a ragged last key block: zero keys, never visible (n_vis <= mk)
        kc = torch.nn.functional.pad(kc, (0, 0, 0, nk * rk - mk))
    qs = qc.float() * scale
    kc = kc.float()
    key_tile, chunk_elems = tiles(dev)
    tile = max(1, key_tile // rk) * rk  # composite keys per tile, whole key blocks
    rows = max(1, chunk_elems // (b * h * tile * rq))  # query-block rows per chunk
    out = torch.zeros(b, h, nq, nk, device=dev)
    for i in range(0, nq, rows):
        j = min(nq, i + rows)
        r0, r1 = i * rq, min(j * rq, mq)
        w = n_blocks(nv[r1 - 1], rk) * rk  # keys (whole blocks) the chunk's last row sees
        acc = torch.zeros(b, h, r1 - r0, w // rk, device=dev)
        top = torch.full((b, h, r1 - r0, 1), -1e30, device=dev)  # running row max
        for c0 in range(0, w, tile):
            c1 = min(w, c0 + tile)
            sc = torch.matmul(qs[:, :, r0:r1], kc[:, :, c0:c1].transpose(-1, -2))
            if c1 > nv[r0]:  # keys some rows of the chunk may not see
                cols = torch.arange(c0, c1, device=dev)
                sc.masked_fill_(cols[None, :] >= n_vis[r0:r1, None], -math.inf)
            m = sc.amax(-1, keepdim=True).clamp_(min=-1e30)
            blk = sc.sub_(m).exp_()  # per key; summed per key block unless rk == 1
            blk = blk if rk == 1 else blk.view(b, h, r1 - r0, (c1 - c0) // rk, rk).sum(-1)
            new = torch.maximum(top, m)
            acc[..., :c0 // rk].mul_(torch.exp(top - new))
            acc[..., c0 // rk:c1 // rk] = blk.mul_(torch.exp(m - new))
            top = new
        acc.div_(acc.sum(-1, keepdim=True))
        if (r1 - r0) % rq:  # a ragged last query block: its missing composite queries add 0
            acc = torch.nn.functional.pad(acc, (0, 0, 0, rq - (r1 - r0) % rq))
        out[:, :, i:j, :w // rk] = acc.view(b, h, j - i, rq, w // rk).sum(3)
    # mean over the real composite queries of each query block
    real = torch.nn.functional.pad(torch.ones(mq, device=dev), (0, nq * rq - mq)).reshape(nq, rq)
    return out / real.sum(1)[:, None]


def normalize_rows(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Clamp at 0, zero the invisible blocks and rescale each row to sum to one."""
    sc = scores.clamp(min=0) * valid
    tot = sc.sum(-1, keepdim=True)
    uniform = valid / valid.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(tot > 0, sc / tot.clamp(min=1e-30), uniform.expand_as(sc))


def _fused_scores(q, k, block_size, granularities, combine, scale, fine_queries: bool = False):
    t, s, h = q.shape[2], k.shape[2], q.shape[1]
    maps = []
    for g in granularities:
        gq, gk = (g, g) if isinstance(g, int) else g
        gq = 1 if fine_queries else gq
        qc, kc = avg_pool_seq(q, gq), _expand_kv(avg_pool_seq(k, gk), h)
        maps.append(composite_block_scores(qc, kc, gq, t, s, block_size, scale, gk))
    stacked = torch.stack(maps)
    return stacked.mean(0) if combine == "mean" else stacked.amax(0)


def unisparse_scores(q: torch.Tensor, k: torch.Tensor, block_size: int,
                     granularities: tuple[int, ...], combine: str = "mean",
                     scale: float | None = None, answer_queries: int = 0) -> torch.Tensor:
    """Multi-granularity block scores: for each ``g``, average-pool queries and keys into composite
    tokens, take their causal softmax attention and sum it onto the block grid; fuse the
    granularities by the mean (or max, renormalized) of the row-normalized maps [R]. With
    ``answer_queries`` > 0 the rows holding the last that many queries are rescored at query
    granularity 1 (``refine_answer_rows``) [R]."""
    t, s, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1 / math.sqrt(d) if scale is None else scale
    fused = _fused_scores(q, k, block_size, granularities, combine, scale)
    scores = normalize_rows(fused, causal_block_valid(t, s, block_size, q.device))
    return refine_answer_rows(scores, q, k, block_size, answer_queries, granularities, combine,
                              scale)


def answer_rows_start(t: int, block_size: int, answer_queries: int) -> int:
    """First query-block row holding one of the last ``answer_queries`` queries (``NQ`` if 0)."""
    if answer_queries <= 0:
        return n_blocks(t, block_size)
    return max(0, t - answer_queries) // block_size


def refine_answer_rows(scores: torch.Tensor, q: torch.Tensor, k: torch.Tensor, block_size: int,
                       answer_queries: int, granularities=None, combine: str = "mean",
                       scale: float | None = None) -> torch.Tensor:
    """Rescore the *answer rows* — the query-block rows holding the last ``answer_queries``
    queries (the question, which decoding reads) — at query granularity 1: every query its own
    composite token, keys pooled as in each granularity ``(c_q, c_k)`` (default ``(b, 1)``: then
    the exact block mass of those rows). Costs ``O((answer_queries + b)·S·d)`` [R, issue 13]."""
    t, s, d = q.shape[2], k.shape[2], q.shape[3]
    r0 = answer_rows_start(t, block_size, answer_queries)
    if r0 >= scores.shape[-2]:
        return scores
    grans = ((block_size, 1),) if granularities is None else granularities
    scale = 1 / math.sqrt(d) if scale is None else scale
    fine = _fused_scores(q[:, :, r0 * block_size:], k, block_size, grans, combine, scale, True)
    valid = causal_block_valid(t, s, block_size, q.device)
    out = scores.expand(q.shape[0], q.shape[1], *valid.shape).clone()
    out[..., r0:, :] = normalize_rows(fine, valid[r0:])
    return out


def forced_blocks(t: int, s: int, block_size: int, sink_blocks: int, local_blocks: int,
                  device=None) -> torch.Tensor:
    """``[NQ, NK]`` bool: the attention-sink columns and the local diagonal band, within causality."""
    nk = n_blocks(s, block_size)
    valid = causal_block_valid(t, s, block_size, device)
    j = torch.arange(nk, device=device)[None, :]
    last = valid.sum(1, keepdim=True) - 1  # the diagonal block of each row
    sink = j < sink_blocks
    local = (j <= last) & (j > last - local_blocks)
    return (sink | local) & valid


def _ranked(scores: torch.Tensor, valid: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    """Each row's block order: forced blocks first, then by score, invisible blocks last."""
    rank_key = torch.where(forced, torch.full_like(scores, 2.0), scores.clamp(0, 1))
    rank_key = rank_key.masked_fill(~valid, -1.0)
    return torch.argsort(rank_key, dim=-1, descending=True, stable=True)


def _take_first(order: torch.Tensor, n: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The first ``n`` (per row) blocks of ``order`` as a bool mask, visible blocks only."""
    pos = torch.arange(order.shape[-1], device=order.device)
    out = torch.zeros(order.shape, dtype=torch.bool, device=order.device)
    out.scatter_(-1, order, pos < n[..., None])
    return out & valid


def reselect_answer_rows(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor, block_size: int,
                         answer_queries: int, valid: torch.Tensor,
                         forced: torch.Tensor) -> torch.Tensor:
    """The answer-row rule for a method with its own selection (0.3.5): the rows holding the
    last ``answer_queries`` queries are re-picked by ``refine_answer_rows``'s per-query scores
    (the exact row mass), each keeping as many blocks as ``mask`` gave it (forced ones first);
    every other row, and so the budget, is unchanged [R, issue 13]."""
    r0 = answer_rows_start(q.shape[2], block_size, answer_queries)
    if r0 >= mask.shape[-2]:
        return mask
    v, f = valid[r0:], forced[r0:]
    scale = 1 / math.sqrt(q.shape[3])
    fine = _fused_scores(q[:, :, r0 * block_size:], k, block_size, ((block_size, 1),), "mean", scale, True)
    scores = normalize_rows(fine, v)
    out = mask.clone()
    out[..., r0:, :] = _take_first(_ranked(scores, v, f), (mask[..., r0:, :] & v).sum(-1), v)
    return out


def select_blocks(scores: torch.Tensor, valid: torch.Tensor, forced: torch.Tensor, *,
                  density: float | None = None, tau: float | None = None,
                  min_blocks: int = 0, allocation: str = "head") -> torch.Tensor:
    """Which blocks to keep: a bool mask like ``scores`` that never keeps an invisible block.

    Every row keeps its forced blocks (sink, local band) and at least ``min_blocks``. With
    ``tau``, a row keeps at most the fewest top-ranked blocks whose cumulative score reaches
    ``tau`` (top-p, the forced blocks' mass counted first). ``density`` caps the kept fraction of
    visible blocks: per row (``allocation="row"``: ``ceil(density · visible)`` each), per
    (batch, head) (``"head"``: the same total, spent on the highest-scoring blocks of any row;
    with row-normalized scores this maximizes the estimated mean recall at that budget) or by a
    per-row top-p threshold (``"tau"``: the threshold, one for the whole call, bisected so that
    the mean density meets ``density``; XAttention's rule on these scores) [R].
    With neither budget, all visible blocks are kept.
    """
    if allocation == "tau" and density is not None:
        def make(p: float) -> torch.Tensor:
            return select_blocks(scores, valid, forced, tau=p if tau is None else min(p, tau),
                                 min_blocks=min_blocks)

        nv = valid.sum()
        return _bisect(make, density, 1e-6, 1.0, lambda m: float(((m & valid).sum((-1, -2)) / nv).mean()))
    n_valid = valid.sum(-1)  # [NQ]
    n_forced = (forced & valid).sum(-1)
    order = _ranked(scores, valid, forced)

    def first(n: torch.Tensor) -> torch.Tensor:  # the first n ranked blocks of each row
        return _take_first(order, n, valid)

    n_low = torch.maximum(n_forced, torch.full_like(n_forced, min_blocks))
    n_low = torch.minimum(n_low, n_valid).expand(scores.shape[:-1])
    if tau is not None and tau < 1:
        mass = torch.gather(scores.clamp(min=0) * valid, -1, order).cumsum(-1)
        n_top = (mass < tau - 1e-7).sum(-1) + 1  # first position where the mass reaches tau
    else:
        n_top = n_valid.expand(scores.shape[:-1])
    n_top = torch.minimum(torch.maximum(n_top, n_low), n_valid.expand_as(n_top))
    if density is None:
        return first(n_top)
    if allocation == "row":
        cap = torch.ceil(density * n_valid.float() - 1e-6).long().expand_as(n_top)
        return first(torch.minimum(torch.maximum(torch.minimum(n_top, cap), n_low), n_top))
    must, allowed = first(n_low), first(n_top)
    budget = math.ceil(density * int(valid.sum()) - 1e-6)
    extra = (budget - must.sum((-1, -2))).clamp(min=0)  # [B, H]
    cand = torch.where(allowed & ~must, scores, torch.full_like(scores, -1.0)).flatten(-2)
    flat_order = torch.argsort(cand, dim=-1, descending=True, stable=True)
    chosen = torch.zeros_like(cand, dtype=torch.bool)
    ranks = torch.arange(cand.shape[-1], device=scores.device)
    chosen.scatter_(-1, flat_order, ranks < extra[..., None])
    chosen &= cand >= 0
    return must | chosen.reshape(scores.shape)


def gqa_union(mask: torch.Tensor, hkv: int) -> torch.Tensor:
    """Union of the masks of the query heads sharing a KV head (GQA policy "union")."""
    b, h, nq, nk = mask.shape
    return mask.reshape(b, hkv, h // hkv, nq, nk).any(2, keepdim=True).expand(
        b, hkv, h // hkv, nq, nk).reshape(b, h, nq, nk)


# --- metrics -------------------------------------------------------------------------------------

def block_density(mask: torch.Tensor, t: int, s: int, block_size: int) -> torch.Tensor:
    """Kept fraction of the causally visible blocks, per (batch, head): ``[B, H]``."""
    valid = causal_block_valid(t, s, block_size, mask.device)
    return (mask & valid).sum((-1, -2)).float() / valid.sum()


def block_attention_mass(q: torch.Tensor, k: torch.Tensor, block_size: int,
                         scale: float | None = None) -> torch.Tensor:
    """True causal softmax mass per block, averaged over queries: ``[B, H, NQ, NK]`` summing to 1
    over each (batch, head). ``composite_block_scores`` at granularity 1 (every query and key its
    own composite token: the exact per-query softmax, flash-style tiles over the causal triangle)
    weighted by each row's query count. 0.3.8: was a dense pass over blocks of 4 query rows
    against all keys (37 MB temporaries per step, half of them masked), 30x slower at 4k."""
    b, h, t, d = q.shape
    s = k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    rows = composite_block_scores(q, _expand_kv(k, h), 1, t, s, block_size, scale, 1)
    count = torch.full((rows.shape[2],), float(block_size), device=q.device)
    count[-1] = t - block_size * (rows.shape[2] - 1)
    return rows * (count / t)[:, None]


def attention_recall(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, block_size: int,
                     scale: float | None = None, mass: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of the true causal softmax mass inside the kept blocks: ``[B, H]``
    (exactly 1 for the full mask). Pass ``mass = block_attention_mass(q, k, block_size)`` to
    score several masks of the same inputs cheaply."""
    if mass is None:
        mass = block_attention_mass(q, k, block_size, scale)
    return (mass.double() * mask).sum((-1, -2)).float()


def row_recall(mass: torch.Tensor, mask: torch.Tensor, last_rows: int = 1) -> torch.Tensor:
    """Recall of the last ``last_rows`` query-block rows only (the question / answer rows that
    decoding reads): true mass inside the kept blocks of those rows over their total mass,
    ``[B, H]``. ``mass`` from ``block_attention_mass``."""
    m = mass[..., -last_rows:, :].double()
    return ((m * mask[..., -last_rows:, :]).sum((-1, -2)) / m.sum((-1, -2)).clamp(min=1e-30)).float()


def row_density(mask: torch.Tensor, t: int, s: int, block_size: int, last_rows: int = 1) -> torch.Tensor:
    """Kept fraction of the causally visible blocks of the last ``last_rows`` query-block rows,
    per (batch, head): ``[B, H]`` (the budget those rows got, beside ``row_recall``)."""
    valid = causal_block_valid(t, s, block_size, mask.device)[-last_rows:]
    return (mask[..., -last_rows:, :] & valid).sum((-1, -2)).float() / valid.sum()


def block_hit(mask: torch.Tensor, key_blocks, last_rows: int = 1) -> torch.Tensor:
    """``[B, H]`` bool: every block of ``key_blocks`` (e.g. the needle's) is kept in each of the
    last ``last_rows`` query-block rows."""
    cols = mask[..., -last_rows:, :][..., list(key_blocks)]
    return cols.flatten(-2).all(-1)


def kept_flop_ratio(mask: torch.Tensor, t: int, s: int, block_size: int) -> float:
    """Dense causal attention FLOPs over the kept blocks' FLOPs (the ideal speed-up; the sparse
    side counts each kept tile in full, the dense side the visible tiles, diagonal ones halved)."""
    valid = causal_block_valid(t, s, block_size, mask.device)
    nq, nk = valid.shape
    first_q = torch.arange(nq, device=mask.device) * block_size + (s - t)
    last_k = ((torch.arange(nk, device=mask.device) + 1) * block_size).clamp(max=s) - 1
    diag = valid & (last_k[None, :] > first_q[:, None])
    dense = float(valid.sum() - 0.5 * diag.sum()) * mask.shape[0] * mask.shape[1]
    return dense / max(float((mask & valid).sum()), 1.0)


def meet_density(make_mask, target: float, lo: float, hi: float, t: int, s: int, block_size: int,
                 iters: int = 14, integer: bool = False) -> torch.Tensor:
    """Bisect a method's own monotone budget parameter (a top-p threshold, a count) so that its
    mean block density is the largest not above ``target``; ``make_mask(param) -> mask`` [R]."""
    def dens(m):
        return float(block_density(m, t, s, block_size).mean())

    return _bisect(make_mask, target, lo, hi, dens, iters, integer)


def _bisect(make_mask, target, lo, hi, dens, iters: int = 14, integer: bool = False):
    best = make_mask(lo)
    if dens(best) > target:
        return best
    top = make_mask(hi)
    if dens(top) <= target:
        return top
    for _ in range(iters):
        mid = (lo + hi) / 2
        if integer:
            mid = int(mid)
            if mid <= lo:
                break
        m = make_mask(mid)
        if dens(m) <= target:
            lo, best = mid, m
        else:
            hi = mid
    return best


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """``‖approx − exact‖ / ‖exact‖`` per (batch, head) over (T, D): ``[B, H]``."""
    num = (approx.float() - exact.float()).pow(2).sum((-1, -2)).sqrt()
    return num / exact.float().pow(2).sum((-1, -2)).sqrt().clamp(min=1e-30)
