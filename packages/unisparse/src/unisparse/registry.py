"""Registration with the icml26 core (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("needle", "needle accuracy of UniSparse at <= 30% measured block density >= 95% of "
          "dense (SmolLM2-135M, 4k tokens of repeated filler, 20 test documents; paper: >= 99% "
          "of full attention at 8B)", "needle_accuracy", "higher", 0.99, "",
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
        "quick": "SmolLM2-135M, needle documents of 4096 tokens (1 dev, 2 test), Q/K/V captured at "
                 "layers 2/8/14: whole-map, answer-rows and last-row recall and needle-block hit "
                 "per arm at densities 0.1-0.6 (baselines with the answer-row rule and as "
                 "published); end-to-end passkey accuracy on 20 test documents of 4096 tokens "
                 "(repeated filler, every layer sparse, bf16): dense, UniSparse at nominal density "
                 "0.28, A-shape + answer rows and each rule-equipped baseline at UniSparse's "
                 "measured density, oracle; CPU attention benchmark rows at 8k/32k",
        "full": "GPU recipe: needs a CUDA device and UNISPARSE_MODEL=<local HF causal-LM folder>; "
                "end-to-end needle accuracy over 24 documents at 4096 tokens per method with "
                "paired intervals, then the Triton / FlexAttention kernels vs SDPA at 32k-128k "
                "(unisparse.gpu_bench); refused at once when either is missing",
    },
    # minutes measured (0.3.8): 11.8 min wall, 17.3 CPU-min, on 2 cores with other jobs for its
    # first ~5 min (≈ 9.6 min on quiet cores, estimated from the CPU time); 0.3.7: ≈ 25 min
    quick_minutes=17.0,  # 33.1 CPU-min in two worker processes (0.4.0 quick, recorded)
)
