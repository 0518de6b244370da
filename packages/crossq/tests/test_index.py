"""The on-disk index: exact byte accounting, nothing but codes stored, clear errors, search."""

import json

import numpy as np
import pytest
import torch
from crossq.codecs import get_codec
from crossq.core import maxsim_bruteforce
from crossq.index import Index, write_index

from icml26_shared import UserError


@pytest.fixture(scope="module")
def crossq_index(corpus16, tmp_path_factory):
    X, off = corpus16
    codec = get_codec("crossq")(16, 2, steps=2, queries_per_step=4)
    codec.fit(X, off, seed=0)
    out = tmp_path_factory.mktemp("idx") / "index"
    ids = [f"d{i}" for i in range(len(off) - 1)]
    mf = write_index(out, codec.encode(X, off), off, ids, codec, {"model": "test"})
    return out, mf, codec


def test_size_on_disk_matches_reported_bytes(crossq_index):
    out, mf, _ = crossq_index
    b = mf["bytes"]
    sizes = {f.name: f.stat().st_size for f in out.iterdir() if f.name != "manifest.json"}
    assert sum(sizes.values()) == b["total_files"] + b["encoder_files"]
    n = mf["n_tokens"]
    assert b["codes"] == n * 2 and b["bytes_per_token_raw"] == 2
    header = sizes["codes.npy"] - n * 2
    assert 0 < header <= 128  # the .npy header: counted as format overhead, never as codes
    assert b["bytes_per_token_with_metadata"] * n == pytest.approx(b["codes"] + b["metadata"])
    assert b["bytes_per_token_on_disk"] * n == pytest.approx(b["total_files"])
    assert b["reduction_vs_fp32_raw"] == 16 * 4 / 2


def test_no_context_vectors_are_stored(crossq_index):
    out, _, codec = crossq_index
    assert {f.name for f in out.iterdir()} == {"manifest.json", "codes.npy", "offsets.npy",
                                               "doc_ids.json", "codec.books.npy"}
    assert np.load(out / "codec.books.npy").shape == (2, 256, 16)


def test_reopened_index_scores_like_the_codec(crossq_index, corpus16):
    out, _, codec = crossq_index
    X, off = corpus16
    idx = Index.open(out)
    Q = torch.from_numpy(X[:3])
    codes = codec.encode(X, off)
    dec = codec.decode(codes)
    ref = maxsim_bruteforce(X[:3], [dec[off[j]:off[j + 1]] for j in range(len(off) - 1)])
    np.testing.assert_allclose(idx.scores(Q).numpy(), ref, rtol=1e-4, atol=1e-4)
    sub = np.array([3, 0, 7])
    np.testing.assert_allclose(idx.scores(Q, sub).numpy(), ref[sub], rtol=1e-4, atol=1e-4)
    top, _ = idx.search(Q, k=5)
    assert list(top) == list(np.argsort(-ref, kind="stable")[:5])


def test_candidates_probing_every_cell_equal_exhaustive(crossq_index, corpus16):
    idx = Index.open(crossq_index[0])
    Q = torch.from_numpy(corpus16[0][10:14])
    exhaustive, s1 = idx.search(Q, k=5)
    probed, s2 = idx.search(Q, k=5, nprobe=10_000)
    np.testing.assert_array_equal(exhaustive, probed)
    few = idx.candidates(Q, nprobe=1)
    assert 0 < len(few) <= idx.n_docs


def test_fp16_index_maxsim_equals_bruteforce(corpus16, tmp_path):
    X, off = corpus16
    codec = get_codec("fp16")(16)
    write_index(tmp_path / "fp", codec.encode(X, off), off, [str(i) for i in range(len(off) - 1)], codec)
    Q = X[20:24]
    got = Index.open(tmp_path / "fp").scores(torch.from_numpy(Q)).numpy()
    ref = maxsim_bruteforce(Q, [X[off[j]:off[j + 1]] for j in range(len(off) - 1)])
    np.testing.assert_allclose(got, ref, atol=5e-3)


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_corrupt_file_is_a_clear_error(crossq_index, tmp_path):
    bad = _copy(crossq_index[0], tmp_path / "bad")
    data = bytearray((bad / "codes.npy").read_bytes())
    data[-1] ^= 0xFF
    (bad / "codes.npy").write_bytes(bytes(data))
    with pytest.raises(UserError, match="corrupt"):
        Index.open(bad)
    (bad / "codes.npy").write_bytes(bytes(data[:-5]))
    with pytest.raises(UserError, match="corrupt"):
        Index.open(bad)


def test_other_version_or_foreign_folder_is_a_clear_error(crossq_index, tmp_path):
    other = _copy(crossq_index[0], tmp_path / "v2")
    mf = json.loads((other / "manifest.json").read_text())
    mf["version"] = 999
    (other / "manifest.json").write_text(json.dumps(mf))
    with pytest.raises(UserError, match="version 999"):
        Index.open(other)
    (other / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="corrupt"):
        Index.open(other)
    with pytest.raises(UserError, match="not a crossq index"):
        Index.open(tmp_path)


def test_write_refuses_to_overwrite(crossq_index, corpus16):
    out, _, codec = crossq_index
    X, off = corpus16
    with pytest.raises(UserError, match="exists"):
        write_index(out, codec.encode(X, off), off, [str(i) for i in range(len(off) - 1)], codec)
