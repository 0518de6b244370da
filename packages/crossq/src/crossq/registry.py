"""The ``icml26.methods`` registration of crossq. Imports nothing heavy."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("beats_best_2B", "At 2 B/token CrossQ's MRR@10 beats the strongest footprint-matched "
          "quantizer of the paper (PQ, OPQ, RQ, LSQ, token-wise, ColBERTv2 residual; chosen on dev)",
          "mrr@10", "higher", None,
          source="abstract (arXiv v2): +0.010 MRR@10 on MS MARCO at 2 B/token"),
    Claim("beats_best_4B", "At 4 B/token CrossQ's MRR@10 beats the strongest footprint-matched "
          "quantizer (chosen on dev)", "mrr@10", "higher", None,
          source="issue target; abstract reports +0.009 nDCG@10 on BEIR at 4 B/token"),
    Claim("context_4B", "At 4 B/token the document context helps: CrossQ beats its token-wise "
          "ablation (same training, no context)", "mrr@10", "higher", None,
          source="secondary brief: context ablation 0.386 -> 0.371 MRR@10 on MS MARCO"),
    Claim("trained_4B", "At 4 B/token training helps: CrossQ beats its own untrained start, "
          "greedy residual quantization with the same initial codebooks", "mrr@10", "higher", None,
          source="issue 59: the mechanism row the paper's comparison cannot show"),
    Claim("ranking_losses_4B", "At 4 B/token the ranking-aligned losses help: CrossQ beats "
          "itself trained on reconstruction only", "mrr@10", "higher", None,
          source="abstract: task-aligned (ranking) training rather than reconstruction"),
    Claim("retention_4B", "At 4 B/token CrossQ retains >= 97% of full-precision MRR@10",
          "mrr@10 / full-precision mrr@10", "higher", None, source="issue target"),
    Claim("retention_8B", "At 8 B/token CrossQ keeps ~98% of full-precision MRR@10",
          "mrr@10 / full-precision mrr@10", "higher", 0.98,
          source="abstract (arXiv v2), with light fine-tuning (here: of the query head)"),
    Claim("storage_4B", "Index format check (holds by arithmetic on the index layout, not a "
          "result about CrossQ: any 4-byte codec gets it): at 4 B/token the layout stores a 3M-token "
          "index in <= 4.3 B/token with metadata (the abstract's ~61x vs fp16 128-d vectors)",
          "reduction vs fp16 with metadata", "higher", 61.0, "x", source="abstract (arXiv v2)",
          kind="check"),
    Claim("latency", "A query on a 100k-token-vector index answers in <= 50 ms median on 2 CPU "
          "cores (candidate search)", "latency_ms", "lower", None, "ms", source="issue target"),
)

DESCRIPTOR = MethodDescriptor(
    name="crossq",
    version=package_version("crossq"),
    paper=Paper("Task-Aligned Cross-Token Conditional Quantization for Late-Interaction Retrieval",
                arxiv="2608.19204"),
    claims=CLAIMS,
    reproduce="crossq.experiments:reproduce",
    summary="Compressed ColBERT-style retrieval: context-conditioned additive token codes trained "
            "with ranking-aligned losses, against PQ / OPQ / RQ / LSQ / token-wise / ColBERTv2 "
            "residual at 2-8 B/token.",
    scales={
        "smoke": "toy hashed word vectors, 60 stdlib docstrings + pydoc topics, 2/4 B/token, 4 steps",
        "quick": "all-MiniLM-L6-v2 + a 128-d head (PCA or MaxSim-trained, chosen on dev), ~1.2k "
                 "stdlib docstring pairs + pydoc topics, train 300 / dev 250 / test 400 queries, "
                 "2/4/8 B/token, 3 seeds, every codec at 2/4 B/token, CrossQ + query fine-tuning "
                 "at 4/8 B/token",
        "full": "GPU recipe: ColBERTv2 / PyLate checkpoint on MS MARCO or BEIR (user-supplied), "
                "see README; needs a CUDA device and those local files, refused at once without them",
    },
    # measured (0.6.0): 16.2 CPU-minutes with two threads, 8.8 min wall on an idle 2-core machine
    quick_minutes=9,
)
