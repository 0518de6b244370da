import pytest

from icml26_shared import registry
from icml26_shared.runner import run_one
from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "leo-craftax"
    # timings, named with their units: the per-update ratio, the recompute cost, env steps/s
    nondeterministic_metrics = (*ContractTests.nondeterministic_metrics, "per_update_ratio",
                                "recompute_cost", "env_steps_per_s", "step_ratio")

    @pytest.fixture(scope="class")
    @classmethod
    def smoke_runs(cls, smoke_reproduction, tmp_path_factory):
        """The contract's two ``reproduce --scale smoke --seed 0`` runs: the first is the
        session's (``conftest.smoke_reproduction``, whose training the other tests read), the
        second runs here; both are whole, independent runs."""
        a, path = smoke_reproduction
        b = run_one(registry.get(cls.package), "smoke", tmp_path_factory.mktemp("b"), seed=0,
                    catch=False)
        return a, b, path
