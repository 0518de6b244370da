"""The icml26 registration of mths (light: imports nothing heavy)."""

from icml26_shared import Claim, MethodDescriptor, Paper
from icml26_shared.registry import package_version

_SRC = "issue 19 target at quick scale; paper: 'outperforms LLM-driven heuristic design' (abstract)"

CLAIMS = (
    Claim("vs_eoh_tsp", "TSP: MTHS held-out mean gap <= 0.8 x EoH's at equal calls", "mean_gap",
          "lower", source=_SRC),
    Claim("vs_eoh_cvrp", "CVRP: MTHS held-out mean gap <= 0.8 x EoH's at equal calls", "mean_gap",
          "lower", source=_SRC),
    Claim("vs_eoh_fssp", "flow shop: MTHS held-out mean gap <= 0.8 x EoH's at equal calls", "mean_gap",
          "lower", source=_SRC),
    Claim("vs_classic_tsp", "TSP: MTHS held-out mean gap <= 0.5 x the best iterated classic's (same steps and CPU)",
          "mean_gap", "lower", source="issue 19 target; paper: 'beats common heuristics' (abstract); "
          "against an iterated classic since issue 47"),
    Claim("vs_classic_cvrp", "CVRP: MTHS held-out mean gap <= 0.5 x the best iterated classic's (same steps and CPU)",
          "mean_gap", "lower", source="issue 19 target; paper: 'beats common heuristics' (abstract); "
          "against an iterated classic since issue 47"),
    Claim("transfer", "knowledge transfer beats no transfer on >= 2 of 3 tasks (paired 95% interval)",
          "tasks_won", "higher", paper_value=None,
          source="abstract (transfer between tasks' elites); the artifacts ship a without-transfer ablation [C]"),
    Claim("bpp", "BPP: the evolved metaheuristic M*, ported, uses fewer bins than random metaheuristics "
          "(paired 95% interval below 0, on instances where FFD is above the lower bound)",
          "mean_bins", "lower", paper_value=None,
          source="abstract (evolved metaheuristics generalise); the repo's bpp/ study [C]; "
          "was 'never more bins than FFD', true by construction (issue 47)"),
)

DESCRIPTOR = MethodDescriptor(
    name="mths",
    version=package_version("mths"),
    paper=Paper("Multi-Task Hierarchical Search (MTHS) for automated heuristic design",
                url="https://openreview.net/forum?id=dgvx86qybJ"),
    claims=CLAIMS,
    reproduce="mths.experiments:reproduce",
    summary="Co-evolves a task-agnostic metaheuristic and per-task solvers (TSP, CVRP, flow shop) "
            "with transfer between tasks' elites; offline grammar operator, sandboxed evaluation.",
    scales={
        "smoke": "TSP only, 8 grammar calls, 2 train / 2 held-out instances, 1 seed (seconds, no torch)",
        "quick": "TSP n=60, CVRP n=30, flow shop 20x5 train (4 each, 0.2 s) -> held-out TSP n=80, "
                 "CVRP n=40, flow shop 20x10 (8 each, 0.5 s); MTHS / no transfer / EoH / random search at "
                 "60 grammar calls x 3 seeds (EoH and random also at MTHS's evaluations), descents, "
                 "iterated classics and OR-Tools GLS, BPP porting (M* vs 8 random metaheuristics), a "
                 "small real SmolLM2-135M search from a grammar-initialised population",
        "full": "the GPU recipe: MTHS_MODEL (a local coder model folder, put on the CUDA device; or a "
                "model name served by vLLM at MTHS_BASE_URL, key in MTHS_API_KEY) and the user's "
                "instance folders MTHS_TSPLIB, MTHS_CVRPLIB, MTHS_TAILLARD; 1,500 calls, 10 s per "
                "instance. Refuses at once when any is missing",
    },
    quick_minutes=6.5,  # 0.2.3: 6.3 CPU-min in all (/usr/bin/time -v); 30 min wall on the shared 2-core machine at load ~18 (README)
)
