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


def _toy_on_digits(cfg):
    """A toy trained with ``cfg`` on the training digits, with 40 dev and 40 test items (disjoint
    digits): ``(adapter, dev_items, test_items)``."""
    from mc2_bench.offline.digits import digits_items
    from mc2_bench.offline.experiments import _split
    from mc2_bench.offline.toy import load_digits, train_toy
    from mc2_bench.offline.toy_adapter import ToyAdapter

    X, y = load_digits()
    tr, dv, te = _split(len(y))
    dev_p = digits_items(X, y, dv[:40], 1, prefix="dev")
    test_p = digits_items(X, y, te[:40], 2, prefix="test")
    images = {it.image: im for it, im in dev_p + test_p}
    ad = ToyAdapter(train_toy(cfg, X[tr], y[tr], seed=0), images.__getitem__)
    return ad, [p[0] for p in dev_p], [p[0] for p in test_p]


@pytest.fixture(scope="session")
def toy_on_digits():
    """``_toy_on_digits`` as a fixture (test modules cannot import conftest)."""
    return _toy_on_digits
