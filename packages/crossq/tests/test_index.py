"""The on-disk index: exact byte accounting, nothing but codes stored, clear errors, search."""

import json

import numpy as np
import pytest
import torch
from crossq.codecs import get_codec
from crossq.core import maxsim_bruteforce
from crossq.index import Index, write_index

from icml26_shared import UserError
from icml26_shared.io import MANIFEST


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
    """Each category of the byte report is the payload of its files, independently computed from
    the arrays on disk (not from the report's own sums)."""
    out, mf, _ = crossq_index
    b = mf["bytes"]
    n, n_docs = mf["n_tokens"], mf["n_docs"]
    assert b["codes"] == np.load(out / "codes.npy").nbytes == n * 2 and b["bytes_per_token_raw"] == 2
    books = np.load(out / "codec.books.npy")
    assert books.dtype == np.float16 and b["codebooks"] == books.nbytes == 2 * 256 * 16 * 2
    lengths = np.load(out / "doc_lengths.npy")
    assert lengths.dtype == np.uint16 and b["offsets"] == 2 * n_docs and lengths.sum() == n
    assert b["ids"] == (out / "doc_ids.json").stat().st_size  # string ids: one JSON table
    sizes = {f.name: f.stat().st_size for f in out.iterdir()
             if f.name not in ("manifest.json", MANIFEST)}
    assert sum(sizes.values()) == b["total_files"]
    header = sizes["codes.npy"] - n * 2
    assert 0 < header <= 128  # the .npy header: counted as "other", never as codes
    per = b["per_token"]
    assert sum(per.values()) * n == pytest.approx(b["total_files"])
    assert b["bytes_per_token_with_metadata"] * n == pytest.approx(sum(b[k] for k in ("codes", "codebooks", "offsets", "ids")))
    assert b["reduction_vs_fp32_raw"] == 16 * 4 / 2


def test_integer_ids_are_one_uint32_table(corpus16, tmp_path):
    X, off = corpus16
    codec = get_codec("pq")(16, 4)
    codec.fit(X, off)
    ids = [str(7 * i + 3) for i in range(len(off) - 1)]
    mf = write_index(tmp_path / "i", codec.encode(X, off), off, ids, codec)
    table = np.load(tmp_path / "i" / "doc_ids.npy")
    assert table.dtype == np.uint32 and mf["bytes"]["ids"] == 4 * len(ids)
    assert Index.open(tmp_path / "i").doc_ids == ids
    odd = ["01", *ids[1:]]  # "01" is not a canonical integer: kept as a string
    write_index(tmp_path / "s", codec.encode(X, off), off, odd, codec)
    assert Index.open(tmp_path / "s").doc_ids == odd


def test_size_model_matches_a_3m_token_index(tmp_path):
    """The size model predicts every payload category of a 3M-token index exactly, and at
    4 B/token with fp16 codebooks the index stays under 4.3 B/token (>= 59.5x vs fp16 at d=128)."""
    from crossq.index import disk_report, size_model

    rng = np.random.default_rng(0)
    dim = 128
    X = rng.standard_normal((2000, dim)).astype(np.float32)
    codec = get_codec("pq")(dim, 4)
    codec.fit(X, np.array([0, len(X)]))
    lengths = rng.integers(20, 120, size=44_000)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    assert n > 3_000_000
    codes = rng.integers(0, 256, size=(n, 4), dtype=np.uint8)
    mf = write_index(tmp_path / "big", codes, offsets, [str(i) for i in range(len(lengths))], codec,
                     cells=False)  # the size model's layout: no k-means cells (CrossQ needs none)
    cb = sum(a.nbytes for a in codec.search_state().values())
    model = size_model(n, len(lengths), 4, cb, int(lengths.max()), len(lengths))
    for k in ("codes", "codebooks", "offsets", "ids"):
        assert mf["bytes"][k] == model[k], k
    rep = disk_report(tmp_path / "big", mf)
    assert rep["bytes_per_token_with_metadata"] == pytest.approx(model["bytes_per_token_with_metadata"])
    assert rep["bytes_per_token_with_metadata"] <= 4.3
    assert sum(rep["bytes_per_token"].values()) == pytest.approx(rep["bytes_per_token_on_disk"])
    assert rep["bytes_per_token_on_disk"] * n == pytest.approx(
        sum(f.stat().st_size for f in (tmp_path / "big").iterdir() if f.name != MANIFEST))


def test_no_context_vectors_are_stored(crossq_index):
    out, _, codec = crossq_index
    assert {f.name for f in out.iterdir()} - {MANIFEST} == {"manifest.json", "codes.npy", "doc_lengths.npy",
                                               "doc_ids.json", "codec.books.npy"}
    assert np.load(out / "codec.books.npy").shape == (2, 256, 16)


