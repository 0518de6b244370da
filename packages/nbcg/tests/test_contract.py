from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "nbcg"
    # the reproduction records its wall times (wall_s, embed_wall_s) as rows
    nondeterministic_metrics = (*ContractTests.nondeterministic_metrics, "wall_s")
