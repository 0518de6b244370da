"""The MaxSim-trained encoder head and the query-side light fine-tuning (projection.py), and the
streamed training data of ``crossq train``."""

import numpy as np
import torch
from crossq.core import maxsim_bruteforce
from crossq.projection import (
    finetune_query_projection,
    maxsim_matrix,
    maxsim_matrix_flat,
    pad,
    project,
    train_projection,
)


def _pairs(n=24, H=16, seed=0):
    """Queries that are noisy, rotated copies of a few of their document's tokens: the relevant
    signal lives in a subspace that a random head mostly discards."""
    rng = np.random.default_rng(seed)
    docs = [rng.standard_normal((int(rng.integers(5, 9)), H)).astype(np.float32) for _ in range(n)]
    # the discriminative directions are the last 4 dims, the first 12 carry large shared noise
    for d in docs:
        d[:, :12] = 3.0 * rng.standard_normal(12).astype(np.float32)
    queries = []
    for d in docs:
        q = d[rng.choice(len(d), 3, replace=False)].copy()
        q[:, :12] = 3.0 * rng.standard_normal(12).astype(np.float32)
        queries.append(q + 0.05 * rng.standard_normal(q.shape).astype(np.float32))
    return docs, queries


def _mrr(docs, queries, W, Wq=None):
    D, Q = project(docs, W), project(queries, W if Wq is None else Wq)
    rr = []
    for i, q in enumerate(Q):
        s = maxsim_bruteforce(q, D)
        rr.append(1.0 / (1 + int((s > s[i]).sum())))
    return float(np.mean(rr))


def test_maxsim_matrix_equals_bruteforce():
    rng = np.random.default_rng(1)
    qs = [rng.standard_normal((L, 6)).astype(np.float32) for L in (2, 5)]
    ds = [rng.standard_normal((L, 6)).astype(np.float32) for L in (3, 1, 4)]
    Q, qm = pad([torch.from_numpy(q) for q in qs])
    D, dm = pad([torch.from_numpy(d) for d in ds])
    got = maxsim_matrix(Q, qm, D, dm).numpy()
    want = np.stack([maxsim_bruteforce(q, ds) for q in qs])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    flat = torch.from_numpy(np.concatenate(qs))  # unpadded query rows (what training uses)
    q_of = torch.tensor([0, 0, 1, 1, 1, 1, 1])
    np.testing.assert_allclose(maxsim_matrix_flat(flat, q_of, 2, D, dm).numpy(), want, rtol=1e-5, atol=1e-5)


def test_contrastive_maxsim_training_beats_its_initial_head():
    """A head that keeps the shared-noise dims (the PCA-like initialisation: largest variance)
    ranks poorly; MaxSim training with in-batch negatives must move it to the signal."""
    docs, queries = _pairs()
    W0 = np.eye(16, 4, dtype=np.float32)  # the 4 noisiest dims: what PCA would keep
    W0 += 0.05 * np.random.default_rng(0).standard_normal(W0.shape).astype(np.float32)
    before = _mrr(docs, queries, W0)
    W = train_projection(docs, queries, list(range(len(docs))), W0, steps=150, batch=12, lr=5e-2)
    assert W.shape == W0.shape
    assert _mrr(docs, queries, W) > before + 0.2
    # zero steps leaves the head untouched (the mechanism, not a side effect, moves it)
    np.testing.assert_array_equal(train_projection(docs, queries, list(range(24)), W0, steps=0), W0)


def test_query_finetuning_against_fixed_documents():
    """Only the query head moves; documents stay as given (the compressed index is untouched),
    and the fine-tuned query head ranks the fixed documents better than the initial one."""
    docs, queries = _pairs(seed=2)
    W = np.eye(16, 4, dtype=np.float32)
    W[12:, :] = np.eye(4, dtype=np.float32) * 0.3  # documents keep some signal
    fixed = project(docs, W)
    cands = np.array([[(i + 1) % 24, (i + 2) % 24] for i in range(24)])
    snaps = finetune_query_projection(queries, list(range(24)), cands, fixed, W, snapshots=(0, 120),
                                      batch=12, lr=5e-2)
    np.testing.assert_array_equal(snaps[0], W)

    def mrr(Wq):
        Q = project(queries, Wq)
        return float(np.mean([1.0 / (1 + int((s > s[i]).sum()))
                              for i, s in enumerate(maxsim_bruteforce(q, fixed) for q in Q)]))

    assert mrr(snaps[120]) > mrr(W) + 0.1


def test_streamed_training_data_equals_the_in_memory_one(tiny_model):
    """``crossq train``'s streamed candidates and teacher scores (chunks of 7 documents) equal
    ``build_training_set`` on the whole corpus, and no chunk larger than 7 is ever encoded."""
    from crossq.config import EncoderConfig
    from crossq.corpus import stdlib_pairs
    from crossq.encoder import LateInteractionEncoder
    from crossq.indexer import offsets_of, stream_training_data
    from crossq.train import build_training_set

    pairs = stdlib_pairs()[:40]
    texts = [p[2] for p in pairs]
    qtexts = [p[1] for p in pairs[:12]]
    enc = LateInteractionEncoder.load(EncoderConfig(model=str(tiny_model), dim=8, doc_maxlen=24))
    seen = []
    real = enc.hidden
    enc.hidden = lambda t, is_query=False, progress=None: (seen.append((len(t), is_query)),
                                                           real(t, is_query, progress))[1]
    qh = enc.hidden(qtexts, is_query=True)
    positives = list(range(12))
    X, off, ts = stream_training_data(enc, texts, qh, positives, n_candidates=5, chunk_docs=7,
                                      fit_docs=10)
    assert max(n for n, q in seen if not q) <= 7
    from crossq.embeddings import as_stored

    full = as_stored(enc.encode(texts))  # token vectors at fp16 precision, as `crossq index` (0.6.1)
    Qs = [torch.from_numpy(q) for q in enc.project(qh)]
    ref = build_training_set(Qs, torch.from_numpy(np.concatenate(full)),
                             torch.from_numpy(offsets_of(full)), 5, positives)
    kept = len(off) - 1
    assert kept < len(texts)  # only the sample and the candidates' documents are held
    docs_local = [X[off[j]:off[j + 1]] for j in range(kept)]
    for i in range(12):
        got_docs = [docs_local[j] for j in ts.candidates[i].tolist()]
        want_docs = [full[j] for j in ref.candidates[i].tolist()]
        for a, b in zip(got_docs, want_docs, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_allclose(ts.teacher[i].numpy(), ref.teacher[i].numpy(), rtol=1e-4, atol=1e-4)
        assert int(ts.positive[i]) == int(ref.positive[i])
