"""The package's entry in the icml26 registry (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

DESCRIPTOR = MethodDescriptor(
    name="mtgrpo",
    version=package_version("mtgrpo"),
    paper=Paper("Multi-Task GRPO: Reliable LLM Reasoning Across Tasks", arxiv="2602.05547"),
    summary="Multi-task GRPO with improvement-aware task weights (IWU) and a ratio-preserving "
            "sampler (RPS) that enforces task shares after zero-gradient filtering.",
    claims=(
        Claim("worst_vs_grpo", "MT-GRPO raises held-out worst-task accuracy over GRPO",
              "worst_task_acc", "higher", 58.8, "%",
              "Tab. 2 / abstract, Exp-1 (Qwen2.5-3B): 58.8 vs GRPO 30.3"),
        Claim("worst_vs_dapo", "MT-GRPO raises held-out worst-task accuracy over DAPO",
              "worst_task_acc", "higher", 58.8, "%", "Tab. 2, Exp-1: 58.8 vs DAPO 52.6"),
        Claim("avg_competitive", "MT-GRPO keeps average accuracy competitive with the best baseline",
              "avg_acc_minus_best_baseline", "higher", 1.7, " pts",
              "Tab. 2, Exp-1: average 66.9 vs DAPO 65.2"),
        Claim("steps_to_threshold", "MT-GRPO reaches a worst-task accuracy threshold in fewer steps "
              "than DAPO", "steps_ratio_mtgrpo_over_dapo", "lower", 0.5, "",
              "abstract: 50% fewer steps to 50% worst-task accuracy"),
        Claim("rps_share", "With RPS each task's realised batch share matches its weight z",
              "max_task_abs_share_minus_z", "lower", 0.0, "",
              "§5.4: ARC share 0.43 with weight 0.43 with RPS; 0.36 vs 0.63 without"),
    ),
    reproduce="mtgrpo.experiments:reproduce",
    scales={
        "smoke": "1 seed, 3 steps, tiny batches: the pipeline end to end in seconds",
        "quick": "tiny transformer, 3 synthetic tasks, GRPO / DAPO / MT-GRPO / IWU-only, 5 seeds, "
                 "same steps; minutes on 2 CPU cores",
        "full": "GPU recipe: reasoning-gym Countdown / Zebra / ARC-1D with a local Qwen2.5-class "
                "model via `accelerate launch -m mtgrpo train` (see README); needs a CUDA device, "
                "MTGRPO_MODEL (a local HF model folder) and MTGRPO_DATA (<task>.jsonl files), "
                "refused at once without them",
    },
    quick_minutes=1.8,
)
