"""The icml26 registration of circumerge (light: no torch import)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("merge_time_vs_core",
          "CircuMerge needs >=44% less merge time than the state of the art (Core Space): "
          "circulant / core merge-time ratio at n=m=4096, T=8, r=16 (target <= 0.5)",
          "ratio_time_circulant_over_core", direction="lower", paper_value=0.56,
          source="abstract ('at least 44%' less time); Core Space taken as the state of the art [R]"),
    Claim("merge_time_vs_knots",
          "Merging in a low-dimensional space is orders of magnitude faster than KnOTS "
          "(target circulant / knots <= 0.01)",
          "ratio_time_circulant_over_knots", direction="lower", paper_value=None,
          source="issue target; Core Space reports up to 600x over KnOTS [C]"),
    Claim("accuracy_vs_core",
          "Accuracy matches the state of the art: normalized accuracy of circulant within "
          "0.5 points of core (best rule)",
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
                 "accuracy with T=8 LoRA adapters, 3 seeds, every space x rule (minutes, 2 CPUs)",
        "full": "the GPU recipe: `circumerge bench` on Llama shapes up to 14336 and `circumerge "
                "merge` on user-supplied KnOTS-suite checkpoints (8 ViT / 6 NLI LoRAs)",
    },
)
