"""Configuration of the sparse-prefill estimators (frozen; every field says where it comes from).

Markings: [P] the paper (abstract and the pooling equation quoted in a review), [C] the public code
of the baselines (XAttention, FlexPrefill, MInference), [R] reconstructed here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

GQA_POLICIES = ("head", "union")
COMBINES = ("mean", "max")
ALLOCATIONS = ("row", "head", "tau")
MINFERENCE_PATTERNS = ("vertical_slash", "block_sparse", "ashape")


@dataclass(frozen=True)
class SparseConfig:
    """How to choose the kept ``block_size × block_size`` tiles of causal prefill attention."""

    #: estimator name (see ``unisparse.METHODS``): unisparse, dense, xattention, flexprefill,
    #: ashape, ashape_answer, oracle, random
    method: str = "unisparse"
    #: tile edge of the block-sparse kernel; the paper's kernel works on 64–128 blocks [P/R]
    block_size: int = 64
    #: kept fraction of the causally visible blocks (the matched-density budget of the
    #: comparisons); ``None`` = no cap. Threshold baselines (XAttention, FlexPrefill) meet it by
    #: bisecting their own threshold [R]
    density: float | None = 0.25
    #: how the density budget is spread: "row" = every query-block row keeps ceil(density x its
    #: visible blocks), so the last rows (the question, the answer) get their share; "head" = one
    #: budget per (batch, head) spent on the highest-scoring blocks of any row (maximizes the
    #: estimated *mean* recall but starves the last rows: issue 13); "tau" = a per-row top-p
    #: threshold (one per call) bisected so that the mean density meets the budget (XAttention's
    #: rule on UniSparse's scores). "row" was chosen on the dev documents of the quick
    #: reproduction (last-rows recall, needle-block hit rate) [R]
    allocation: str = "row"
    #: cumulative-mass budget (top-p): keep the fewest ranked blocks whose estimated mass reaches
    #: ``tau``; ``None`` = budget by ``density`` alone. XAttention uses 0.8–0.9, FlexPrefill 0.9 [C]
    tau: float | None = None
    #: sequence pooling factors of the composite tokens, each dividing ``block_size``: an int
    #: ``g`` pools queries and keys by ``g``, a pair ``(c_q, c_k)`` pools queries by ``c_q`` and
    #: keys by ``c_k`` (the paper's two factors [P]); several entries = several granularities,
    #: fused by ``combine``. ``None`` = ``((b, 1), (b, b/4))``: one composite query per block
    #: against every key and against keys pooled by 4 — chosen on dev documents (issue 45:
    #: whole-map recall at 0.3, 0.774 vs 0.768 for ``((b, 1),)``; docs/experiments.md) [R]
    granularities: tuple | None = None
    #: UniSparse: the query-block rows holding the last ``answer_queries`` queries (the question,
    #: which produces the answer) are scored at query granularity 1 — each query its own
    #: composite token, like MInference's last-64-query estimate [C] — instead of by their
    #: block's mean query; 0 = off (0.1–0.3.3). 64 chosen on dev documents in 0.3.4: the
    #: mean query of a block that mixes filler and question misses the needle (issue 13) [R]
    answer_queries: int = 64
    #: XAttention / FlexPrefill / MInference (own selection): re-pick the same answer rows by
    #: their exact per-query row mass, each row keeping the block count the baseline's rule gave
    #: it (``core.reselect_answer_rows``; same budget). Off = the baseline as published (0.3.5)
    baseline_answer_rows: bool = False
    #: how per-granularity block scores are fused: mean of row-normalized scores or max [R]
    combine: str = "mean"
    #: leading key blocks always kept (attention sink) [C: StreamingLLM / XAttention keep-sink]
    sink_blocks: int = 1
    #: diagonal band of key blocks always kept (the local window) [C]
    local_blocks: int = 1
    #: minimum kept blocks per row (FlexPrefill's min_budget, in blocks) [C]
    min_blocks: int = 0
    #: GQA: each query head its own mask ("head") or the union over a KV group ("union") [R]
    gqa: str = "head"
    #: XAttention antidiagonal stride (8 or 16 in its code) [C]
    xattn_stride: int = 8
    #: FlexPrefill: Jensen–Shannon threshold choosing query-aware over vertical-slash (0.1) [C]
    flex_js: float = 0.1
    #: queries of the last block used by vertical-slash estimators (MInference: 64) [C]
    last_q: int = 64
    #: MInference: the offline per-head pattern, one of "vertical_slash", "block_sparse",
    #: "ashape" per query head (searched on dev documents, ``baselines.search_minference``);
    #: ``None`` = vertical-slash for every head [C]
    patterns: tuple[str, ...] | None = None
    #: seed of the ``random`` baseline
    seed: int = 0

    @property
    def grans(self) -> tuple[int, ...]:
        if self.granularities is None:
            return ((self.block_size, 1), (self.block_size, max(1, self.block_size // 4)))
        return tuple(self.granularities)

    def with_(self, **changes) -> SparseConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def validate(cfg: SparseConfig, methods: tuple[str, ...]) -> SparseConfig:
    """Raise ``UserError`` naming the first bad field (one line, for the CLI and the patch)."""
    from icml26_shared import UserError

    if cfg.method not in methods:
        raise UserError(f"unknown method {cfg.method!r} (choose one of {', '.join(methods)})")
    bs = cfg.block_size
    if bs < 16 or bs & (bs - 1):
        raise UserError(f"block_size must be a power of two >= 16, got {bs}")
    if cfg.density is not None and not 0 < cfg.density <= 1:
        raise UserError(f"density must lie in (0, 1], got {cfg.density}")
    if cfg.tau is not None and not 0 < cfg.tau <= 1:
        raise UserError(f"tau must lie in (0, 1], got {cfg.tau}")
    if not cfg.grans or any(not isinstance(f, int) or f < 1 or bs % f
                            for g in cfg.grans for f in ((g,) if isinstance(g, int) else g)) \
            or any(not isinstance(g, int) and len(g) != 2 for g in cfg.grans):
        raise UserError(f"each granularity must divide block_size={bs}, got {cfg.grans}")
    if cfg.combine not in COMBINES:
        raise UserError(f"combine must be one of {', '.join(COMBINES)}, got {cfg.combine!r}")
    if cfg.patterns is not None and any(p not in MINFERENCE_PATTERNS for p in cfg.patterns):
        raise UserError(f"patterns must be among {', '.join(MINFERENCE_PATTERNS)}, got {cfg.patterns}")
    if cfg.allocation not in ALLOCATIONS:
        raise UserError(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {cfg.allocation!r}")
    if cfg.gqa not in GQA_POLICIES:
        raise UserError(f"gqa must be one of {', '.join(GQA_POLICIES)}, got {cfg.gqa!r}")
    if not 0 < cfg.flex_js or cfg.last_q < 1:
        raise UserError(f"flex_js must be > 0 and last_q >= 1, got {cfg.flex_js}, {cfg.last_q}")
    if cfg.xattn_stride < 1 or bs % cfg.xattn_stride:
        raise UserError(f"xattn_stride must divide block_size={bs}, got {cfg.xattn_stride}")
    if min(cfg.sink_blocks, cfg.local_blocks, cfg.min_blocks, cfg.answer_queries) < 0:
        raise UserError("sink_blocks, local_blocks, min_blocks and answer_queries must be >= 0")
    return cfg
