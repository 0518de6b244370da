"""Block scorers and selectors behind one interface.

``METHODS[name](q, k, cfg) -> scores [B, H, NQ, NK]`` (row-normalized over the causally visible
key blocks). By default a method's scores go through the shared rule (``core.select_blocks``:
sink + local band, then ``cfg.density`` per row / ``cfg.tau``). The faithful baselines bring their
own selection (``SELECTORS[name](q, k, cfg, valid, forced) -> mask``): XAttention's cumulative
threshold per row, FlexPrefill's per-head query-aware / vertical-slash choice with a cumulative
γ, MInference's per-head offline pattern (vertical-slash index lists, block-sparse top-k or
A-shape). With ``density`` set, a threshold method's own threshold is bisected to meet it.

A new estimator is one decorated function::

    @register("mine")
    def mine(q, k, cfg): ...
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import core
from .config import SparseConfig

Scorer = Callable[[torch.Tensor, torch.Tensor, SparseConfig], torch.Tensor]
METHODS: dict[str, Scorer] = {}
SELECTORS: dict[str, Callable] = {}


def register(name: str) -> Callable[[Scorer], Scorer]:
    def deco(fn: Scorer) -> Scorer:
        METHODS[name] = fn
        return fn

    return deco


def selector(name: str):
    def deco(fn):
        SELECTORS[name] = fn
        return fn

    return deco


def _valid(q: torch.Tensor, k: torch.Tensor, cfg: SparseConfig) -> torch.Tensor:
    return core.causal_block_valid(q.shape[2], k.shape[2], cfg.block_size, q.device)


@register("unisparse")
def unisparse(q, k, cfg):
    """UniSparse [P+R]: multi-granularity composite tokens (average pooling of queries and keys),
    their causal softmax attention summed onto the block grid, fused over granularities."""
    return core.unisparse_scores(q, k, cfg.block_size, cfg.grans, cfg.combine,
                                 answer_queries=cfg.answer_queries)


@register("dense")
def dense(q, k, cfg):
    """Full attention: every visible block (selection ignores the budget for this method)."""
    valid = _valid(q, k, cfg).float()
    return (valid / valid.sum(-1, keepdim=True)).expand(q.shape[0], q.shape[1], *valid.shape)


@register("xattention")
def xattention(q, k, cfg):
    """XAttention [C]: within each stride × stride sub-block, the sum of its antidiagonal
    ``Σ_m q_{s−1−m}·k_m`` (one dot product of reshaped vectors), a causal softmax over these
    (scaled by ``1/(√d·stride)``) and its sum per block."""
    b, h, t, d = q.shape
    s_len, st = k.shape[2], cfg.xattn_stride

    def reshape(x: torch.Tensor, flip: bool) -> torch.Tensor:
        n = x.shape[2]
        m = core.n_blocks(n, st)
        xf = torch.nn.functional.pad(x.float(), (0, 0, 0, m * st - n))
        xf = xf.reshape(x.shape[0], x.shape[1], m, st, d)
        if flip:
            xf = xf.flip(3)
        return xf.reshape(x.shape[0], x.shape[1], m, st * d)

    qr = reshape(q, flip=True)
    kr = core._expand_kv(reshape(k, flip=False), h)
    scores = core.composite_block_scores(qr, kr, st, t, s_len, cfg.block_size, 1 / (math.sqrt(d) * st))
    return core.normalize_rows(scores, _valid(q, k, cfg))


def last_query_attention(q, k, n_last: int) -> tuple[torch.Tensor, torch.Tensor]:
    """True causal softmax of the last ``n_last`` queries over all keys: (``p [B,H,L,S]``,
    their key positions limit ``qpos [L]``)."""
    b, h, t, d = q.shape
    s = k.shape[2]
    n_last = min(n_last, t)
    qpos = torch.arange(t - n_last, t, device=q.device) + (s - t)
    sc = torch.matmul(q[:, :, -n_last:].float(), core._expand_kv(k, h).float().transpose(-1, -2))
    sc = sc / math.sqrt(d)
    sc = sc.masked_fill(torch.arange(s, device=q.device)[None, :] > qpos[:, None], -math.inf)
    return torch.softmax(sc, -1), qpos


def vertical_slash_scores(p: torch.Tensor, qpos: torch.Tensor, t: int, s: int, block_size: int,
                          valid: torch.Tensor) -> torch.Tensor:
    """Block scores from a vertical-slash pattern [C: MInference, FlexPrefill]: vertical = mean
    attention each key receives from the last queries, slash = mean attention along each diagonal
    offset; block ``(i, j)`` scores ``vertical(block j) + slash(offset block i − j)`` [R: the
    element-level index lists of the originals become block scores here]."""
    b, h, n_last, _ = p.shape
    bs = block_size
    nq, nk = core.n_blocks(t, bs), core.n_blocks(s, bs)
    vertical = torch.nn.functional.pad(p.mean(2), (0, nk * bs - s)).reshape(b, h, nk, bs).sum(-1)
    offset = (qpos[:, None] - torch.arange(s, device=p.device)[None, :]).clamp(min=0)  # [L,S]
    slash = torch.zeros(b, h, s, device=p.device).scatter_add_(
        -1, offset.reshape(1, 1, -1).expand(b, h, -1), p.reshape(b, h, -1)) / n_last
    dblk = torch.div(torch.arange(s, device=p.device) + bs // 2, bs, rounding_mode="floor")
    slash_blk = torch.zeros(b, h, nk + 1, device=p.device).scatter_add_(
        -1, dblk.reshape(1, 1, -1).expand(b, h, -1), slash)
    i = torch.arange(nq, device=p.device)[:, None]
    j = torch.arange(nk, device=p.device)[None, :]
    diag = (i + core.n_blocks(s - t, bs) - j).clamp(0, nk)  # block offset, queries aligned at the end
    scores = vertical[:, :, None, :] + slash_blk[:, :, diag]
    return core.normalize_rows(scores, valid)


def minference_vs(q, k, cfg):
    """MInference's vertical-slash pattern [C], estimated from the last ``last_q`` (64) queries."""
    p, qpos = last_query_attention(q, k, cfg.last_q)
    return vertical_slash_scores(p, qpos, q.shape[2], k.shape[2], cfg.block_size, _valid(q, k, cfg))