def test_edited_manifest_is_refused(crossq_index, tmp_path):
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(crossq_index[0], edited)
    mf = json.loads((edited / "manifest.json").read_text())
    mf["codec"]["bytes_per_token"] = 3  # consistent JSON, wrong content
    (edited / "manifest.json").write_text(json.dumps(mf))
    with pytest.raises(UserError, match="modified"):
        Index.open(edited)


def test_block_wise_search_equals_one_block(crossq_index, corpus16):
    """Scoring in blocks of a few tokens (documents never split) gives the same scores."""
    idx = Index.open(crossq_index[0])
    Q = torch.from_numpy(corpus16[0][5:9])
    whole = idx.scores(Q, batch=10 ** 9)
    for batch in (1, 7, 33):
        blocks = idx.blocks(batch)
        assert blocks[0][0] == 0 and blocks[-1][1] == idx.n_docs
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
        torch.testing.assert_close(idx.scores(Q, batch=batch), whole)
        sub = np.array([4, 1, 9, 30])
        torch.testing.assert_close(idx.scores(Q, sub, batch=batch), whole[sub])
    # candidate scoring is bounded by --batch too: groups of whole candidates of <= batch tokens
    sizes, real = [], idx.codec.scorer
    idx.codec.scorer = lambda Q: (lambda f: lambda c: (sizes.append(len(c)), f(c))[1])(real(Q))
    everything = np.arange(idx.n_docs)[::-1].copy()
    torch.testing.assert_close(idx.scores(Q, everything, batch=40), whole[everything])
    assert len(sizes) > 1 and max(sizes) <= max(40, int(np.diff(idx.offsets).max()))


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
    assert 0 < len(few) < idx.n_docs
    # cells are the first code byte (CrossQ is residual-style): a document is a candidate iff
    # one of its tokens has a first code among each query token's best first-stage centroids
    books = idx.codec.codebooks()[0]
    live = torch.zeros(256, dtype=torch.bool)
    live[torch.from_numpy(np.unique(idx.codes[:, 0]).astype(np.int64))] = True
    best = set((Q @ torch.from_numpy(books).T).masked_fill(~live, -np.inf).argmax(1).tolist())
    want = [j for j in range(idx.n_docs)
            if set(idx.codes[idx.offsets[j]:idx.offsets[j + 1], 0].tolist()) & best]
    np.testing.assert_array_equal(few, want)


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


def test_two_byte_cells_are_the_first_two_stages_and_prune(corpus16):
    """On a large index the coarse cell is a code's first two bytes: a document is a candidate iff
    one of its tokens has (a, b) among a query token's best non-empty q.C_0[a] + q.C_1[b]; on a
    clustered index the cells keep the exhaustive top 10 while scoring a small share of it."""
    from crossq.bench import clustered_codes
    from crossq.codecs import get_codec

    X, off = corpus16
    codec = get_codec("crossq")(16, 3, steps=0)
    codec.fit(X, off, seed=0)
    codes, offs, _ = clustered_codes(40_000, 3, docs_per_topic=16, seed=1)
    idx = Index(codec, codes, offs, [str(i) for i in range(len(offs) - 1)])
    assert idx.cell_bytes() == 1  # below TWO_BYTE_CELLS_FROM tokens
    rng = np.random.default_rng(0)
    j = 7
    Q = codec.decode(codes[offs[j]:offs[j + 1]])[rng.integers(0, 64, 6)]
    Q = torch.from_numpy(Q / np.linalg.norm(Q, axis=1, keepdims=True))
    few = idx.candidates(Q, nprobe=2, cell_bytes=2)
    books = torch.from_numpy(codec.codebooks()[:2].astype(np.float32))
    np.testing.assert_array_equal(books[0].numpy(), codec.coarse_cells())
    comp = ((Q @ books[0].T)[:, :, None] + (Q @ books[1].T)[:, None, :]).reshape(len(Q), -1)
    pair = codes[:, 0].astype(np.int64) * 256 + codes[:, 1]
    live = torch.zeros(65536, dtype=torch.bool)
    live[torch.from_numpy(np.unique(pair))] = True
    best = set(comp.masked_fill(~live, -np.inf).topk(2, dim=1).indices.flatten().tolist())
    want = [d for d in range(idx.n_docs) if set(pair[offs[d]:offs[d + 1]].tolist()) & best]
    np.testing.assert_array_equal(few, want)
    assert j in few and len(few) < 0.2 * idx.n_docs
    top, _ = idx.search(Q, k=10)
    probed, _ = idx.search(Q, k=10, nprobe=2, cell_bytes=2)
    assert len(set(top) & set(probed)) >= 8 and probed[0] == top[0]
    everything, _ = idx.search(Q, k=10, nprobe=65536, cell_bytes=2)
    np.testing.assert_array_equal(everything, top)
    with pytest.raises(UserError, match="cell_bytes"):
        idx.candidates(Q, 2, cell_bytes=3)


