"""The descriptor registered under the icml26.methods entry point (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("orthogonal_and_loads",
          "the merged OFT adapter loads in peft and every merged rotation (exact Cayley path) is "
          "orthogonal to 1e-6", "max_orthogonality_error", "lower", paper_value=None, kind="check",
          source="issue 16 target; paper §3 (merging in so(n) keeps R* on the orthogonal group)"),
    Claim("forgetting_vs_ta",
          "at equal normalised accuracy OrthoMerge's base-task forgetting <= 0.7x task arithmetic's "
          "(OFT experts)", "forgetting_ratio_vs_ta", "lower", paper_value=None,
          source="abstract ('reduces catastrophic forgetting'); the 0.7 target is issue 16's"),
    Claim("forgetting_vs_ties",
          "at equal normalised accuracy OrthoMerge's base-task forgetting <= 0.7x TIES's (OFT experts)",
          "forgetting_ratio_vs_ties", "lower", paper_value=None,
          source="abstract; the 0.7 target is issue 16's"),
    Claim("norm_acc_vs_best_euclidean",
          "OFT experts: OrthoMerge's normalised accuracy >= the best Euclidean merge + 1 point",
          "normalized_accuracy", "higher", paper_value=46.25, unit="%",
          source="Table 1 (Llama-3.1-8B, 5 OFT experts: 46.25 vs TSV-M 44.97, +1.28; task avg)"),
    Claim("decoupling_ties",
          "full fine-tunes: TIES + OrthoMerge-G/C beats TIES alone", "normalized_accuracy", "higher",
          paper_value=41.57, unit="%",
          source="Table 2 (MergeBench Llama-3.2-3B: TIES 39.16 -> 41.57 with OrthoMerge-C)"),
    Claim("geometry_preserved",
          "a pure orthogonal merge keeps hyperspherical energy and spectral norm equal to the base's "
          "(1e-9, fp64, exact Cayley path) for T = 2..5", "max_relative_change", "lower", paper_value=0.0,
          kind="check",
          source="abstract ('preserves hyperspherical energy'); project page (spectral norm constant)"),
    Claim("magnitude_correction",
          "OFT experts at the paper's strength (λ = 1): the magnitude-corrected merge beats the plain "
          "mean of the generators (avg, the same merge without the correction)", "normalized_accuracy",
          "higher", paper_value=None, unit="%",
          source="paper §3 (magnitude correction against norm shrinkage); the mechanism isolated"),
)

DESCRIPTOR = MethodDescriptor(
    name="orthomerge",
    version=package_version("orthomerge"),
    paper=Paper("Orthogonal Model Merging", arxiv="2602.05943", url="https://spherelab.ai/OrthoMerge"),
    claims=CLAIMS,
    reproduce="orthomerge.experiments:reproduce",
    summary="Merge OFT/BOFT adapters in the Lie algebra of the orthogonal group (Cayley chart, "
            "magnitude-corrected) and other experts by Orthogonal-Residual Decoupling (Procrustes "
            "rotation + Euclidean residual), beside TA, TIES, DARE and TSV-M.",
    scales={
        "smoke": "1 seed, 2 digits tasks, tiny budgets (seconds)",
        "quick": "digits 64-128-128 MLP, 5 derived tasks, OFT experts trained through peft's get_peft_model "
                 "(exact path; a Neumann-path set for geometry) and full fine-tunes written to disk, every "
                 "method swept over its strength (chosen on dev) beside the paper's / authors' fixed settings, "
                 "5 seeds, geometry T=2..5 on both Cayley paths, peft load of the merged adapters (CPU, minutes)",
        "full": "the GPU recipe: needs CUDA and ORTHOMERGE_BASE (HF base model folder) plus "
                "ORTHOMERGE_OFT_ADAPTERS (folder of peft OFT adapter folders, e.g. "
                "SphereLab/Llama-3.1-8B_OFT_adapters) and/or ORTHOMERGE_EXPERTS (folder of full "
                "fine-tuned checkpoints, e.g. MergeBench Llama-3.2-3B); merges them and writes "
                "the models for lm-eval-harness (run by you)",
    },
    quick_minutes=6.8,  # measured wall time on the shared 2-core machine (1.0 min of CPU time), 0.2.0
)
