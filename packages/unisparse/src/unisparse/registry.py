"""Registration with the icml26 core (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("needle", "needle accuracy of UniSparse at <= 30% measured block density >= 95% of "
          "dense, at 4k tokens of the repeated passkey filler and of natural text (the Zen of Python "
          "reshuffled, the longest length where dense retrieves on dev), SmolLM2-135M, 20 test "
          "documents each; paper: >= 99% of full attention at 8B)", "needle_accuracy", "higher", 0.99, "",
          "abstract (>= 99% of full-attention accuracy); issues 13/45 target 95%"),
    Claim("composite", "what the composite-token estimate adds: UniSparse >= A-shape with the same "
          "answer rows and >= each estimator baseline given the same answer-row rule (XAttention, "
          "FlexPrefill, MInference) at UniSparse's measured density, in needle accuracy and in "
          "whole-map attention recall per layer (every paired 95% interval at or above 0)",
          "composite_margin", "higher", 0.0, "",
          "abstract (beats MInference, XAttention, FlexPrefill); issue 45 item 2"),
    Claim("speed", "sparse prefill attention faster than dense FlashAttention on a GPU (paper: up "
          "to 2.61x); GPU-only, not evaluated on CPU (CPU times are benchmark rows)",
          "speedup_vs_dense", "higher", 2.61, "x", "abstract (GPU)"),
)

DESCRIPTOR = MethodDescriptor(
    name="unisparse",
    version=package_version("unisparse"),
    paper=Paper("A Unified Sparse Attention via Multi-Granularity Compression", arxiv="2512.14082"),
    claims=CLAIMS,
    reproduce="unisparse.experiments:reproduce",
    summary="Training-free block-sparse prefill attention from pooled composite tokens.",
    scales={
        "smoke": "tiny random Llama (no download), 256 tokens: dev choices, fidelity, end-to-end "
                 "and speed rows (seconds)",
        "quick": "SmolLM2-135M: Q/K/V captured at layers 2/8/14 of needle documents of 4096 "
                 "tokens (1 dev, 2 test): whole-map recall per layer at density 0.3 per arm "
                 "(UniSparse, its one-granularity ablation, A-shape + answer rows, the "
                 "estimator baselines with the answer-row rule and as published, random, "
                 "oracle); end-to-end needle accuracy on 20 test documents of 4096 tokens for "
                 "each of two haystacks (repeated filler; the Zen of Python reshuffled), every "
                 "layer sparse, bf16: dense, UniSparse at nominal density 0.28, A-shape + answer "
                 "rows and each rule-equipped baseline at UniSparse's measured density",
        "full": "GPU recipe: needs a CUDA device and UNISPARSE_MODEL=<local HF causal-LM folder>; "
                "end-to-end needle accuracy over 24 documents at 4096 tokens per method with "
                "paired intervals, then the Triton / FlexAttention kernels vs SDPA at 32k-128k "
                "(unisparse.gpu_bench); refused at once when either is missing",
    },
    # 0.4.1 recorded: 54.7 CPU-min (user 3,213 s + sys 70 s) / 2 worker processes on 2 cores
    quick_minutes=28.0,
)
