"""Issue 59 item 6: `crossq embed` + `index --embeddings`, TSV / parquet input, inputs read
before torch is imported."""

import json
import subprocess
import sys

import numpy as np
import pytest
from crossq.cli import main
from crossq.io import read_corpus

from icml26_shared import UserError

TINY = ["--dim", "16", "--quiet", "--fit-docs", "16", "--chunk-docs", "8"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """One corpus as JSONL, collection.tsv and parquet (ids and texts identical)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from crossq.corpus import stdlib_pairs

    texts = [" ".join(p[2].split()[:20]) for p in stdlib_pairs()[:24]]
    ids = [f"d{i}" for i in range(len(texts))]
    d = tmp_path_factory.mktemp("formats")
    (d / "c.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts)))
    (d / "collection.tsv").write_text("".join(f"{i}\t{t}\n" for i, t in zip(ids, texts)))
    pq.write_table(pa.table({"pid": ids, "body": texts}), d / "c.parquet")
    return d, ids, texts


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("crossq: error: "), err
    return err[0]


def test_jsonl_tsv_and_parquet_read_the_same(corpus, tmp_path):
    d, ids, texts = corpus
    assert read_corpus(d / "c.jsonl") == (ids, texts)
    assert read_corpus(d / "collection.tsv") == (ids, texts)
    assert read_corpus(d / "c.parquet", "pid", "body") == (ids, texts)
    with pytest.raises(UserError, match="no column"):
        read_corpus(d / "c.parquet")
    (tmp_path / "bad.tsv").write_text("1\tok\n2 no tab here\n")
    with pytest.raises(UserError, match=r"bad.tsv:2: no tab"):
        read_corpus(tmp_path / "bad.tsv")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="not a readable parquet"):
        read_corpus(tmp_path / "bad.parquet")


def test_the_three_formats_give_identical_indexes(corpus, tiny_model, tmp_path):
    d, _, _ = corpus
    codes = []
    for name, extra in (("c.jsonl", []), ("collection.tsv", []),
                        ("c.parquet", ["--id-field", "pid", "--text-field", "body"])):
        out = tmp_path / name.replace(".", "_")
        assert main(["index", str(d / name), "--out", str(out), "--codec", "pq", "--bytes-per-token",
                     "4", "--model", str(tiny_model), *TINY, *extra]) == 0
        codes.append(np.load(out / "codes.npy"))
    assert all(np.array_equal(codes[0], c) for c in codes[1:])


def test_embed_then_index_equals_a_direct_index(corpus, tiny_model, tmp_path, capsys):
    d, _, _ = corpus
    emb, a, b = tmp_path / "emb", tmp_path / "direct", tmp_path / "from-emb"
    common = ["--codec", "crossq", "--bytes-per-token", "2", "--steps", "3", *TINY]
    assert main(["embed", str(d / "collection.tsv"), "--out", str(emb), "--model", str(tiny_model),
                 *TINY]) == 0
    assert main(["index", str(d / "collection.tsv"), "--out", str(a), "--model", str(tiny_model),
                 *common]) == 0
    assert main(["index", str(d / "collection.tsv"), "--out", str(b), "--embeddings", str(emb),
                 *common]) == 0
    assert np.array_equal(np.load(a / "codes.npy"), np.load(b / "codes.npy"))
    # and it searches like the direct index (the real encoder is loaded from the index's info)
    capsys.readouterr()
    for idx in (a, b):
        assert main(["search", str(idx), str(d / "collection.tsv"), "--out", str(idx / "run"),
                     "--quiet", "--k", "3"]) == 0
    assert (a / "run").read_text() == (b / "run").read_text()


def test_mismatched_or_corrupt_embeddings_are_refused(corpus, tiny_model, tmp_path, capsys):
    d, ids, texts = corpus
    emb = tmp_path / "emb"
    assert main(["embed", str(d / "c.jsonl"), "--out", str(emb), "--model", str(tiny_model), *TINY]) == 0
    capsys.readouterr()
    idx = ["index", str(d / "c.jsonl"), "--codec", "pq", "--bytes-per-token", "4", "--quiet",
           "--embeddings", str(emb)]
    assert main([*idx, "--out", str(tmp_path / "x"), "--dim", "32"]) == 2
    assert "16-d token vectors, not --dim 32" in _err(capsys)
    assert main([*idx, "--out", str(tmp_path / "x"), "--model", "minilm"]) == 2
    assert "encoded with model" in _err(capsys)
    (tmp_path / "other.tsv").write_text("".join(f"{i}\t{t} extra\n" for i, t in zip(ids, texts)))
    assert main(["index", str(tmp_path / "other.tsv"), *idx[2:], "--out", str(tmp_path / "x")]) == 2
    assert "another corpus" in _err(capsys)
    X = np.load(emb / "tokens.npy")
    X[0, 0] += 1
    np.save(emb / "tokens.npy", X)
    assert main([*idx, "--out", str(tmp_path / "x")]) == 2
    assert "tokens.npy does not match its checksum" in _err(capsys)
    assert main([*idx[:-1], str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "not an embeddings folder" in _err(capsys)
    assert not (tmp_path / "x").exists()


def _codec_model(folder):
    with np.load(folder / "codec_model.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads((folder / "codec.json").read_text()), arrays


@pytest.mark.parametrize("with_queries", [False, True])
def test_train_from_embeddings_equals_a_direct_train(corpus, tiny_model, tmp_path, capsys, with_queries):
    """Issue 59: `crossq train --embeddings EMB` fits the codec `crossq train` fits from the
    texts (pseudo-queries, or given queries whose tokens the real encoder still encodes), and
    indexing with either codec model gives the same codes."""
    d, ids, texts = corpus
    emb = tmp_path / "emb"
    assert main(["embed", str(d / "collection.tsv"), "--out", str(emb), "--model", str(tiny_model),
                 *TINY]) == 0
    pairs = []
    if with_queries:
        (tmp_path / "queries.tsv").write_text("".join(f"q{i}\t{texts[i]}\n" for i in range(0, 24, 3)))
        (tmp_path / "qrels").write_text("".join(f"q{i} 0 {ids[i]} 1\n" for i in range(0, 24, 3)))
        pairs = ["--queries", str(tmp_path / "queries.tsv"), "--qrels", str(tmp_path / "qrels")]
    common = ["--bytes-per-token", "2", "--steps", "3", "--candidates", "4", *TINY, *pairs]
    a, b = tmp_path / "direct", tmp_path / "from-emb"
    assert main(["train", str(d / "collection.tsv"), "--out", str(a), "--model", str(tiny_model),
                 *common]) == 0
    assert main(["train", str(d / "collection.tsv"), "--out", str(b), "--embeddings", str(emb),
                 *common]) == 0
    (ja, xa), (jb, xb) = _codec_model(a), _codec_model(b)
    assert ja == jb and xa.keys() == xb.keys()
    for k in xa:
        np.testing.assert_array_equal(xa[k], xb[k], err_msg=k)
    for m in (a, b):
        assert main(["index", str(d / "collection.tsv"), "--out", str(m / "idx"), "--codec", "crossq",
                     "--codec-model", str(m), "--embeddings", str(emb), "--quiet"]) == 0
    assert np.array_equal(np.load(a / "idx" / "codes.npy"), np.load(b / "idx" / "codes.npy"))


def test_train_refuses_mismatched_embeddings(corpus, tiny_model, tmp_path, capsys):
    d, ids, texts = corpus
    emb = tmp_path / "emb"
    assert main(["embed", str(d / "c.jsonl"), "--out", str(emb), "--model", str(tiny_model), *TINY]) == 0
    capsys.readouterr()
    train = ["train", str(d / "c.jsonl"), "--quiet", "--embeddings", str(emb), "--out", str(tmp_path / "m")]
    assert main([*train, "--dim", "32"]) == 2
    assert "16-d token vectors, not --dim 32" in _err(capsys)
    assert main([*train, "--model", "minilm"]) == 2
    assert "encoded with model" in _err(capsys)
    (tmp_path / "other.tsv").write_text("".join(f"{i}\t{t} extra\n" for i, t in zip(ids, texts)))
    assert main(["train", str(tmp_path / "other.tsv"), *train[2:]]) == 2
    assert "another corpus" in _err(capsys)
    assert main([*train[:-3], str(tmp_path), *train[-2:]]) == 2
    assert "not an embeddings folder" in _err(capsys)
    assert not (tmp_path / "m").exists()


def test_bad_input_is_refused_before_torch_is_imported(tmp_path):
    (tmp_path / "bad.tsv").write_text("1\tok\n2 no tab\n")
    code = ("import sys\nfrom crossq.cli import main\n"
            f"rc1 = main(['index', {str(tmp_path / 'missing.tsv')!r}, '--out', {str(tmp_path / 'o')!r}])\n"
            f"rc2 = main(['index', {str(tmp_path / 'bad.tsv')!r}, '--out', {str(tmp_path / 'o')!r}])\n"
            "print(rc1, rc2, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["2", "2", "False"], (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 2 and "missing.tsv does not exist" in err[0] and "bad.tsv:2: no tab" in err[1]
