"""Flip diagnostics (crossq.metrics) on hand-built cases, and the codec's use of training and
context that they measure."""

import numpy as np
import pytest
import torch
from crossq.metrics import (
    code_flip_rate,
    context_flip_rate,
    greedy_start_codes,
    segment_argmax,
    winner_flip_rate,
)


def test_code_flip_rate_counts_a_known_edit():
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 256, size=(10, 4)).astype(np.uint8)
    assert code_flip_rate(ref, ref.copy()) == {"per_byte": [0.0] * 4, "code": 0.0, "any_byte": 0.0}
    codes = ref.copy()
    codes[[0, 1, 2], 1] += 1  # byte 1 of tokens 0-2
    codes[[2, 7], 3] += 5  # byte 3 of tokens 2 and 7
    r = code_flip_rate(codes, ref)
    assert r["per_byte"] == pytest.approx([0.0, 0.3, 0.0, 0.2])
    assert r["code"] == pytest.approx(5 / 40)
    assert r["any_byte"] == pytest.approx(4 / 10)  # token 2 changed twice, counted once
    with pytest.raises(ValueError):
        code_flip_rate(codes[:, :2], ref)


def _two_code_model(contexts):
    """One codebook of two entries (+x, -x) on 2-d tokens; the context of each document is
    ``contexts[d]`` and adds ``+c`` to code 1's logit (the gate reads only the context)."""
    from crossq.core import CrossQuantizer

    m = CrossQuantizer(2, 1, K=2, context_dim=1, hidden=1)
    with torch.no_grad():
        m.codebooks.copy_(torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]]))
        m.gate[0].weight.zero_()
        m.gate[0].weight[0, 4] = 1.0  # input = [e (2), r (2), c (1)]
        m.gate[0].bias.zero_()
        m.u.zero_()
        m.u[0, 1, 0] = 1.0
    class FixedContext(torch.nn.Module):
        def forward(self, X, offsets):
            return torch.tensor(contexts, dtype=torch.float32)[:, None]

    m.context = FixedContext()
    return m


def test_context_flip_rate_counts_the_codes_the_context_alone_changes():
    X = np.array([[1.0, 0.0]] * 5, np.float32)  # every token nearest +x (code 0)
    off = np.array([0, 2, 5])
    m = _two_code_model([0.0, 10.0])  # doc 1's context (logit +10 > gap 4) flips it to code 1
    r = context_flip_rate(m, X, off)
    assert r["any_byte"] == pytest.approx(3 / 5) and r["per_byte"] == pytest.approx([0.6])
    assert m.use_context  # the model is left as it was
    assert context_flip_rate(_two_code_model([0.0, 3.0]), X, off)["any_byte"] == 0.0  # 3 < 4


def test_greedy_start_is_plain_residual_quantization(corpus16):
    from crossq.config import CrossQConfig
    from crossq.train import init_quantizer

    X, off = corpus16
    model = init_quantizer(X, CrossQConfig(bytes_per_token=2, kmeans_iters=3), seed=0)
    books = model.codebooks.detach().numpy().copy()
    with torch.no_grad():
        model.u.normal_()  # a "trained" model: the start must ignore it
    r, want = X.astype(np.float64), []
    for C in books.astype(np.float64):
        k = ((r[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
        want.append(k)
        r = r - C[k]
    got = greedy_start_codes(model, X, off, books)
    assert (got == np.stack(want, 1)).mean() > 0.999  # float32 vs float64 near-ties aside


def test_segment_argmax_matches_a_loop(make_corpus):
    X, off = make_corpus(n_docs=7, dim=8, seed=3)
    Q = torch.randn(5, 8)
    S = Q @ torch.from_numpy(X).T
    got = segment_argmax(S, torch.from_numpy(off))
    for j in range(7):
        want = off[j] + S[:, off[j]:off[j + 1]].argmax(1)
        assert torch.equal(got[:, j], want)


def test_winner_flip_rate_hand_built_and_fp16():
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    off = np.array([0, 2, 4])
    Q = [torch.tensor([[1.0, 0.0]])]
    X_hat = X.clone()
    X_hat[:2] = torch.tensor([[0.5, 0.0], [0.9, 0.0]])  # doc 0's winner moves to its 2nd token
    assert winner_flip_rate(Q, X, X, off) == 0.0
    assert winner_flip_rate(Q, X, X_hat, off) == pytest.approx(0.5)
    assert winner_flip_rate(Q, X, X_hat, off, docs=np.array([[1]])) == 0.0
    assert winner_flip_rate(Q, X, X_hat, off, docs=np.array([[0]])) == 1.0


def test_fp16_index_has_no_winner_flips(corpus16):
    from crossq.codecs import get_codec

    X, off = corpus16
    codec = get_codec("fp16")(X.shape[1])
    codec.fit(X, off)
    X_hat = torch.from_numpy(codec.decode(codec.encode(X, off)))
    Qs = [torch.from_numpy(X[off[d]:off[d] + 4]) for d in range(0, 50, 5)]
    assert winner_flip_rate(Qs, torch.from_numpy(X), X_hat, off) == 0.0
    coarse = get_codec("pq")(X.shape[1], 1)
    coarse.fit(X, off)
    X_pq = torch.from_numpy(coarse.decode(coarse.encode(X, off)))
    assert winner_flip_rate(Qs, torch.from_numpy(X), X_pq, off) > 0.05  # a 1-byte codec does flip


def test_the_fitted_codec_leaves_its_greedy_start_and_encodes_with_context(corpus16):
    """Training moves codes away from the greedy-RQ start (steps forced to 0 would not), and the
    codec's own encoding is the trained model's with-context encoding, which the context changes."""
    from crossq.codecs import get_codec
    from crossq.core import residual_kmeans

    X, off = corpus16
    init = residual_kmeans(X, 2, 256, 5, 0)
    codec = get_codec("crossq")(X.shape[1], 2, steps=30, lr=3e-2, queries_per_step=8, candidates=8)
    codec.params_init = init
    codec.fit(X, off, seed=0)
    codes = codec.encode(X, off)
    assert code_flip_rate(codes, greedy_start_codes(codec.model, X, off, init))["any_byte"] > 0.05
    codec.model.use_context = True  # what the codec should have encoded with
    with torch.no_grad():
        with_ctx, _ = codec.model.encode(torch.from_numpy(X), torch.from_numpy(off))
    assert np.array_equal(codes, with_ctx.numpy().astype(np.uint8))
    assert context_flip_rate(codec.model, X, off)["any_byte"] > 0.0
