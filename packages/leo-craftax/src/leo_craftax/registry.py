"""The descriptor registered under ``icml26.methods`` (imports nothing heavy)."""

from icml26_shared import MethodDescriptor, Paper
from icml26_shared.registry import package_version
from icml26_shared.results import Claim

CLAIMS = (
    Claim("speedup", "LEO's update is far faster than all-goals relabelling (>250x at Craftax "
          "scale)", "per-update ratio (HER-all time / LEO time of the targets and one gradient step "
          "on one minibatch)", "higher", 250.0, "x",
          "abstract"),
    Claim("leo_success", "LEO beats PQN and PQN + HER in success over all goals at equal steps",
          "success_all_goals", "higher", 0.16, "",
          "results figure, Craftax 512 goals (PQN + HER 0.12, PQN 0.11)"),
    Claim("dual_leo_success", "Dual LEO (a LEO teacher for the acting policy) beats PQN and "
          "PQN + HER", "success_all_goals", "higher", 0.75, "",
          "results figure, Dual LEO (PQN) on Craftax-Classic (PQN + HER 0.67)"),
)

DESCRIPTOR = MethodDescriptor(
    name="leo-craftax",
    version=package_version("leo-craftax"),
    paper=Paper("Goal-Conditioned Agents that Learn Everything All at Once", arxiv="2605.23551"),
    claims=CLAIMS,
    reproduce="leo_craftax.experiments:reproduce",
    summary="All-goals Q head (LEO) vs commanded-goal PQN, HER and PPO, in JAX on Craftax.",
    scales={
        "smoke": "5x5 gridworld, LEO vs PQN, 2 seeds, 24 updates; speed at K=8 and a 3x3 whole "
                 "step; compiled unoptimised (seconds)",
        "quick": "per-update ratio at K=16, 136, 512 (cpu preset) and whole-step env steps/s at "
                 "K=16, 144; 10x10 gridworld (73 goals), LEO / LEO on the commanded goal "
                 "only / PQN / PQN+HER / Dual LEO at their dev-map settings, 3 seeds, 205k "
                 "steps; Craftax-Classic pipeline smoke (minutes on 2 CPU cores)",
        "full": "GPU recipe: six methods on Craftax-Classic and Craftax, 1e9 steps, 3 seeds, "
                "and the paper-preset speed at K=136 and 512; needs a CUDA build of JAX and a "
                "GPU, refused at once without",
    },
    quick_minutes=7,
)
