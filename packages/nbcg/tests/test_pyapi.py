"""The shipped pyapi set: its hash, no label name in any text, its sizes; the docstring parser."""

import gzip
import hashlib
import json

import pytest
from nbcg import pyapi
from nbcg.cli import main


@pytest.fixture(scope="module")
def shipped():
    return pyapi.load_pyapi()


def test_hash_matches_and_meta_records_the_sources(shipped):
    recs, meta = shipped
    raw = gzip.decompress(pyapi.SHIPPED.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == meta["sha256"] == pyapi.records_hash(recs)
    assert set(meta["sources"]) == {"numpy", "scipy", "scikit-learn", "pandas"}
    notices = pyapi.NOTICES.read_text()
    for d in ("numpy", "scipy", "scikit-learn", "pandas"):
        assert f"===== {d} " in notices
    assert notices.count("Redistribution and use in source and binary forms") >= 4   # BSD texts


def test_no_label_name_in_any_text(shipped):
    recs, _ = shipped
    labels = {x.lower() for r in recs for x in r["labels"]}
    for r in recs:
        toks = {t.lower() for t in pyapi.TOKEN.findall(r["text"])}
        assert not toks & labels, (r["id"], toks & labels)
        assert "`" not in r["text"] and ">>>" not in r["text"]


def test_sizes_and_long_tail(shipped):
    recs, meta = shipped
    freq = meta["label_frequency"]
    assert 2000 <= len(recs) == meta["n_documents"] <= 3200
    assert 80 <= len(freq) == meta["n_labels"] <= 120
    assert max(freq, key=freq.get) == "dtype" and 400 <= freq["dtype"] <= 700
    assert 10 <= min(freq.values()) <= 25
    assert len({r["id"] for r in recs}) == len(recs)
    # the built-in dominant coalition: the ufunc parameters co-occur on hundreds of documents
    ufunc = {"out", "where", "casting", "order", "dtype", "subok", "signature"}
    assert sum(ufunc <= set(r["labels"]) for r in recs) > 200


def test_parser_on_a_numpydoc_docstring():
    doc = '''frob(x, /, out=None)

    Frobnicate the ``x`` array along an axis.

    Uses :func:`numpy.add` and np.mean(x) internally; see `bar`_. The result
    keeps its dtype. Example::

        frob(x) == 2

    Parameters
    ----------
    x, y : array_like
        Input.
    out : ndarray, optional
    **kwargs
        Ignored.

    Examples
    --------
    >>> frob(1)
    '''
    assert pyapi.docstring_parameters(doc) == ["x", "y", "out", "kwargs"]
    text = pyapi.summary_text(doc)
    assert text.startswith("Frobnicate the array along an axis.")
    assert "`" not in text and "numpy" not in text and "np.mean" not in text and "==" not in text
    assert "Input" not in text and ">>>" not in text          # sections and examples dropped
    stripped = pyapi.strip_words(text, {"axis", "dtype"})
    toks = pyapi.TOKEN.findall(text)
    assert pyapi.TOKEN.findall(stripped) == [t for t in toks if t.lower() not in {"axis", "dtype"}]
    assert "axis" in toks and "dtype" in toks


def test_build_pyapi_refuses_existing_out(tmp_path, capsys):
    out = tmp_path / "p.jsonl.gz"
    out.write_bytes(b"keep")
    assert main(["data", "build-pyapi", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists" in err[0]
    assert out.read_bytes() == b"keep" and sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl.gz"]


@pytest.mark.slow
def test_rebuild_matches_the_shipped_set_when_versions_match(shipped, tmp_path):
    from importlib.metadata import version

    _, meta = shipped
    if any(version(d) != v for d, v in meta["sources"].items()):
        pytest.skip("installed sources differ from the shipped build's")
    recs, meta2, _ = pyapi.build()
    assert meta2["sha256"] == meta["sha256"]
    assert json.loads(json.dumps(meta2["label_frequency"])) == meta["label_frequency"]
