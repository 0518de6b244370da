"""Codecs: exact byte budgets, lookup-table scoring equal to decoding, failure modes."""

import numpy as np
import pytest
import torch
from crossq.codecs import get_codec

from icml26_shared import UserError

PARAMS = {"opq": {"niter": 2}, "crossq": {"steps": 3, "queries_per_step": 4},
          "tokenwise": {"steps": 3, "queries_per_step": 4}, "residual": {}, "pq": {},
          "rq": {"beam": 2}, "lsq": {"train_iters": 2, "encode_ils_iters": 2}}
LOSSY = ("pq", "opq", "rq", "lsq", "residual", "crossq", "tokenwise")


@pytest.fixture(scope="module")
def fitted(corpus16):
    X, off = corpus16
    out = {}
    for name in ("fp16", "int8", *LOSSY):
        budget = None if name in ("fp16", "int8") else 4
        codec = get_codec(name)(16, budget, **PARAMS.get(name, {}))
        codec.fit(X, off, seed=0)
        out[name] = (codec, codec.encode(X, off))
    return out


@pytest.mark.parametrize("name,bpt", [("fp16", 32), ("int8", 16), *((n, 4) for n in LOSSY)])
def test_codes_are_exactly_the_budget(fitted, corpus16, name, bpt):
    codec, codes = fitted[name]
    assert codes.dtype == np.uint8 and codes.shape == (len(corpus16[0]), bpt)
    assert codec.bytes_per_token == bpt


@pytest.mark.parametrize("name", ["fp16", "int8", *LOSSY])
def test_lookup_table_scores_equal_decode_and_score(fitted, name):
    codec, codes = fitted[name]
    Q = torch.randn(5, 16, generator=torch.Generator().manual_seed(3))
    lut = codec.token_scores(Q, torch.from_numpy(codes))
    dec = Q @ torch.from_numpy(codec.decode(codes)).T
    torch.testing.assert_close(lut, dec, rtol=1e-5, atol=1e-5)
    assert (codec.codebooks() is not None) == (name not in ("fp16", "int8"))  # ADC where possible


def test_fp16_and_int8_are_near_lossless(fitted, corpus16):
    X, _ = corpus16
    np.testing.assert_allclose(fitted["fp16"][0].decode(fitted["fp16"][1]), X, atol=1e-3)
    np.testing.assert_allclose(fitted["int8"][0].decode(fitted["int8"][1]), X, atol=1e-2)


@pytest.mark.parametrize("name", ["pq", "opq"])
def test_pq_encode_decode_encode_is_idempotent(fitted, name):
    codec, codes = fitted[name]
    again = codec.encode(codec.decode(codes), None)
    assert (again == codes).mean() > 0.999  # exact up to float ties


def test_crossq_decodes_from_codes_and_codebooks_alone(fitted, corpus16):
    """The search side holds codebooks only (no context encoder, no gates), and decodes the
    same vectors: nothing beyond the codes is needed."""
    codec, codes = fitted["crossq"]
    state = codec.search_state()
    assert set(state) == {"books"}
    fresh = get_codec("crossq").from_config(codec.config())
    fresh.load_search_state(state)
    np.testing.assert_array_equal(fresh.decode(codes), codec.decode(codes))
    with pytest.raises(UserError, match="codec model"):
        fresh.encode(corpus16[0], corpus16[1])


def test_residual_native_layout_keeps_every_dimension():
    codec = get_codec("residual")(16, 1 + 16 // 8, nbits=1)
    assert codec.n_res == 16
    assert get_codec("residual")(16, 4, nbits=2).n_res == 12


@pytest.mark.parametrize("name,budget", [("pq", 3), ("opq", 5), ("fp16", 4), ("int8", 4),
                                         ("residual", 1), ("crossq", 0)])
def test_budget_the_codec_cannot_meet_is_a_user_error(name, budget):
    with pytest.raises(UserError, match="cannot meet"):
        get_codec(name)(16, budget)


def test_too_few_tokens_to_train_is_a_user_error(make_corpus):
    X, off = make_corpus(n_docs=5, dim=16)
    with pytest.raises(UserError, match="at least 256"):
        get_codec("pq")(16, 4).fit(X, off)


def test_unknown_codec():
    with pytest.raises(UserError, match="unknown codec"):
        get_codec("binary")


def _independent_decode(name, codec, codes, X, off):
    """Reconstruction through a path that does not use ``codec.codebooks()``: faiss's own
    decoders, or CrossQ's encoder output (the sum of the chosen codewords)."""
    if name in ("rq", "lsq"):
        return codec.q_.decode(codes)
    if name == "pq":
        return codec.pq_.decode(codes)
    if name == "opq":
        return codec.pq_.decode(codes) @ codec.rotation
    if name in ("crossq", "tokenwise"):
        with torch.no_grad():
            return codec.model.encode(torch.from_numpy(X), torch.from_numpy(off))[1].numpy()
    ids, Z = codes[:, 0].astype(int), np.zeros((len(codes), codec.n_res), np.float32)
    for j in range(codec.n_res):  # residual: unpack 1 bit per principal direction
        bit = (codes[:, 1 + j // 8] >> (j % 8)) & 1
        Z[:, j] = codec.weights[j][bit]
    return codec.centroids[ids] + Z @ codec.basis


@pytest.mark.parametrize("name", LOSSY)
def test_lossy_codecs_reconstruct_their_input(corpus16, name):
    """Decoding reconstructs the input: the decoder agrees with an independent path, the error
    is far below that of the zero vector (1 for unit vectors) and shrinks as bytes grow."""
    X, off = corpus16
    mse = []
    for B in ((2, 3) if name == "residual" else (2, 4, 8)):  # residual: all 16 dims at 3 B
        codec = get_codec(name)(16, B, **PARAMS[name])
        codec.fit(X, off, seed=0)
        codes = codec.encode(X, off)
        dec = codec.decode(codes)
        np.testing.assert_allclose(dec, _independent_decode(name, codec, codes, X, off),
                                   rtol=0, atol=3e-3)  # faiss PQ keeps fp32 centroids
        mse.append(float(((dec - X) ** 2).sum(1).mean()))
    assert mse[0] < 0.8, mse
    if name in ("crossq", "tokenwise"):  # trained for ranking, not reconstruction: 2 B vs 8 B
        assert mse[0] > mse[-1], mse
    else:
        assert all(a > b for a, b in zip(mse, mse[1:], strict=False)), mse
