"""One torch thread for the package's tests: the models here are tiny, and on 2 shared cores a
second intra-op thread mostly spins (a 40-step toy took 40 CPU-s with 2 threads, 3 with 1)."""

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
