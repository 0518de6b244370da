"""The descriptor registered under the icml26.methods entry point (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("lossless", "every drafter's greedy output equals model.generate token for token (fp32)",
          "lossless_fraction", "higher", paper_value=1.0, source="abstract ('lossless')"),
    Claim("esp_vs_best_ngram", "SmolLM2: ESP mean accepted length >= 1.1 x the better of pld and lade",
          "mean_accepted_length", "higher", paper_value=1.07,
          source="abstract: +7-11% acceptance length over Lookahead on LLaMA-3 (+7-8% on Qwen3); "
                 "1.1x is the issue's target"),
    Claim("esp_vs_pld", "SmolLM2: ESP mean accepted length >= 1.1 x pld's (prompt lookup)",
          "mean_accepted_length", "higher", paper_value=None,
          source="issue target ('>= 1.1x both pld and lade'); the abstract gives no PLD figure"),
    Claim("esp_vs_lade", "SmolLM2: ESP mean accepted length >= 1.1 x lade's (Lookahead)",
          "mean_accepted_length", "higher", paper_value=1.07,
          source="abstract: +7-11% acceptance length over Lookahead on LLaMA-3 (+7-8% on Qwen3); "
                 "1.1x is the issue's target"),
    Claim("esp_open_vs_pld", "SmolLM2 open-ended prompts: ESP >= 1.1 x pld",
          "mean_accepted_length", "higher", paper_value=None, source="issue target"),
    Claim("esp_open_vs_lade", "SmolLM2 open-ended prompts: ESP >= 1.1 x lade",
          "mean_accepted_length", "higher", paper_value=1.07, source="abstract (vs Lookahead); issue target"),
    Claim("esp_open_ended", "SmolLM2 open-ended prompts: ESP >= 1.1 x the better of pld and lade",
          "mean_accepted_length", "higher", paper_value=1.07,
          source="abstract (n-gram drafters stall on open-ended text); issue target"),
    Claim("hybrid_vs_best_ngram", "SmolLM2: esp+pld >= 1.15 x the better of pld and lade",
          "mean_accepted_length", "higher", paper_value=None, source="issue target (no paper figure)"),
    Claim("throughput", "tokens/s of ESP over the best training-free baseline >= 1.15",
          "ratio_throughput", "higher", paper_value=1.15,
          source="abstract: up to +15-19% throughput over the strongest training-free baseline (GPU)"),
)

DESCRIPTOR = MethodDescriptor(
    name="esp-decode",
    version=package_version("esp-decode"),
    paper=Paper("Efficient Training-Free Multi-Token Prediction via Embedding-Space Probing",
                arxiv="2603.17942"),
    claims=CLAIMS,
    reproduce="esp_decode.experiments:reproduce",
    summary="Lossless, training-free multi-token decoding: mask tokens from the model's own embedding "
            "space draft a pruned top-K tree that the same model verifies in one fused call "
            "(loop reconstructed), beside PLD, LADE, STAND-style and autoregressive drafters.",
    scales={
        "smoke": "a 2-layer d=32 character LM trained for 3 steps; 2 test prompts per regime x 8 tokens; "
                 "every drafter checked lossless (seconds, no SmolLM2)",
        "quick": "tiny character LM (4 layers, d=128, a fixed step count chosen on held-out loss) on "
                 "copy/arith/grammar, 16 test prompts per regime x 64 tokens (batch 8), knobs chosen on 4 dev "
                 "prompts per regime, arms incl. esp-nullmask and esp-chain; SmolLM2-135M-Instruct on "
                 "rewrite/open/code chat prompts at tune's shipped choice (the defaults), 10 test prompts per "
                 "regime x 32 tokens (batches of 5): ar, pld, 2-D lade, stand, esp, esp-nullmask, esp+pld and pld "
                 "at the hybrid's node budget timed side by side, plus transformers' greedy generate and prompt "
                 "lookup as batch-1 anchors (our 1-match pld checked to make their calls); two one-thread "
                 "processes share the work units (jobs.py)",
        "full": "the GPU recipe (bf16, batch 1 and 8; not run yet): SmolLM2 at 50 reported prompts per regime "
                "x 128 tokens (knobs chosen on 10 other dev prompts per regime), then Llama-3-8B-Instruct and "
                "Qwen3-8B on Spec-Bench; lossless by the GPU check's near-tie rule (core.judge). Needs a CUDA "
                "device, ESP_DECODE_LLAMA3 / ESP_DECODE_QWEN3 (local HF folders) and ESP_DECODE_SPECBENCH "
                "(Spec-Bench question.jsonl); refuses at once with a UserError naming what is missing. "
                "EAGLE-2, the upper reference (drafter eagle2, same verifier), joins the Llama-3 stage when "
                "ESP_DECODE_EAGLE2 names a local EAGLE-1/2 head for Llama-3-8B-Instruct (a bad folder or a "
                "mismatched head is refused)",
    },
    quick_minutes=53.0,  # measured wall on the shared 2-core machine at load 4-10; each process ~19 CPU-min
)
