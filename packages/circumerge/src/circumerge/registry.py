"""The icml26 registration of circumerge (light: no torch import)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("merge_time_vs_core_svd",
          "merge time circulant (auto sketch) / Core Space by its published two-SVD route (core_svd) "
          "<= 0.56 at the claim shape (m=14336, n=4096, R=512), with sketch error <= 2%",
          "ratio_time_circulant_over_core_svd", direction="lower", paper_value=0.56,
          source="abstract ('at least 44%' less merge time than the state of the art); Core Space's "
                 "published route taken as the state of the art [R]"),
    Claim("merge_time_vs_core",
          "merge time circulant (auto sketch) / Core Space by its fastest exact route (core: R×R "
          "Grams + eigh) <= 0.56 at the claim shape (m=14336, n=4096, R=512), with sketch error <= 2%",
          "ratio_time_circulant_over_core", direction="lower", paper_value=0.56,
          source="abstract ('at least 44%' less merge time than the state of the art); the same "
                 "Core Space maths by its fastest exact route [R]"),
    *(Claim(f"accuracy_vs_core_{name}",
            f"normalized accuracy of circulant with sampling engaged minus core >= -0.5 points for "
            f"{name} (digits LoRA tasks, lambda chosen on dev, test split; the interval's lower end "
            "must clear -0.5: two-level bootstrap, seeds outer, test examples inner)",
            "normalized_accuracy_gap_points", direction="higher", paper_value=0.0,
            source="abstract ('accuracy matching or exceeding the optimal level'); one claim per "
                   "non-linear rule (issue 61) [R]")
      for name in ("ties", "magnitude_prune", "dare_linear", "dare_ties", "tsv", "iso")),
    Claim("ta_exact",
          "task arithmetic is exact at every sketch size: circulant sampling s = 2R rows vs core, "
          "relative difference <= 1e-4", "max_rel_diff_circulant_ta_vs_core", direction="lower",
          paper_value=None, source="by construction: Delta W_t = U M_t V for any sketch (core.py step 4)",
          kind="check"),
    Claim("circulant_none_equals_core",
          "circulant without sampling equals core: relative difference <= 1e-4 on TA/TSV/Iso at every "
          "timed shape", "max_rel_diff_circulant_none_vs_core", direction="lower", paper_value=None,
          source="by construction: the transform is orthogonal, so unsampled Grams are exact",
          kind="check"),
    Claim("fp32_shared_init",
          "fp32 shared-init adapters: circulant without sampling vs core <= 1e-4 relative on all rules",
          "max_rel_diff_circulant_none_vs_core", direction="lower", paper_value=None,
          source="issue 12 target (numerics of the reconstruction) [R]", kind="check"),
)

DESCRIPTOR = MethodDescriptor(
    name="circumerge",
    version=package_version("circumerge"),
    paper=Paper("Sketch-Based Low-Rank Model Merging with Shared Circulant Transforms",
                url="https://icml.cc/virtual/2026/poster/60572"),
    claims=CLAIMS,
    reproduce="circumerge.experiments:reproduce",
    summary="Merge LoRA adapters into one LoRA adapter without densifying: a shared circulant "
            "sketch (reconstructed from the abstract) beside Core Space, KnOTS and full space.",
    scales={
        "smoke": "tiny synthetic factors (256x192, R=32/64), fp32 shared-init check, a 4-task digits "
                 "MLP, 1 seed, the transform ablation on three factor families (seconds)",
        "quick": "merge time and sketch error vs stacked rank R at m=14336, n=4096 (Llama-3-8B MLP), "
                 "T in {8,16,32}, r=16 (R <= 512) for core, core_svd, circulant, circulant@none, "
                 "peft cat (TA) and knots (R <= 256) in the same interleaved rounds, peft's dense "
                 "rules at 1024x1024; fp32 shared-init numerics on 7 rules; digits "
                 "accuracy, T=8 LoRAs, 3 seeds, 7 rules x 5 spaces (2 shared CPU cores, one thread)",
        "full": "the GPU recipe: needs a CUDA device (refuses at once without one); runs the sweep at "
                "m=14336, n=4096 up to R=2048 (r in {16, 64}) on the GPU, plus merging the user's "
                "PEFT adapters named in CIRCUMERGE_ADAPTERS=dir1:dir2:... when set",
    },
    # 0.5.0 quick run: 3.3 CPU-minutes (196 s user + sys, /usr/bin/time -v), 25.9 min wall on a
    # 2-core machine shared by ~20 jobs; torch pinned to one thread, so a quiet machine's wall is
    # about its CPU time, rounded up with margin
    quick_minutes=5.0,
)
