import numpy as np
import pytest


def random_corpus(n_docs=40, dim=16, seed=0, min_len=4, max_len=20):
    rng = np.random.default_rng(seed)
    lens = rng.integers(min_len, max_len, size=n_docs)
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    X = rng.standard_normal((off[-1], dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, off


@pytest.fixture(scope="session")
def make_corpus():
    return random_corpus


@pytest.fixture(scope="session")
def corpus16():
    """~600 unit token vectors of 16 dims in 40 documents (enough for 256-entry codebooks)."""
    return random_corpus(n_docs=50, dim=16, seed=0)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from crossq.corpus import stdlib_pairs
    from crossq.encoder import tiny_bert

    words = [p[1] + " " + p[2] for p in stdlib_pairs()[:200]]
    return tiny_bert(tmp_path_factory.mktemp("tiny-bert"), seed=0, hidden=32, vocab_words=words)
