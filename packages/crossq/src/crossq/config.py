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
    lr: float = 5e-4  # Adam [R]
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
    lr: float = 5e-4  # CrossQ family Adam learning rate [R]
    #: per-method ``(method, steps, lr, queries_per_step)`` overriding the three above for
    #: ``crossq`` / ``tokenwise`` / ``crossq-recon`` (chosen on dev by ``crossq.tuning``)
    tuned: tuple[tuple[str, int, float, int], ...] = ()
    #: learning curves (train loss, dev MRR@10, dev listwise KL, code flips vs the greedy start)
    #: of the trained CrossQ family on the first seed, every ``curve_every`` steps (0 = none)
    curve_every: int = 0
    n_candidates: int = 8  # teacher top-N per training query [R]
    # baselines at faiss's defaults (OPQMatrix.niter, ResidualQuantizer.max_beam_size,
    # LocalSearchQuantizer.train_iters / encode_ils_iters; tested against the faiss objects)
    opq_niter: int = 50
    rq_beam: int = 5
    lsq_train_iters: int = 25
    lsq_encode_ils_iters: int = 16
    #: one fixed sample of token vectors (faiss's default training size, 65,536; drawn once with
    #: ``sample_seed``) trains every quantizer: greedy RQ's k-means (CrossQ's start), PQ, OPQ,
    #: faiss RQ, LSQ and the ColBERTv2 residual
    train_sample_tokens: int = 65536
    sample_seed: int = 0
    #: fitted on the first seed only (their seed-to-seed sd of test MRR@10 was <= 0.016 in 0.5.0;
    #: at faiss's defaults they cost ~3 CPU-minutes per seed) [R: compute, issue 59's trade]
    first_seed_only: tuple[str, ...] = ("opq", "rq", "lsq")
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
                         latency_repeats=1, opq_niter=2, lsq_train_iters=2, lsq_encode_ils_iters=2,
                         rq_beam=1, train_sample_tokens=1024, ablation_budgets=(2, 4), curve_every=2,
                         proj_steps=10, proj_batch=8, ft_budgets=(4,), ft_steps=(3,), log=False),
    "quick": ReproConfig(n_docs=1200, n_tuned=150, n_train_queries=300, n_dev=250, n_test=400,
                         seeds=(0, 1, 2), steps=80, workers=2, curve_every=100,
                         # chosen on dev by `python -m crossq.tuning` (docs/experiments.md): the best
                         # final dev MRR@10 of steps 300 x lr {1e-4, 5e-4} and 3000 x lr 1e-4, 4 queries
                         # per step (no budget moved dev MRR@10 beyond its noise)
                         tuned=(("crossq", 300, 1e-4, 4), ("tokenwise", 300, 5e-4, 4),
                                ("crossq-recon", 300, 5e-4, 4))),
}
