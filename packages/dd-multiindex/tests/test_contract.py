from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "dd-multiindex"
    json_commands = (("fit-slopes", "{smoke_out}/run", "--json"),)
