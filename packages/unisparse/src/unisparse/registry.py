"""Registration with the icml26 core (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("needle", "needle accuracy of UniSparse at <= 30% block density >= 95% of dense "
          "(~4k tokens, >= 20 documents; paper: >= 99% of full attention)", "needle_accuracy",
          "higher", 0.99, "", "abstract (>= 99% of full-attention accuracy); issue 13 target 95%"),
    Claim("recall", "UniSparse's answer-rows attention recall (the query-block rows holding the "
          "last 64 queries: the question) at equal density >= each faithful baseline's "
          "(XAttention, FlexPrefill, MInference, A-shape), in every layer, mean over heads",
          "answer_rows_recall",
          "higher", None, "", "abstract (beats MInference, XAttention, FlexPrefill); issue 13"),
    Claim("speed", "sparse prefill attention faster than dense (paper: up to 2.61x FlashAttention "
          "on GPU; CPU target 3x dense SDPA at 32k, 25% density)", "speedup_vs_dense", "higher",
          2.61, "x", "abstract (GPU); issue 13 target for CPU"),
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
                 "layers 2/8/14: answer-rows and last-row recall, needle-block hit and recall per method at "
                 "densities 0.1-0.6; end-to-end passkey accuracy on 20 test documents of 4096 "
                 "tokens (classic repeated filler, every layer sparse, bf16): dense, UniSparse at "
                 "nominal density 0.28, each faithful baseline at its measured density, oracle; "
                 "CPU speed vs dense SDPA at 8k/32k (one thread, CPU time)",
        "full": "GPU recipe: needs a CUDA device and UNISPARSE_MODEL=<local HF causal-LM folder>; "
                "end-to-end needle accuracy over 24 documents at 4096 tokens per method with "
                "paired intervals, then the Triton / FlexAttention kernels vs SDPA at 32k-128k "
                "(unisparse.gpu_bench); refused at once when either is missing",
    },
    # minutes measured (0.3.8): 11.8 min wall, 17.3 CPU-min, on 2 cores with other jobs for its
    # first ~5 min (≈ 9.6 min on quiet cores, estimated from the CPU time); 0.3.7: ≈ 25 min
    quick_minutes=8.5,
)
