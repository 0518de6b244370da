"""The HSIC mechanism in the pgd Z_u solver (the mutant hsic-sign-flipped-pgd in mutants.toml)."""

from __future__ import annotations

from fair_cdal import core
from fair_cdal.config import SolverConfig
from fair_cdal.solver import CDALSolver, Views


def _run(data, alpha):
    views, y, g = data
    cfg = SolverConfig(alpha=alpha, beta=1.0, gamma=1.0, max_iter=10, tol=0.0, zu_solver="pgd")
    return CDALSolver(Views(views), g, 2, 6, cfg, seed=0).run()


def test_pgd_hsic_term_is_what_alpha_lowers(small):
    """With the pgd solver, switching α on lowers ‖Z_uᵀĜ‖² (fails if its HSIC gradient flips)."""
    codes = small[2]
    off = core.hsic_term(_run(small, 0.0).Zu, codes, 2)
    on = core.hsic_term(_run(small, 0.5).Zu, codes, 2)
    assert on < 0.5 * off
