"""The maths: MaxSim, lookup-table scoring, the conditional quantizer and the losses."""

import numpy as np
import pytest
import torch
from crossq.core import (
    CrossQuantizer,
    adc_tables,
    adc_token_scores,
    additive_decode,
    listwise_kl,
    margin_loss,
    maxsim,
    maxsim_bruteforce,
    maxsim_many,
    residual_kmeans,
)


def test_maxsim_equals_bruteforce(make_corpus):
    X, off = make_corpus(n_docs=7, dim=8, seed=1)
    Q = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    docs = [X[off[j]:off[j + 1]] for j in range(7)]
    got = maxsim(torch.from_numpy(Q), torch.from_numpy(X), torch.from_numpy(off)).numpy()
    np.testing.assert_allclose(got, maxsim_bruteforce(Q, docs), rtol=1e-5, atol=1e-5)
    many = maxsim_many([torch.from_numpy(Q[:2]), torch.from_numpy(Q)], torch.from_numpy(X),
                       torch.from_numpy(off), max_rows=3)
    np.testing.assert_allclose(many[1].numpy(), got, rtol=1e-6)
    np.testing.assert_allclose(many[0].numpy(), maxsim_bruteforce(Q[:2], docs), rtol=1e-5, atol=1e-5)


def test_adc_equals_decoded_dot_product():
    g = torch.Generator().manual_seed(0)
    books = torch.randn(3, 256, 12, generator=g)
    codes = torch.randint(0, 256, (50, 3), generator=g)
    Q = torch.randn(4, 12, generator=g)
    lut = adc_token_scores(adc_tables(Q, books), codes)
    torch.testing.assert_close(lut, Q @ additive_decode(codes, books).T, rtol=1e-5, atol=1e-4)


def _greedy_rq(X, books):
    """Reference: plain greedy residual quantization (nearest codeword per stage)."""
    R, codes = X.copy(), []
    for C in books:
        c = np.argmin(((R[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
        codes.append(c)
        R = R - C[c]
    return np.stack(codes, 1)


def test_untrained_gate_is_plain_residual_quantization(corpus16):
    X, off = corpus16
    books = residual_kmeans(X, 2, 256, 5, seed=0)
    for context in (True, False):
        q = CrossQuantizer(16, 2, context=context)
        with torch.no_grad():
            q.codebooks.copy_(torch.from_numpy(books))
        codes, _ = q.encode(torch.from_numpy(X), torch.from_numpy(off))
        np.testing.assert_array_equal(codes.numpy(), _greedy_rq(X, books))


def _trained_like(context, seed=0):
    torch.manual_seed(seed)
    q = CrossQuantizer(16, 2, context=context)
    with torch.no_grad():
        q.codebooks.normal_(0, 0.3)
        q.u.normal_(0, 1.0)
        for lin in (*q.gate, q.context.rho[1], q.context.phi[2]):  # as after training: non-trivial
            lin.weight.normal_(0, 1.0)
    return q


def test_context_changes_codes_only_with_context(corpus16):
    """Encoding a document's first token alongside different siblings: the codes change with
    context=True (the document context enters), never with context=False (token-wise)."""
    X, _ = corpus16
    tok = torch.from_numpy(X[:1])
    a = torch.cat([tok, torch.from_numpy(X[1:6])])
    changed = {}
    for context in (True, False):
        q = _trained_like(context)
        codes_a, _ = q.encode(a, torch.tensor([0, len(a)]))
        diffs = 0
        for s in range(20):
            sib = torch.from_numpy(X[10 + 5 * s: 15 + 5 * s])
            b = torch.cat([tok, sib])
            codes_b, _ = q.encode(b, torch.tensor([0, len(b)]))
            diffs += int((codes_a[0] != codes_b[0]).any())
        changed[context] = diffs
    assert changed[False] == 0
    assert changed[True] > 0


def test_soft_codes_at_zero_temperature_equal_hard(corpus16):
    X, off = corpus16
    q = _trained_like(True)
    Xt, offt = torch.from_numpy(X), torch.from_numpy(off)
    hard_codes, hard = q.encode(Xt, offt)
    _, soft = q.encode(Xt, offt, temperature=1e-6)
    torch.testing.assert_close(soft, hard, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(q.decode(hard_codes), hard)
    _, st = q.encode(Xt, offt, temperature=0.5, straight_through=True)
    torch.testing.assert_close(st, hard, rtol=1e-5, atol=1e-5)


def test_losses_vanish_when_quantized_scores_equal_teacher():
    s = torch.randn(4, 6)
    pos = torch.tensor([0, 2, 5, 1])
    assert float(listwise_kl(s, s.clone())) == pytest.approx(0.0, abs=1e-6)
    assert float(margin_loss(s, s + 3.0, pos)) == pytest.approx(0.0, abs=1e-6)  # shift-invariant
    worse = s.clone()
    worse[torch.arange(4), pos] -= 5.0  # squeeze the positives' margins
    assert float(listwise_kl(s, worse)) > 0
    assert float(margin_loss(s, worse, pos)) > 0


def test_training_improves_ranking_fidelity(corpus16):
    """A few steps of KL + margin training lower the listwise KL to the teacher below the
    residual k-means initialisation on the same training queries."""
    from crossq.config import CrossQConfig
    from crossq.train import (
        build_training_set,
        fit_crossq,
        init_quantizer,
        pseudo_queries,
        ranking_kl,
    )

    X, off = corpus16
    Xt, offt = torch.from_numpy(X), torch.from_numpy(off)
    qs, pos = pseudo_queries(Xt, off, 30, 4, seed=0)
    data = build_training_set(qs, Xt, offt, 8, pos)
    cfg = CrossQConfig(bytes_per_token=1, steps=40, queries_per_step=8, w_recon=0.0)

    assert (ranking_kl(fit_crossq(X, off, data, cfg, seed=0), Xt, off, data)
            < ranking_kl(init_quantizer(X, cfg, seed=0), Xt, off, data))
