from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "decodeshare"
