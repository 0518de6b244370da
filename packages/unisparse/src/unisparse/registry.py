"""Registration with the icml26 core (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("needle", "UniSparse keeps >= 99% of dense accuracy on needle retrieval at <= 25% block "
          "density", "needle_accuracy_ratio", "higher", 0.99, "",
          "abstract (>= 99% of full-attention accuracy); issue target"),
    Claim("agreement", "next-token agreement with dense prefill >= 99% at <= 25% density",
          "next_token_agreement", "higher", 0.99, "", "issue target (reconstructed from the abstract)"),
    Claim("recall", "UniSparse's attention recall beats every baseline at matched density",
          "attention_recall", "higher", None, "",
          "abstract (beats MInference, XAttention, FlexPrefill)"),
    Claim("speed", "sparse prefill attention faster than dense (paper: up to 2.61x FlashAttention "
          "on GPU; CPU target 3x dense SDPA at 32k)", "speedup_vs_dense", "higher", 2.61, "x",
          "abstract (GPU); issue target for CPU"),
)

DESCRIPTOR = MethodDescriptor(
    name="unisparse",
    version=package_version("unisparse"),
    paper=Paper("A Unified Sparse Attention via Multi-Granularity Compression", arxiv="2512.14082"),
    claims=CLAIMS,
    reproduce="unisparse.experiments:reproduce",
    summary="Training-free block-sparse prefill attention from pooled composite tokens.",
    scales={
        "smoke": "tiny random Llama (no download), 256 tokens: fidelity, end-to-end and speed rows (seconds)",
        "quick": "SmolLM2-135M on synthetic passkey documents: 2 documents of 1024 tokens (recall/"
                 "error per method at matched density 0.1/0.25, needle accuracy, next-token "
                 "agreement and perplexity ratio at density 0.25/0.5) + one 4096-token document for "
                 "fidelity; CPU speed vs dense SDPA at 8k/16k/32k (one thread); ~7-10 min on 2 cores",
        "full": "GPU recipe: Triton kernel + estimation vs SDPA/FlashAttention at 32k-128k "
                "(unisparse.gpu_bench, needs CUDA); accuracy on a user-supplied model with "
                "`unisparse eval --model PATH --lengths ...`; refused at once without a CUDA device",
    },
    quick_minutes=3.2,
)
