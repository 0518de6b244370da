from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "crossq"
    json_commands = (("bench", "--tokens", "2000", "--queries", "2", "--repeats", "1", "--batch", "1024",
                      "--dim", "32"),)
