import pytest

from icml26_shared import registry
from icml26_shared.runner import run_one
from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "leo-craftax"

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