def test_pq_cells_are_persisted_at_write_and_never_refitted(corpus16, tmp_path, monkeypatch):
    """A codec without first-stage cells (PQ) gets k-means cells when the index is written:
    centroids (fp16) and every token's cell id are files of the index, counted as ``cells`` and
    covered by the CRCs; opening and probing never re-cluster; a document is a candidate iff one
    of its tokens sits in one of a query token's best live cells; an index written without
    cells refuses nprobe."""
    import crossq.cells

    X, off = corpus16
    codec = get_codec("pq")(16, 4)
    codec.fit(X, off)
    codes = codec.encode(X, off)
    ids = [str(i) for i in range(len(off) - 1)]
    mf = write_index(tmp_path / "pq", codes, off, ids, codec)
    files = mf["files"]
    assert files["cells.centroids.npy"]["kind"] == files["cells.assign.npy"]["kind"] == "cells"
    cent = np.load(tmp_path / "pq" / "cells.centroids.npy")
    assign = np.load(tmp_path / "pq" / "cells.assign.npy")
    assert cent.dtype == np.float16 and assign.dtype == np.uint16 and len(assign) == len(X)
    assert mf["bytes"]["cells"] == cent.nbytes + assign.nbytes
    # the stored cell of each token is its best centroid (inner product) of the decoded vector
    sims = codec.decode(codes) @ cent.astype(np.float32).T
    np.testing.assert_array_equal(assign, sims.argmax(1))

    def no_refit(*a, **k):
        raise AssertionError("re-clustered at search time")

    monkeypatch.setattr(crossq.cells, "fit_cells", no_refit)
    idx = Index.open(tmp_path / "pq")
    Q = torch.from_numpy(X[30:34])
    few = idx.candidates(Q, nprobe=2)
    live = torch.zeros(len(cent), dtype=torch.bool)
    live[torch.from_numpy(np.unique(assign).astype(np.int64))] = True
    best = set((Q @ torch.from_numpy(cent.astype(np.float32)).T).masked_fill(~live, -np.inf)
               .topk(2, dim=1).indices.flatten().tolist())
    want = [d for d in range(idx.n_docs) if set(assign[off[d]:off[d + 1]].tolist()) & best]
    np.testing.assert_array_equal(few, want)
    assert 0 < len(few) < idx.n_docs
    np.testing.assert_array_equal(idx.search(Q, 5, nprobe=len(cent))[0], idx.search(Q, 5)[0])
    bad = _copy(tmp_path / "pq", tmp_path / "bad")
    a = np.load(bad / "cells.assign.npy")
    a[0] = (a[0] + 1) % len(cent)
    np.save(bad / "cells.assign.npy", a)
    with pytest.raises(UserError, match="corrupt"):
        Index.open(bad)
    write_index(tmp_path / "bare", codes, off, ids, codec, cells=False)
    bare = Index.open(tmp_path / "bare")
    assert "cells" not in " ".join(bare.manifest["files"])
    with pytest.raises(UserError, match="no persisted candidate cells"):
        bare.search(Q, 5, nprobe=2)


@pytest.mark.parametrize("codec_name, bpt", [("crossq", 2), ("pq", 4)])
@pytest.mark.parametrize("nprobe", [0, 1, 3])
def test_batched_search_equals_one_query_at_a_time(corpus16, tmp_path, codec_name, bpt, nprobe):
    """Issue 59: ``search_many`` (queries' tokens stacked, the union of their candidates scored,
    each query keeping its own) gives each query's ``search`` result, for lookup-table (CrossQ)
    and decoding (PQ, persisted k-means cells) codecs, exhaustive and with candidates."""
    X, off = corpus16
    codec = get_codec(codec_name)(16, bpt, **({"steps": 0} if codec_name == "crossq" else {}))
    codec.fit(X, off, seed=0)
    write_index(tmp_path / "i", codec.encode(X, off), off, [f"d{i}" for i in range(len(off) - 1)], codec)
    idx = Index.open(tmp_path / "i")
    rng = np.random.default_rng(1)
    Qs = [X[rng.integers(0, len(X), n)] + 0.1 * rng.standard_normal((n, 16)).astype(np.float32)
          for n in (3, 7, 1, 5, 4)]
    one = [idx.search(Q, 6, nprobe=nprobe, batch=97) for Q in Qs]
    for group in (1, 2, 5):
        many = [r for lo in range(0, len(Qs), group)
                for r in idx.search_many(Qs[lo:lo + group], 6, nprobe=nprobe, batch=97)]
        for (d1, s1), (d2, s2) in zip(one, many, strict=True):
            np.testing.assert_array_equal(d1, d2)
            np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-5)
    if nprobe:  # the union is wider than one query's candidates, yet none of it leaks in
        own = [set(idx.candidates(torch.from_numpy(Q), nprobe).tolist()) for Q in Qs]
        assert any(a != b for a in own for b in own)
        for (d, _), c in zip(many, own, strict=True):
            assert set(d.tolist()) <= c
    assert idx.search_many([], 5) == []
