"""The icml26 registration of circumerge (light: no torch import)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("merge_time_vs_core",
          "merge time circulant / core at n=m=4096, T=8, r=16 <= 0.5 (paper: >=44% less)",
          "ratio_time_circulant_over_core", direction="lower", paper_value=0.56,
          source="abstract ('at least 44%' less time); Core Space taken as the state of the art [R]"),
    Claim("merge_time_vs_knots",
          "merge time circulant / KnOTS <= 0.01",
          "ratio_time_circulant_over_knots", direction="lower", paper_value=None,
          source="issue target; Core Space reports up to 600x over KnOTS [C]"),
    Claim("accuracy_vs_core",
          "normalized accuracy of circulant within 0.5 points of core (mean over rules)",
          "normalized_accuracy_gap_points", direction="higher", paper_value=0.0,
          source="abstract ('accuracy matching or exceeding the optimal level')"),
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
        "smoke": "tiny synthetic factors (n=m=256, T=4) and a 6-task digits MLP, 1 seed (seconds)",
        "quick": "timing at n=m=4096, T=8, r=16 (KnOTS at 2048) + sweep over T and n; digits "
                 "accuracy with T=8 LoRA adapters, 3 seeds, every space x rule; peak memory of "
                 "merging PEFT sets from disk (about 5 min, 2 CPUs)",
        "full": "the GPU recipe: `circumerge bench` on Llama shapes up to 14336 and `circumerge "
                "merge` on user-supplied KnOTS-suite checkpoints (8 ViT / 6 NLI LoRAs); needs a CUDA device and "
                "those checkpoints, so `reproduce --scale full` refuses at once and names the commands",
    },
    quick_minutes=2.1,
)
