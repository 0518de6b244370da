"""The crossq CLI end to end on a tiny BERT: index -> search -> eval, resume, and bad input."""

import json

import numpy as np
import pytest
from crossq.cli import main

from icml26_shared.io import MANIFEST

TINY = ["--dim", "16", "--quiet", "--fit-docs", "40"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from crossq.corpus import stdlib_pairs

    pairs = [(a, b, " ".join(c.split()[:20])) for a, b, c in stdlib_pairs()[:40]]  # < query_maxlen
    d = tmp_path_factory.mktemp("data")
    (d / "corpus.jsonl").write_text("".join(json.dumps({"id": f"doc{i}", "text": p[2]}) + "\n"
                                            for i, p in enumerate(pairs)))
    # a query equal to its document: MaxSim must rank that document first
    (d / "queries.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "text": p[2]}) + "\n"
                                             for i, p in enumerate(pairs[:10])))
    (d / "qrels.txt").write_text("".join(f"q{i} 0 doc{i} 1\n" for i in range(10)))
    return d


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("crossq: error: "), err
    return err[0]


def test_index_search_eval_round_trip(files, tiny_model, tmp_path, capsys):
    idx, run = tmp_path / "idx", tmp_path / "run.trec"
    assert main(["index", str(files / "corpus.jsonl"), "--out", str(idx), "--codec", "fp16",
                 "--bytes-per-token", "32", "--model", str(tiny_model), *TINY]) == 0
    assert main(["search", str(idx), str(files / "queries.jsonl"), "--k", "5", "--out", str(run),
                 "--quiet"]) == 0
    lines = run.read_text().splitlines()
    assert len(lines) == 50 and lines[0].split()[1] == "Q0"
    capsys.readouterr()
    assert main(["eval", str(run), str(files / "qrels.txt"), "--json", "--recall-k", "5"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["mrr@10"] >= 0.9 and metrics["queries"] == 10


def test_compressed_index_round_trip_and_info(files, tiny_model, tmp_path, capsys):
    idx = tmp_path / "pq"
    assert main(["index", str(files / "corpus.jsonl"), "--out", str(idx), "--codec", "pq",
                 "--bytes-per-token", "4", "--model", str(tiny_model), *TINY]) == 0
    assert main(["info", str(idx)]) == 0
    assert "4 B/token" in capsys.readouterr().out
    run = tmp_path / "run"
    assert main(["search", str(idx), str(files / "queries.jsonl"), "--out", str(run), "--quiet",
                 "--nprobe", "2"]) == 0
    assert len(run.read_text().splitlines()) == 100


def test_interrupted_indexing_resumes_to_the_same_index(files, tiny_model, tmp_path):
    from crossq.config import EncoderConfig
    from crossq.encoder import LateInteractionEncoder
    from crossq.indexer import build_index
    from crossq.io import read_corpus

    ids, texts = read_corpus(files / "corpus.jsonl")

    def build(out, **kw):
        enc = LateInteractionEncoder.load(EncoderConfig(model=str(tiny_model), dim=16))
        return build_index(ids, texts, out, enc, "crossq", 2, {"steps": 2}, chunk_docs=8,
                           fit_docs=40, **kw)

    ref = build(tmp_path / "ref")
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        build(out, _stop_after_chunks=2)
    assert not out.exists()
    partial = tmp_path / ".resumed.partial"
    assert len(list(partial.glob("chunk_*.npz"))) == 2
    again = build(out)
    assert not partial.exists()
    assert again["files"]["codes.npy"]["crc32"] == ref["files"]["codes.npy"]["crc32"]
    assert again["files"] == ref["files"]


def _write(path, text):
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("content,message", [
    ("", "is empty"),
    ('{"id": 1, "text": "a b c"}\n{"id": 1, "text": "d e f"}\n', "duplicate id '1'"),
    ('{"id": 1, "text": "a b c"}\n\n{"id": 2, "text": "x"\n', r"corpus.jsonl:3: malformed JSON"),
    ('{"id": 1, "body": "a b c"}\n', r'corpus.jsonl:1: expected an object with "id" and "text"'),
    ('{"id": 1, "text": "  "}\n', "text must be a non-empty string"),
])
def test_bad_corpus_is_one_clear_error(tmp_path, capsys, content, message):
    out = tmp_path / "idx"
    rc = main(["index", _write(tmp_path / "corpus.jsonl", content), "--out", str(out), "--quiet"])
    assert rc == 2
    assert message in _err(capsys)
    assert not out.exists() and not (tmp_path / ".idx.partial").exists()


def test_budget_the_codec_cannot_meet(files, tiny_model, tmp_path, capsys):
    out = tmp_path / "idx"
    rc = main(["index", str(files / "corpus.jsonl"), "--out", str(out), "--codec", "pq",
               "--bytes-per-token", "3", "--model", str(tiny_model), *TINY])
    assert rc == 2 and "cannot meet 3 bytes/token" in _err(capsys)
    assert not out.exists() and not (tmp_path / ".idx.partial").exists()


def test_qrels_queries_missing_from_the_run(tmp_path, capsys):
    run = _write(tmp_path / "run", "q1 Q0 doc1 1 2.0 x\nq1 Q0 doc2 2 1.0 x\n")
    qrels = _write(tmp_path / "qrels", "q1 0 doc1 1\nq9 0 doc3 1\n")
    assert main(["eval", run, qrels, "--json"]) == 0  # q9 scores 0, as trec_eval -c
    m = json.loads(capsys.readouterr().out)
    assert m["mrr@10"] == 0.5 and m["missing_queries"] == 1
    assert main(["eval", run, qrels, "--strict"]) == 2
    assert "not in the run" in _err(capsys)
    assert main(["eval", run, _write(tmp_path / "bad", "q1 doc1 1\n")]) == 2
    assert "bad:1" in _err(capsys)


@pytest.mark.parametrize("args,message", [
    (["search", "IDX", "Q", "--out", "R", "--k", "0"], "argument --k: must be a positive integer"),
    (["search", "IDX", "Q", "--out", "R", "--batch", "nan"], "argument --batch: must be a positive integer"),
    (["search", "IDX", "Q", "--out", "R", "--nprobe", "-1"], "argument --nprobe: must be an integer >= 0"),
    (["index", "C", "--out", "O", "--bytes-per-token", "0"], "argument --bytes-per-token: must be a positive integer"),
    (["index", "C", "--out", "O", "--codec", "binary"], "invalid choice"),
    (["eval", "R"], "required"),
])
def test_bad_options_are_one_line(capsys, args, message):
    assert main(args) == 2
    assert message in _err(capsys)


def test_error_during_indexing_leaves_nothing_behind(files, tiny_model, tmp_path, capsys):
    """The codec refuses to train on too few tokens after the work folder exists: no partial."""
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text('{"id": 1, "text": "a few words"}\n')
    out = tmp_path / "idx"
    rc = main(["index", str(tiny), "--out", str(out), "--codec", "pq", "--bytes-per-token", "4",
               "--model", str(tiny_model), *TINY])
    assert rc == 2 and "needs at least 256" in _err(capsys)
    assert not out.exists() and not (tmp_path / ".idx.partial").exists()


def test_info_json_splits_bytes(files, tiny_model, tmp_path, capsys):
    idx = tmp_path / "rq"
    assert main(["index", str(files / "corpus.jsonl"), "--out", str(idx), "--codec", "rq",
                 "--bytes-per-token", "2", "--model", str(tiny_model), *TINY]) == 0
    capsys.readouterr()
    assert main(["info", str(idx), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    per = rep["bytes_per_token"]
    assert set(per) == {"codes", "codebooks", "offsets", "ids", "cells", "other"} and per["codes"] == 2
    total = sum(f.stat().st_size for f in idx.iterdir()
                if not f.name.startswith("encoder.") and f.name != MANIFEST)
    assert sum(per.values()) * rep["n_tokens"] == pytest.approx(total)


def test_search_refuses_a_non_index_and_existing_output(files, tmp_path, capsys):
    assert main(["search", str(tmp_path), str(files / "queries.jsonl"), "--out",
                 str(tmp_path / "run")]) == 2
    assert "not a crossq index" in _err(capsys)
    assert not (tmp_path / "run").exists()
    existing = _write(tmp_path / "run2", "keep me")
    assert main(["search", str(tmp_path), str(files / "queries.jsonl"), "--out", existing]) == 2
    assert "exists" in _err(capsys)
    assert (tmp_path / "run2").read_text() == "keep me"


def test_train_then_index_with_the_codec_model(files, tiny_model, tmp_path, capsys):
    model = tmp_path / "codec"
    assert main(["train", str(files / "corpus.jsonl"), "--out", str(model), "--bytes-per-token",
                 "2", "--model", str(tiny_model), "--steps", "2", "--queries",
                 str(files / "queries.jsonl"), "--qrels", str(files / "qrels.txt"), *TINY]) == 0
    idx = tmp_path / "idx"
    assert main(["index", str(files / "corpus.jsonl"), "--out", str(idx), "--codec-model",
                 str(model), "--model", str(tiny_model), *TINY]) == 0
    mf = json.loads((idx / "manifest.json").read_text())
    assert mf["codec"]["codec"] == "crossq" and mf["codec"]["bytes_per_token"] == 2
    assert np.load(idx / "codec.books.npy").shape == (2, 256, 16)


def test_bench_reports_latency_and_memory(capsys, tmp_path):
    assert main(["bench", "--tokens", "3000", "1500", "--dim", "16", "--queries", "2",
                 "--query-len", "4", "--repeats", "1", "--batch", "512"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["tokens"] >= n for r, n in zip(rows, (1500, 3000), strict=True)] == [True, True]
    for r in rows:
        assert 0 < r["mean_candidates"] <= r["docs"]
        assert r["candidates_ms_p50"] > 0 and r["exhaustive_ms_p50"] > 0
    assert rows[1]["peak_rss_mb"] >= rows[0]["peak_rss_mb"] > 0
    assert main(["bench", "--index", str(tmp_path / "nothing")]) == 2
    assert "not a crossq index" in _err(capsys)


TRAINING_FLAGS = ["--steps", "7", "--lr", "0.002", "--queries-per-step", "3", "--candidates", "5"]
TRAINING_CFG = {"steps": 7, "lr": 0.002, "queries_per_step": 3, "candidates": 5}


def test_training_options_reach_the_crossq_config(files, tiny_model, tmp_path, monkeypatch, capsys):
    """`index` and `train` pass --steps/--lr/--queries-per-step/--candidates to CrossQConfig."""
    import crossq.indexer
    from crossq.codecs import CrossQCodec

    seen = {}

    class Stop(Exception):
        pass

    def fake_build(ids, texts, out, enc, codec, bpt, params, *a, **k):
        seen["index"] = CrossQCodec(16, bpt, **params).cfg
        raise Stop

    monkeypatch.setattr(crossq.indexer, "build_index", fake_build)
    with pytest.raises(Stop):
        main(["index", str(files / "corpus.jsonl"), "--out", str(tmp_path / "i"), "--model",
              str(tiny_model), *TINY, *TRAINING_FLAGS])

    def fake_fit(self, X, off, seed=0, training=None, progress=None):
        seen["train"], seen["train_candidates"] = self.cfg, training.candidates.shape[1]
        raise Stop

    monkeypatch.setattr(CrossQCodec, "fit", fake_fit)
    with pytest.raises(Stop):
        main(["train", str(files / "corpus.jsonl"), "--out", str(tmp_path / "c"), "--model",
              str(tiny_model), "--queries", str(files / "queries.jsonl"), "--qrels",
              str(files / "qrels.txt"), *TINY, *TRAINING_FLAGS])
    for where in ("index", "train"):
        assert {k: getattr(seen[where], k) for k in TRAINING_CFG} == TRAINING_CFG, where
    assert seen["train_candidates"] == 5  # the teacher's top-N really has --candidates columns


def test_training_options_refused_where_nothing_is_trained(files, tmp_path, capsys):
    for extra in (["--codec", "pq", "--lr", "0.01"],
                  ["--codec-model", str(tmp_path), "--candidates", "4"]):
        assert main(["index", str(files / "corpus.jsonl"), "--out", str(tmp_path / "i"),
                     *TINY, *extra]) == 2
        assert "training options" in _err(capsys)
    assert main(["index", str(files / "corpus.jsonl"), "--out", str(tmp_path / "i"), "--lr", "-1"]) == 2
    assert not (tmp_path / "i").exists()


def test_batched_cli_search_writes_the_same_run(files, tiny_model, tmp_path):
    """`crossq search --query-batch N` gives the run `--query-batch 1` gives (issue 59)."""
    idx = tmp_path / "idx"
    assert main(["index", str(files / "corpus.jsonl"), "--out", str(idx), "--codec", "crossq",
                 "--bytes-per-token", "2", "--steps", "2", "--model", str(tiny_model), *TINY]) == 0
    runs = []
    for qb, probe in (("1", "0"), ("4", "0"), ("1", "2"), ("10", "2")):
        out = tmp_path / f"run{qb}-{probe}"
        assert main(["search", str(idx), str(files / "queries.jsonl"), "--out", str(out), "--quiet",
                     "--query-batch", qb, "--nprobe", probe]) == 0
        runs.append([line.split() for line in out.read_text().splitlines()])
    assert len(runs[0]) == 100
    for a, b in ((runs[0], runs[1]), (runs[2], runs[3])):  # same ranking; scores to float rounding
        assert [r[:4] for r in a] == [r[:4] for r in b]
        np.testing.assert_allclose([float(r[4]) for r in a], [float(r[4]) for r in b], atol=1e-5)
