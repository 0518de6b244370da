"""Frozen configuration dataclasses. [P] = paper abstract, [S] = secondary brief of the arXiv
version (see the design note), [R] = reconstructed here (no public code)."""

from __future__ import annotations

from dataclasses import dataclass

INDEX_FORMAT = "crossq-index"
INDEX_VERSION = 2  # bump when the on-disk layout changes; older/newer indexes are refused
CODEBOOK_SIZE = 256  # K = 256 entries per codebook: one byte per code [P: "bytes per token"]
BUDGETS = (2, 4, 8)  # bytes per token compared in the paper [P]


@dataclass(frozen=True)
class EncoderConfig:
    """Late-interaction encoder around any Hugging Face encoder (ColBERT-style) [R]."""

    model: str = "minilm"  # "minilm" (all-MiniLM-L6-v2, offline) or a local folder
    dim: int = 128  # projected token dim; ColBERT uses 128 [S]; PCA-fitted when no checkpoint linear [R]
    query_maxlen: int = 32  # ColBERT query length [S]
    doc_maxlen: int = 128  # document truncation [R]
    query_prefix: str = ""  # e.g. "[Q] " for ColBERT/PyLate checkpoints
    doc_prefix: str = ""  # e.g. "[D] "
    batch_size: int = 16


@dataclass(frozen=True)
class CrossQConfig:
    """The CrossQ quantizer and its training. Losses from [S]; exact forms [R]."""

    bytes_per_token: int = 4  # M codebooks x 1 byte [P]
    context: bool = True  # False = token-wise conditional ablation (no document context) [S]
    context_dim: int = 32  # DeepSets context size [R]
    hidden: int = 64  # width of phi / rho / gate MLPs [R]
    steps: int = 150  # optimisation steps [R]
    queries_per_step: int = 8  # [R]
    candidates: int = 16  # teacher top-N (+ hard negatives) per training query [S]
    lr: float = 5e-4  # Adam [R]; 3e-3 undid the k-means init on the docstring task
    tau: float = 1.0  # listwise KL temperature on MaxSim scores [R]
    w_kl: float = 1.0  # listwise KL distillation weight [S]
    w_margin: float = 0.3  # hard-negative margin-preservation weight [S]
    w_recon: float = 1.0  # small reconstruction term for stability [R]
    t_start: float = 0.01  # soft-assignment temperature at step 0 (units of squared distance) [R]
    t_end: float = 0.0005  # annealed to this, then straight-through hard codes [S: soft-to-hard]
    hard_fraction: float = 0.25  # final fraction of steps with straight-through hard codes [R]
    kmeans_iters: int = 20  # residual k-means initialisation [R]
    pseudo_query_tokens: int = 8  # tokens per pseudo-query when no training pairs are given [R]


@dataclass(frozen=True)
class SearchConfig:
    k: int = 10
    nprobe: int = 4  # faiss coarse centroids probed per query token for candidates [R: PLAID-like]
    n_candidates: int = 0  # 0 = exhaustive LUT MaxSim over every document


@dataclass(frozen=True)
class ReproConfig:
    """Sizes of each reproduction scale [R].

    Query split (fixed positions in the task's deterministic query order): ``[0, n_tuned)`` are the
    queries that chose CrossQ's defaults in 0.1.x, ``[n_tuned, n_tuned + n_train)`` train CrossQ
    (as in 0.1.x); dev = the tuned prefix plus the next ``n_dev - n_tuned`` untouched queries;
    test = the next ``n_test`` untouched queries (never used to choose anything)."""

    n_docs: int
    n_tuned: int
    n_train_queries: int
    n_dev: int
    n_test: int
    seeds: tuple[int, ...]
    steps: int
    tiny_encoder: bool = False
    doc_maxlen: int = 64  # document truncation for the quick corpus [R] (compute)
    budgets: tuple[int, ...] = BUDGETS
    all_methods_budgets: tuple[int, ...] = (2, 4)  # elsewhere (8 B/token) CrossQ only [R: compute]
    ablation_budgets: tuple[int, ...] = (4,)  # where CrossQ without ranking losses runs [R]
    pool: int = 100  # candidate pool per query: the full-precision top-P, re-ranked by every codec [R]
    latency_tokens: int = 100_000
    big_tokens: int = 3_000_000  # synthetic index: size model check and candidate-search latency
    latency_queries: int = 4
    latency_repeats: int = 3
    queries_per_step: int = 4  # CrossQ training batch [R]
    n_candidates: int = 8  # teacher top-N per training query [R]
    opq_niter: int = 4  # faiss OPQ alternations (faiss default 50) [R: compute]
    rq_beam: int = 4  # faiss ResidualQuantizer max_beam_size (faiss default 5) [R]
    lsq_iters: int = 6  # LSQ train_iters and encode_ils_iters (faiss defaults 25 / 16) [R]
    faiss_train_tokens: int = 16384  # training sample of faiss OPQ / RQ / LSQ [R: compute]
    kmeans_points_per_centroid: int = 128  # residual k-means init: 32k-token sample per stage [R]
    proj_steps: int = 300  # MaxSim-trained encoder head: Adam steps (contrastive, in-batch) [R]
    proj_batch: int = 32  # training queries per step (and in-batch negatives) [R]
    proj_lr: float = 1e-3  # [R]
    ft_budgets: tuple[int, ...] = (4, 8)  # where "CrossQ + light fine-tuning" runs [P: 8 B/token]
    ft_steps: tuple[int, ...] = (25, 100)  # query-head fine-tuning snapshots; best on dev (or 0) [R]
    ft_lr: float = 5e-4  # [R]
    log: bool = True  # one line per fitted codec on stderr
    workers: int = 1  # processes for the (seed, budget) tasks (sweep.py); results do not depend on it


SCALES = {
    "smoke": ReproConfig(n_docs=60, n_tuned=8, n_train_queries=20, n_dev=14, n_test=20,
                         seeds=(0,), steps=4, tiny_encoder=True, budgets=(2, 4), pool=30,
                         latency_tokens=5_000, big_tokens=50_000, latency_queries=2,
                         latency_repeats=1, opq_niter=2, lsq_iters=2, rq_beam=1,
                         faiss_train_tokens=1024, ablation_budgets=(2, 4),
                         proj_steps=10, proj_batch=8, ft_budgets=(4,), ft_steps=(3,), log=False),
    "quick": ReproConfig(n_docs=1200, n_tuned=150, n_train_queries=300, n_dev=250, n_test=400,
                         seeds=(0, 1, 2), steps=80, workers=2),
}
