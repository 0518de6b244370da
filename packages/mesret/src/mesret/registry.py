"""The icml26 registration of mesret (light: imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

SRC = "issue 20 target; paper: MES-RET best on synthetic many-task suites (no table public) [P]"
CLAIMS = (
    Claim("wcci20_win_fraction", "wcci20 T=50 mixed: MES-RET's final error beats independent CMA-ES's "
          "on >= 70% of tasks", "fraction_of_tasks_better", "higher", paper_value=None, source=SRC),
    Claim("wcci20_sig_worse", "wcci20 T=50 mixed: MES-RET significantly worse than independent CMA-ES "
          "(rank-sum p < 0.05) on <= 5% of tasks", "fraction_of_tasks_sig_worse", "lower",
          paper_value=None, source=SRC),
    Claim("wcci20_ratio_indep", "wcci20 T=50 mixed: geometric-mean error ratio MES-RET / independent "
          "CMA-ES <= 0.7", "geomean_error_ratio", "lower", paper_value=None, source=SRC),
    Claim("wcci20_ratio_best", "wcci20 T=50 mixed: MES-RET's geometric-mean error below the strongest "
          "baseline's (ratio < 1)", "geomean_error_ratio", "lower", paper_value=None, source=SRC),
    Claim("rwe_vs_uniform", "wcci20 T=50 mixed: reward-weighted evaluation helps: MES-RET / mesret-uniform "
          "(the same extra generations drawn uniformly over the active tasks) < 1", "geomean_error_ratio",
          "lower", paper_value=None, source="reward-weighted evaluation, abstract [P]; ablation [R]"),
    Claim("transfer_vs_tau0", "wcci20 T=50 mixed: reward-weighted transfer helps: MES-RET / mesret-tau0 "
          "(no transfer) < 1", "geomean_error_ratio", "lower", paper_value=None,
          source="reward-weighted transfer, abstract [P]; ablation [R]"),
    Claim("curse_mfea", "the curse: at low similarity, T=50, MFEA (MToP's rmp 0.3) is worse than its own "
          "independent run, MFEA rmp 0 (the per-task GA): ratio > 1", "geomean_error_ratio", "higher",
          paper_value=None, source="issue 53 item 3; the 'Multi-Task Curse' framing [P]"),
    Claim("curse_mesret", "the curse: at low similarity MES-RET's error ratio to independent CMA-ES (its own "
          "independent run) stays <= 1 at every T in {2, 10, 30, 50}", "max_geomean_error_ratio", "lower",
          paper_value=None, source="issue 20 target; abstract ('breaking the Multi-Task Curse') [P]"),
    Claim("policy_vs_sepcma", "policy suite: semantic sMES-RET's normalised return >= 1.1x "
          "independent sep-CMA-ES's", "normalised_return_ratio", "higher", paper_value=1.58,
          source="supplement README, HalfCheetah best trials 4030-4141 vs 2536-2555 [C]"),
    Claim("policy_vs_naive", "policy suite: semantic layout's normalised return above the naive "
          "layout's", "normalised_return_difference", "higher", paper_value=None,
          source="semantic parameter alignment, abstract [P] / EMaT-Gym code [C]"),
    Claim("pycma_anchor", "our indep-cma's geometric-mean error within 2x of pycma's (indep-pycma: pycma "
          "defaults, the same lambda, sigma0 0.3, bounds [0, 1], an even split) on wcci20 T=50 mixed",
          "geomean_error_ratio", "lower", paper_value=None, source="issue 53 item 3 [R]", kind="check"),
)

DESCRIPTOR = MethodDescriptor(
    name="mesret",
    version=package_version("mesret"),
    paper=Paper("Breaking Multi-Task Curse: Reward-Weighted Evolution for Black-Box Many-Task "
                "Optimization", url="https://icml.cc/virtual/2026/poster/61909"),
    claims=CLAIMS,
    reproduce="mesret.experiments:reproduce",
    summary="MES-RET: one CMA-ES per task, reward-weighted evaluation (extra generations to "
            "improving or diverse tasks) and reward-weighted transfer through samples that must win "
            "selection; ported from the authors' MATLAB (MToP) code, with MFEA, OpenAI-ES and "
            "independent (sep-)CMA-ES baselines.",
    scales={
        "smoke": "wcci20 T=4, D=5, 100 evaluations per task, 2 seeds; cec17-mix 3 functions at D=10; a 2-env "
                 "policy suite (seconds)",
        "quick": "the protocol (docs/experiments.md): N = lambda = 100 for every arm and 50,000 "
                 "evaluations per task; wcci20 T=50, D in {10,20,30}, mixed similarity: every arm incl. "
                 "MFEA rmp 0 and the ablations in one run, with traces (4 seeds; indep-pycma on 2 when "
                 "pycma is installed); the curse at low similarity, T in {2,10,30,50}: mesret, indep-cma, "
                 "MFEA rmp 0.3 and rmp 0 (2 seeds); cec17-mix D=10 (29 tasks, mesret and indep-cma, 10,000 "
                 "evaluations per task, 1 seed); the 4-env gymnax policy suite (h=8, horizon 100, N=50, "
                 "budget chosen on dev from 1000/2500/5000, 3 seeds). About 18 CPU-minutes (estimated)",
        "full": "the same protocol at 30 seeds (curse sweep 10 seeds); cec17-mix at D 10/30/50 (87 tasks, "
                "50,000 evaluations per task, 10 seeds, with both ablations); policy suite h=16, horizon 200, "
                "N=50 x 500 generations; needs MESRET_FULL=1 (hours)",
    },
    quick_minutes=18.0,
)
