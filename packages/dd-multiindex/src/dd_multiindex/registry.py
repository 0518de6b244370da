"""The descriptor registered under the icml26.methods entry point (imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

_LAW = "abstract: memory Θ̃(r²d + L) [P]; the exponents are our reading of it [R]"
_ONE_STEP = "one-step theory: n ≈ d² real samples to learn U (Damian et al. 2022; Ba et al. 2022) [P: introduction]"
CLAIMS = (
    Claim("m1_exponent_r", "exponent p of m1* in r (floor-aware fit m1* = a + b·r^p, ceiling rows censored) "
          "at the largest d: 90% CI within 2 ± 0.4 (paper: 2)",
          "worst |CI end − 2| of p", "lower", paper_value=2.0, source=_LAW),
    Claim("m1_exponent_d", "exponent q of m1* in d (censored power fit with log r as covariate; the polylog "
          "fit beside it): 90% CI within 0 ± 0.3 (paper: 0 up to logs)",
          "worst |CI end − 0| of q", "lower", paper_value=0.0, source=_LAW),
    Claim("compression_dmax", "real / distilled memory at the largest d, r = 2 >= 100x, with n_real* searched "
          "on fresh draws against the absolute target",
          "compression factor, lower end of the 95% interval (geometric mean)", "higher",
          paper_value=None, source="introduction: real data needs ~d² samples [P]; 100x is the issue's target"),
    Claim("compression_exponent_d", "compression factor (measured n_real*) grows with d: exponent >= 1.5",
          "lower end of the 90% CI of the exponent in d", "higher", paper_value=2.0,
          source="d²·d real numbers vs r²d + L distilled [R]"),
    # checks: properties the design guarantees or anchors of the harness, reported apart
    Claim("m2_exponent_L", "identity check: stage-2 memory in L has exponent 1 ± 0.2 (the ridge fit is linear in "
          "the labels, so m2 >= L labels reproduce the real fit exactly)",
          "worst |CI end − 1| of the exponent", "lower", paper_value=1.0, source=_LAW, kind="check"),
    Claim("m2_exponent_d", "identity check: stage-2 memory in d has exponent 0 ± 0.2 (stage 2 lives in the "
          "L-dim feature space)", "worst |CI end − 0| of the exponent", "lower", paper_value=0.0, source=_LAW,
          kind="check"),
    Claim("n_real_exponent_d", "harness anchor: n_real* (fresh draws, absolute target) grows as d^q with q's 90% "
          "CI within 2 ± 0.5; a q far from 2 flags the harness, not the paper",
          "worst |CI end − 2| of q", "lower", paper_value=2.0, source=_ONE_STEP, kind="check"),
    Claim("structure_free_jump", "control: a structure-free teacher (r = d, same d, same lr) needs more distilled "
          "points than r = 1: m1*(r=d) / m1*(r=1) > 1 (lower end of the paired 95% interval over seeds; a "
          "censored r = d row counts at the m1 ceiling, a lower bound)",
          "m1*(r=d) / m1*(r=1), lower end of the paired 95% interval", "higher", paper_value=None,
          source="r²d: memory grows with r [P]; the control is the issue's [R]", kind="check"),
    Claim("baselines_3x", "sanity check: equal-memory real subsets (random / herding / k-center, eta1 and ridge "
          "tuned on dev for their size) have test MSE >= 3x the distilled set's (d >= 64)",
          "MSE ratio baseline / distilled, lower end of the paired 95% interval", "higher",
          paper_value=None, source="introduction (real data needs ~d² samples) [P]; 3x is the issue's target",
          kind="check"),
)

DESCRIPTOR = MethodDescriptor(
    name="dd-multiindex",
    version=package_version("dd-multiindex"),
    paper=Paper("Dataset Distillation Efficiently Encodes Low-Dimensional Representations from "
                "Gradient-Based Learning of Non-Linear Tasks", arxiv="2603.14830"),
    claims=CLAIMS,
    reproduce="dd_multiindex.experiments:reproduce",
    summary="A scaling harness for the Θ̃(r²d + L) memory law of gradient-based dataset distillation "
            "on multi-index teachers (tests the paper's prediction, not its proofs; algorithms "
            "reconstructed from the abstract).",
    scales={
        "smoke": "d ∈ {16, 32} × r ∈ {1, 2}, L = 32, 1 seed, 20 distiller steps (seconds)",
        "quick": "gm, he2: stage 1 over d ∈ {32, 64, 128} × r ∈ {1, 2, 3, 4} (L = 256), stage 2 over "
                 "d × L ∈ {64, 256, 1024} (r = 2), 3 seeds, 2 workers; absolute target per (r, L) from a dev "
                 "teacher, n_real* on fresh draws to 16d², gm to its plateau (cap 400), floor-aware and "
                 "censored law fits, 0-step and own-init ablations, equal-memory baselines, pm at two cells, "
                 "the distiller's lr per d; beside it, in the same run, the ablation sweeps: the quadratic "
                 "(kink-free) learner at d × r ∈ {1, 2}, the structure-free control r = d = 32, and gm at a "
                 "fixed 150 steps at d = 64, r = 2 (tens of minutes on 2 shared CPU cores); `--grid extended` "
                 "(d 16–128 × r 1–8) is the wider CPU grid, not part of quick",
        "full": "the GPU recipe: needs a CUDA device; `dd-multiindex sweep --grid full --device cuda "
                "--workers N --out RUN` (d to 2048, r to 16, L ∈ {256, 1024}); multi-step trajectory "
                "matching is not implemented",
    },
    quick_minutes=8.0,  # 0.3.0: 7.3 CPU-min (user+sys) in 2 workers; 34.7 min wall only because the machine was shared (load ≈ 10)
)
