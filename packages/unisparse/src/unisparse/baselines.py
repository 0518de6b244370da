"""Block scorers behind one interface: ``scorer(q, k, cfg) -> scores [B, H, NQ, NK]`` (row-normalized
over the causally visible key blocks). Selection, sinks, the local band and the budget are common to
all of them (``core.select_blocks``), so methods differ only in how they rank blocks.

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


def register(name: str) -> Callable[[Scorer], Scorer]:
    def deco(fn: Scorer) -> Scorer:
        METHODS[name] = fn
        return fn

    return deco


def _valid(q: torch.Tensor, k: torch.Tensor, cfg: SparseConfig) -> torch.Tensor:
    return core.causal_block_valid(q.shape[2], k.shape[2], cfg.block_size, q.device)


@register("unisparse")
def unisparse(q, k, cfg):
    """UniSparse [P+R]: multi-granularity composite tokens (average pooling of queries and keys),
    their causal softmax attention summed onto the block grid, fused over granularities."""
    return core.unisparse_scores(q, k, cfg.block_size, cfg.grans, cfg.combine)


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


@register("minference_vs")
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
    return torch.where(query_aware[:, :, None, None], qa, vs)


@register("ashape")
def ashape(q, k, cfg):
    """A-shape / StreamingLLM [C]: the sink plus the most recent blocks (the budget widens the
    local window)."""
    valid = _valid(q, k, cfg)
    nq, nk = valid.shape
    dist = (valid.sum(1, keepdim=True) - 1 - torch.arange(nk, device=q.device)[None, :]).clamp(min=0)
    scores = 1.0 / (1.0 + dist.float())
    return core.normalize_rows(scores, valid).expand(q.shape[0], q.shape[1], nq, nk)


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
