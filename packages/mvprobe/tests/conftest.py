import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """The test machines' cores are shared: one thread is faster and deterministic."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
