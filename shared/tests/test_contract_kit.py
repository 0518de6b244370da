"""The contract kit itself, run against the demo package (and so proven able to pass)."""

import pytest

from icml26_shared.testing import ContractTests


@pytest.fixture(scope="class", autouse=True)
def _registered(demo_package):
    return demo_package


class TestDemoContract(ContractTests):
    package = "icml26-demo"
    cli_module = "icml26_demo"
