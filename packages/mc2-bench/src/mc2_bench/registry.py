"""The descriptor registered under the icml26.methods entry point (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("toy_preference", "each toy's no-instruction vision ratio within 0.05 of its configured "
          "preference P (worst of P = 0.2, 0.5, 0.8)", "abs_vision_ratio_minus_P", "lower",
          paper_value=None, source="issue 27 target (the paper: all 20 MLLMs show a clear preference)",
          kind="check"),
    Claim("order_consistency", "order consistency >= 0.95 (worst toy)", "order_consistency",
          "higher", paper_value=None, source="issue 27 target; [C] both option orders", kind="check"),
    Claim("instruction_following", "instruction following (icc, both directions) >= 0.9 (worst toy)",
          "instruction_following", "higher", paper_value=None,
          source="issue 27 target; abstract: preference moves with instructions", kind="check"),
    Claim("sweep_movement", "a monotone alpha sweep moves the toy's vision ratio across >= 0.8",
          "vision_ratio_movement", "higher", paper_value=None,
          source="issue 27 target; abstract: steering shifts the preference"),
    Claim("sweep_vs_random", "the preference direction moves the vision ratio >= 5x a random "
          "direction of matched norm", "vision_ratio_movement", "higher", paper_value=None,
          source="issue 27 target"),
    Claim("sweep_vs_permuted", "the preference direction moves the vision ratio >= 5x the "
          "diff-of-means of the same states with the groups' labels permuted", "vision_ratio_movement",
          "higher", paper_value=None, source="issue 56: the label null beside the random direction"),
    Claim("accuracy_at_flip", "single-modality accuracy within 2 points at the alpha that flips the "
          "preference", "single_accuracy_change", "higher", paper_value=None, source="issue 27 target"),
    Claim("amps_vs_uniform", "AMPS: the same shift with <= half of uniform steering's accuracy loss",
          "accuracy_loss", "lower", paper_value=None,
          source="issue 27 target; AMPS arXiv 2602.12533 (reconstructed)"),
    Claim("smol_single_modality", "smol-vlm names held-out digits from the image alone and from the "
          "text alone with >= 90% accuracy (option-logprob; worse of the two)", "single_modality_accuracy",
          "higher", paper_value=None, source="issue 27 target (built in-process: tests the harness)"),
    Claim("smol_sweep_movement", "a monotone alpha sweep moves smol-vlm's vision ratio across >= 0.5",
          "vision_ratio_movement", "higher", paper_value=None,
          source="issue 27 target; abstract: steering shifts the preference"),
    Claim("smol_accuracy_at_flip", "smol-vlm: single-modality accuracy within 2 points at the alpha "
          "that flips the preference", "single_accuracy_change", "higher", paper_value=None,
          source="issue 27 target"),
    Claim("smol_amps_vs_uniform", "smol-vlm: AMPS gets the same shift with <= half of uniform "
          "steering's accuracy loss", "accuracy_loss", "lower", paper_value=None,
          source="issue 27 target; AMPS arXiv 2602.12533 (reconstructed)"),
)

DESCRIPTOR = MethodDescriptor(
    name="mc2-bench",
    version=package_version("mc2-bench"),
    paper=Paper("Evaluating and Steering Modality Preferences in Multimodal Large Language Models",
                arxiv="2505.20977"),
    claims=CLAIMS,
    reproduce="mc2_bench.offline.experiments:reproduce",
    summary="The MC2 image-text conflict protocol (both option orders, ratios, instruction "
            "following), linear probes and RepE-style steering with image-token-aware hooks and "
            "saved directions, for local HF VLMs (Qwen2-VL, LLaVA, Idefics3); reproduced on "
            "in-process toy VLMs.",
    scales={
        "smoke": "one toy VLM trained for seconds (16 test items, a 3-point alpha sweep) and a tiny "
                 "random-init LLaVA through HFVisionChatAdapter (every mode, a 3-point sweep)",
        "quick": "toys at P = 0.2, 0.5, 0.8 (600-1100 steps, to dev targets), 100 dev / 200 test digit "
                 "conflicts: preference, instruction following, per-layer probes, 7-point alpha sweeps of "
                 "diffmean / pca / probe / random / permuted-label directions, two anchor answerers, "
                 "flip alpha chosen on 250 dev items with "
                 "the upper bound of its accuracy cost, "
                 "AMPS (its own dev alpha) vs uniform; smol-vlm (LLaVA around "
                 "frozen SmolLM2-135M) on 16 dev / 24 test items: single-modality accuracy, preference, "
                 "blank-image ablation; its steering (3-point alpha sweep at logit-lens layers, the "
                 "random control, AMPS vs uniform) only if its dev single-modality accuracy reaches 0.9",
        "full": "the GPU recipe (Qwen2.5-VL-7B / LLaVA on the MC2 JSON + COCO-2014, bf16, layers "
                "20-23, 7-point sweep with a random control) plus quick and smol-vlm's 7-point sweep "
                "with its random control: needs a CUDA device and MC2_MODEL, MC2_JSON, MC2_IMAGES; "
                "refuses within seconds when any is missing",
    },
    # measured 0.3.0: 3.1 CPU-min (user 185.3 s + sys 3.7 s) with a warm ICML26_CACHE (SmolLM2
    # conversion and the smol-vlm build cached; they cost ~72 CPU-s cold in 0.2.6), torch pinned
    # to 1 thread; smol-vlm's sweeps skipped (precondition not met); shared-machine wall 19.5 min
    quick_minutes=4.5,
)