def js_divergence(p: torch.Tensor, r: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Jensen–Shannon divergence (natural log) along the last dim."""
    m = 0.5 * (p + r)
    kl = lambda a, c: (a * ((a + eps) / (c + eps)).log()).sum(-1)  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(r, m)


@register("flexprefill")
def flexprefill(q, k, cfg):
    return _flex_scores(q, k, cfg)[0]


def _flex_scores(q, k, cfg):
    """FlexPrefill [C]: per head, compare the pooled estimate of the last query block's block
    attention with its true block attention; Jensen–Shannon below ``flex_js`` → query-aware
    (pooled-Q · pooled-K block scores), otherwise the vertical-slash pattern of that last block."""
    b, h, t, d = q.shape
    s, bs = k.shape[2], cfg.block_size
    nk = core.n_blocks(s, bs)
    p, qpos = last_query_attention(q, k, bs)
    true_blk = torch.nn.functional.pad(p.mean(2), (0, nk * bs - s)).reshape(b, h, nk, bs).sum(-1)
    qbar = q[:, :, -p.shape[2]:].float().mean(2, keepdim=True)
    kbar = core._expand_kv(core.avg_pool_seq(k, bs), h)
    est = torch.matmul(qbar, kbar.transpose(-1, -2)).squeeze(2) / math.sqrt(d)
    last_visible = torch.arange(nk, device=q.device) * bs <= s - 1
    est = torch.softmax(est.masked_fill(~last_visible, -math.inf), -1)
    query_aware = js_divergence(est, true_blk) < cfg.flex_js  # [B,H]
    valid = _valid(q, k, cfg)
    qa = core.composite_block_scores(core.avg_pool_seq(q, bs), kbar, bs, t, s, bs, 1 / math.sqrt(d))
    qa = core.normalize_rows(qa, valid)
    vs = vertical_slash_scores(p, qpos, t, s, bs, valid)
    return torch.where(query_aware[:, :, None, None], qa, vs), query_aware, (p, qpos)


@register("ashape")
def ashape(q, k, cfg):
    """A-shape / StreamingLLM [C]: the sink plus the most recent blocks (the budget widens the
    local window)."""
    valid = _valid(q, k, cfg)
    nq, nk = valid.shape
    dist = (valid.sum(1, keepdim=True) - 1 - torch.arange(nk, device=q.device)[None, :]).clamp(min=0)
    scores = 1.0 / (1.0 + dist.float())
    return core.normalize_rows(scores, valid).expand(q.shape[0], q.shape[1], nq, nk)


@register("ashape_answer")
def ashape_answer(q, k, cfg):
    """Ablation (0.3.4): UniSparse's answer rows (``cfg.answer_queries``) on A-shape's scores
    everywhere else — the answer-row pass without the composite-token estimate [R]."""
    return core.refine_answer_rows(ashape(q, k, cfg), q, k, cfg.block_size,
                                   cfg.answer_queries or 64)


@register("oracle")
def oracle(q, k, cfg):
    """The exact block mass of the true attention (costs a dense pass): the ceiling of any
    estimator under the same selection rule, not a practical method."""
    mass = core.block_attention_mass(q, k, cfg.block_size)
    return core.normalize_rows(mass, _valid(q, k, cfg))


@register("random")
def random_blocks(q, k, cfg):
    """Random scores (a floor for the estimators)."""
    valid = _valid(q, k, cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    scores = torch.rand(q.shape[0], q.shape[1], *valid.shape, generator=g).to(q.device)
    return core.normalize_rows(scores, valid)


# --- the baselines' own selection rules ----------------------------------------------------------

def _topp(scores, valid, forced, cfg, tau):
    return core.select_blocks(scores, valid, forced, tau=tau, min_blocks=cfg.min_blocks)


def _threshold_select(scores, valid, forced, cfg, t, s):
    """Per-row cumulative threshold ``tau`` (top-p); with only ``density`` set, the threshold is
    bisected so that the mean density meets it."""
    if cfg.tau is not None or cfg.density is None:
        return _topp(scores, valid, forced, cfg, cfg.tau if cfg.tau is not None else 1.0)
    return core.meet_density(lambda tau: _topp(scores, valid, forced, cfg, tau), cfg.density,
                             1e-6, 1.0, t, s, cfg.block_size)


@selector("xattention")
def select_xattention(q, k, cfg, valid, forced):
    """XAttention [C]: per query block, sort key blocks by antidiagonal score and keep them until
    the cumulative score reaches the threshold (diagonal and first block always kept)."""
    return _threshold_select(xattention(q, k, cfg), valid, forced, cfg, q.shape[2], k.shape[2])


def index_lists_to_blocks(vert: torch.Tensor, slash: torch.Tensor, t: int, s: int,
                          block_size: int) -> torch.Tensor:
    """Element-level vertical (key index) and slash (diagonal offset) selections ``[B, H, S]``
    bool → the ``[B, H, NQ, NK]`` blocks that contain any selected element (exact cover).

    Query row ``i`` spans positions ``a_i … e_i`` (fewer than ``b`` apart), so block ``(i, j)``
    holds offset ``o`` iff ``a_i − (j+1)·b < o ≤ e_i − j·b`` (and ``0 ≤ o < S``): one count
    difference of the selected offsets' prefix sums per block (0.3.8; was a scatter over
    ``NQ × S`` per call, 30x slower inside the budget bisection, same blocks)."""
    b, h, _ = vert.shape
    bs = block_size
    nq, nk = core.n_blocks(t, bs), core.n_blocks(s, bs)
    vcols = torch.nn.functional.pad(vert, (0, nk * bs - s)).reshape(b, h, nk, bs).any(-1)
    a = torch.arange(nq, device=vert.device) * bs + (s - t)  # first query position of each row
    e = (a + bs - 1).clamp(max=s - 1)  # last query position
    jb = torch.arange(nk, device=vert.device)[None, :] * bs
    lo = (a[:, None] - jb - bs + 1).clamp(0, s)  # offsets [lo, hi) of row i in key block j
    hi = (e[:, None] - jb + 1).clamp(0, s)
    cnt = torch.nn.functional.pad(slash.to(torch.int32).cumsum(-1, dtype=torch.int32), (1, 0))
    hit = (cnt[..., hi.reshape(-1)] - cnt[..., lo.reshape(-1)]).view(b, h, nq, nk) > 0
    return vcols[:, :, None, :] | hit


def _vertical_slash_mass(q, k, n_last, last=None):
    """Mean attention of the last queries per key (vertical) and per diagonal offset (slash);
    ``last``: ``last_query_attention(q, k, n_last)`` if already computed."""
    p, qpos = last or last_query_attention(q, k, n_last)
    b, h, n, s = p.shape
    vert = p.mean(2)
    offset = (qpos[:, None] - torch.arange(s, device=p.device)[None, :]).clamp(min=0)
    slash = torch.zeros(b, h, s, device=p.device).scatter_add_(
        -1, offset.reshape(1, 1, -1).expand(b, h, -1), p.reshape(b, h, -1)) / n
    return vert, slash


def _cum_selector(x: torch.Tensor):
    """``gamma ->`` the fewest largest entries of each row of ``x`` (non-negative, summing to
    ~1) whose cumulative sum reaches ``gamma``; the sort done once for every ``gamma``."""
    srt, order = torch.sort(x, dim=-1, descending=True)
    cum = srt.cumsum(-1)
    pos = torch.arange(x.shape[-1], device=x.device)

    def select(gamma: float) -> torch.Tensor:
        n = (cum < gamma - 1e-7).sum(-1, keepdim=True) + 1
        return torch.zeros_like(x, dtype=torch.bool).scatter_(-1, order, pos < n)

    return select


@selector("flexprefill")
def select_flexprefill(q, k, cfg, valid, forced):
    """FlexPrefill [C]: per head, Jensen–Shannon test on the last query block; query-aware heads
    keep per row the pooled-score blocks up to cumulative γ, vertical-slash heads keep the
    vertical columns and slash diagonals (from the last block's attention) up to cumulative γ
    each. γ is ``cfg.tau`` or, with only ``density``, bisected to meet it."""
    t, s, bs = q.shape[2], k.shape[2], cfg.block_size
    scores, query_aware, last = _flex_scores(q, k, cfg)
    vert, slash = _vertical_slash_mass(q, k, bs, last)
    cum_vert, cum_slash = _cum_selector(vert), _cum_selector(slash)

    def make(gamma):
        qa = _topp(scores, valid, forced, cfg, gamma)
        vs = index_lists_to_blocks(cum_vert(gamma), cum_slash(gamma), t, s, bs)
        vs = (vs | forced) & valid
        return torch.where(query_aware[:, :, None, None], qa, vs)

    if cfg.tau is not None or cfg.density is None:
        return make(cfg.tau if cfg.tau is not None else 1.0)
    return core.meet_density(make, cfg.density, 1e-6, 1.0, t, s, bs)


def _count_selector(x: torch.Tensor):
    """``n ->`` the ``n`` largest entries of each row of ``x`` (at least 1); sorted once."""
    order = torch.sort(x, dim=-1, descending=True, stable=True).indices
    pos = torch.arange(x.shape[-1], device=x.device)

    def select(n: int) -> torch.Tensor:
        n = max(1, min(int(n), x.shape[-1]))
        return torch.zeros_like(x, dtype=torch.bool).scatter_(-1, order, (pos < n).expand_as(x))

    return select


@selector("minference")
def select_minference(q, k, cfg, valid, forced):
    """MInference [C]: each head runs its offline-searched pattern (``cfg.patterns``, default
    vertical-slash): vertical-slash keeps the top-n vertical and top-n slash index lists of the
    last ``last_q`` queries (n bisected to meet ``density``); block-sparse keeps each row's top
    blocks of mean-pooled Q·K; A-shape the sink and the local window."""
    t, s, bs = q.shape[2], k.shape[2], cfg.block_size
    h = q.shape[1]
    pats = cfg.patterns or ("vertical_slash",) * h
    if len(pats) != h:
        from icml26_shared import UserError

        raise UserError(f"patterns has {len(pats)} entries for {h} query heads")
    dens = cfg.density if cfg.density is not None else 0.25
    vert, slash = _vertical_slash_mass(q, k, cfg.last_q)
    top_vert, top_slash = _count_selector(vert), _count_selector(slash)

    def vs(n):
        m = index_lists_to_blocks(top_vert(n), top_slash(n), t, s, bs)
        return (m | forced) & valid

    out = core.meet_density(vs, dens, 1, s, t, s, bs, integer=True)
    for name, scorer in (("block_sparse", _pooled_scores), ("ashape", ashape)):
        heads = [i for i, p in enumerate(pats) if p == name]
        if heads:
            sc = scorer(q, k, cfg)
            m = core.select_blocks(sc, valid, forced, density=dens, allocation="row")
            out[:, heads] = m.expand(q.shape[0], h, *valid.shape)[:, heads]
    return out


def _pooled_scores(q, k, cfg):
    """Mean-pooled Q · mean-pooled K block scores (MInference block-sparse, FlexPrefill query-aware)."""
    bs, d = cfg.block_size, q.shape[-1]
    kbar = core._expand_kv(core.avg_pool_seq(k, bs), q.shape[1])
    sc = core.composite_block_scores(core.avg_pool_seq(q, bs), kbar, bs, q.shape[2], k.shape[2],
                                     bs, 1 / math.sqrt(d))
    return core.normalize_rows(sc, _valid(q, k, cfg))


@register("minference")
def minference(q, k, cfg):
    """Scores for the shared rule (the vertical-slash block scores); the faithful MInference is
    its selector (per-head pattern)."""
    return minference_vs(q, k, cfg)


def search_minference(captures: list, cfg: SparseConfig) -> tuple[str, ...]:
    """MInference's offline pattern search [C]: for each query head, the pattern with the highest
    attention recall at ``cfg.density`` on dev captures ``[(q, k), ...]`` of one layer."""
    from .config import MINFERENCE_PATTERNS

    h = captures[0][0].shape[1]
    total = torch.zeros(len(MINFERENCE_PATTERNS), h)
    for q, k in captures:
        t, s = q.shape[2], k.shape[2]
        valid = _valid(q, k, cfg)
        forced = core.forced_blocks(t, s, cfg.block_size, cfg.sink_blocks, cfg.local_blocks, q.device)
        mass = core.block_attention_mass(q, k, cfg.block_size)
        for i, pat in enumerate(MINFERENCE_PATTERNS):
            mask = select_minference(q, k, cfg.with_(patterns=(pat,) * h), valid, forced)
            total[i] += core.attention_recall(q, k, mask, cfg.block_size, mass=mass).mean(0)
    return tuple(MINFERENCE_PATTERNS[int(i)] for i in total.argmax(0))
