"""The descriptor registered under the icml26.methods entry point (imports nothing heavy).

The paper states its claims without numbers (abstract); every target below is the issue's
quantitative reading of one qualitative claim.
"""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

_ABS = "abstract (qualitative; the numeric target is the issue's reading)"

CLAIMS = (
    Claim("grid_error", "known-truth grid: mean absolute rank error per space <= 0.5",
          "mean_abs_rank_error", direction="lower", source=_ABS + ": 'captures distinct ID scales'"),
    Claim("grid_exact", "known-truth grid: all three ranks exact in >= 70% of runs (k_s = 0 included)",
          "exact_rate", direction="higher", source=_ABS),
    Claim("shared_vs_ie", "dev-chosen inclusion–exclusion shared-rank error >= 2 × FiGuRO's (same runs)",
          "2x_figuro_shared_error_vs_ie", direction="lower",
          source=_ABS + ": 'outperforms existing ID estimators'"),
    Claim("robust_spread", "spread of the shared estimate over λ × L <= 1",
          "shared_spread", direction="lower", source=_ABS + ": 'more robust to hyperparameters'"),
    Claim("robust_vs_skdim", "that spread <= 0.5 × the most stable skdim estimator's over k",
          "shared_spread_vs_skdim", direction="lower", source=_ABS),
    Claim("manifolds", "uni-modal: median relative error on skdim manifolds <= best classical's",
          "median_relative_error", direction="lower", source=_ABS),
    Claim("posthoc_class", "post hoc: digit class from the shared code >= 95% of the full "
          "text-embedding probe's accuracy", "accuracy_ratio", direction="higher",
          source=_ABS + ": 'applied post hoc to pretrained encoders'"),
    Claim("posthoc_template", "post hoc: caption template from the text-private code >= 90%",
          "accuracy", direction="higher", source=_ABS + ": 'decomposes shared and private'"),
    Claim("posthoc_leak", "post hoc: template from the shared code <= chance + 5 points",
          "accuracy", direction="lower", source=_ABS),
)

DESCRIPTOR = MethodDescriptor(
    name="figuro",
    version=package_version("figuro"),
    paper=Paper("Fidelity-Guided Rank Optimization (FiGuRO): shared and private intrinsic "
                "dimension", arxiv="2608.10857"),
    claims=CLAIMS,
    reproduce="figuro.experiments:reproduce",
    summary="Shared and private intrinsic dimension of paired data from rank-masked truncated-SVD "
            "projections inside autoencoders and a fidelity rule (reconstructed), beside "
            "scikit-dimension estimators with inclusion–exclusion, AJIVE and ARR-style ablations.",
    scales={
        "smoke": "one tiny simulation (2,1,1), n = 300, L = 6: FiGuRO, its spectral ablation "
                 "and AJIVE (seconds; skdim is skipped, its numba import is slow)",
        "quick": "λ chosen on 2 dev simulations; grid (2,2,2), (5,3,1), (8,2,6), (0,4,4) at "
                 "n = 2,000, D = 50, 3 seeds: FiGuRO, fixed-schedule and ARR ablations, "
                 "TwoNN/MLE/lPCA/DANCo inclusion–exclusion (chosen on dev), AJIVE; λ × L "
                 "sweep beside MLE over k; 10 skdim manifolds with one-shot and lPCA-of-latent "
                 "ablations; digits halves; MiniLM post hoc",
        "full": "GPU recipe: 5 seeds, n = 5,000, λ × L on every configuration and frozen encoders "
                "on user image–text pairs; needs a CUDA device and FIGURO_PAIRS (a folder of "
                "paired x1.npy/x2.npy), so it refuses at once without them",
    },
    # measured for 0.1.1: 11.7 min wall (9.2 CPU-min) on 2 cores while other jobs ran; 0.2.0 adds
    # the dev λ choice and 6 manifolds and is not yet timed
    quick_minutes=15,
)
