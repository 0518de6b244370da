import numpy as np
import pytest
from fair_cdal.config import SyntheticConfig
from fair_cdal.synthetic import make_fair_multiview


@pytest.fixture(scope="session")
def small():
    """Two views, 3 clusters, 2 groups skewed 0.8 / 0.2 with a strong group shift (n = 240)."""
    return make_fair_multiview(SyntheticConfig(n=240, k=3, dims=(5, 7), latent=4), seed=3)


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)
