"""Issue 59 item 5: the bench export (what fast-plaid's script reads) and the merge of every
engine's JSON into one table (fast-plaid itself is not needed: its JSON is faked here)."""

import json

import numpy as np
import pytest
from crossq.enginebench import main, merge, read_export, write_export

from icml26_shared import UserError


@pytest.fixture(scope="module")
def export(tmp_path_factory, corpus16):
    X, off = corpus16
    docs = [X[off[i]:off[i + 1]] for i in range(len(off) - 1)]
    rng = np.random.default_rng(3)
    picks = rng.choice(len(docs), 8, replace=False)
    queries = [docs[j][:3] + 0.05 * rng.standard_normal((min(3, len(docs[j])), 16)).astype(np.float32)
               for j in picks]
    doc_ids = [f"d{i}" for i in range(len(docs))]
    qids = [f"q{i}" for i in range(len(queries))]
    qrels = {q: {doc_ids[j]: 1} for q, j in zip(qids, picks, strict=True)}
    out = tmp_path_factory.mktemp("bench") / "export"
    write_export(out, docs, doc_ids, queries, qids, qrels, {"corpus": "test"})
    return out, docs, queries, qrels


def test_export_round_trip_and_refusals(export, tmp_path, capsys):
    out, docs, queries, qrels = export
    data = read_export(out)
    assert data["meta"]["n_tokens"] == len(data["X"]) == sum(len(d) for d in docs)
    assert data["X"].dtype == np.float32 and np.load(out / "docs.npy").dtype == np.float16
    np.testing.assert_array_equal(data["X"], np.concatenate(docs).astype(np.float16).astype(np.float32))
    assert [len(q) for q in data["queries"]] == [len(q) for q in queries]
    assert data["qrels"] == qrels and len(data["doc_ids"]) == len(docs)
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in out.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    q = np.load(bad / "queries.npy")
    q[0, 0] += 1
    np.save(bad / "queries.npy", q)
    with pytest.raises(UserError, match="queries.npy does not match its checksum"):
        read_export(bad)
    assert main(["merge", str(tmp_path), str(tmp_path / "x.json")]) == 2
    assert "not a bench export" in capsys.readouterr().err


def _fake_fastplaid(export_id, qrels, path, perfect=True):
    run = {q: [[d if perfect else "d0", 1.0] for d in r] for q, r in qrels.items()}
    row = {"engine": "fast-plaid 1.7", "setting": "nbits 4", "build_s": 1.0, "bytes_per_token": 34.0,
           "single_ms_p50": 2.0, "single_ms_p90": 3.0, "batched_ms_p50": 1.0, "batched_ms_p90": 1.5,
           "single_cpu_ms_p50": 2.0, "single_cpu_ms_p90": 3.0, "batched_cpu_ms_p50": 1.0,
           "batched_cpu_ms_p90": 1.5,
           "batch": 4, "run": run}
    path.write_text(json.dumps({"format": "crossq-bench-result", "version": 1, "side": "fast-plaid",
                                "export_id": export_id, "threads": 1,
                                "machine": {"loadavg": [1, 1, 1], "loadavg_before": [1, 1, 1]},
                                "rows": [row]}))


def test_crossq_side_and_merge_with_a_fake_fastplaid(export, tmp_path, capsys):
    out, _, _, qrels = export
    res = tmp_path / "crossq.json"
    assert main(["run", str(out), "--out", str(res), "--budgets", "2", "--batch", "3",
                 "--faiss-m", "4", "--faiss-depth", "32", "--faiss-nprobe", "4"]) == 0
    rows = json.loads(res.read_text())["rows"]
    names = [(r["engine"], r["setting"]) for r in rows]
    assert len(rows) == 4 and any("candidates" in s for _, s in names) and names[-1][0].startswith("faiss")
    for r in rows:  # every engine answers every query with its top 10
        assert set(r["run"]) == set(qrels) and all(len(h) == 10 for h in r["run"].values())
        assert 0 < r["single_ms_p50"] <= r["single_ms_p90"] and r["single_cpu_ms_p50"] > 0
    export_id = read_export(out)["meta"]["id"]
    _fake_fastplaid(export_id, qrels, tmp_path / "fp.json")
    merged, table = merge(out, [res, tmp_path / "fp.json"])
    fp = merged[-1]
    assert fp["mrr@10"] == 1.0 and fp["engine"] == "fast-plaid 1.7"  # MRR from the run, here
    assert table.count("\n| ") == len(merged) and "| 1.00x | 1.000 |" in table  # ratio to itself
    ratio = float(table.splitlines()[2].split("|")[7].strip().rstrip("x"))
    assert rows[0]["single_cpu_ms_p50"] / 2.0 == pytest.approx(ratio, abs=0.01)
    _fake_fastplaid(export_id, qrels, tmp_path / "wrong.json", perfect=False)
    assert merge(out, [tmp_path / "wrong.json"])[0][0]["mrr@10"] < 1.0
    capsys.readouterr()
    assert main(["merge", str(out), str(tmp_path / "fp.json"), "--json", str(res)]) == 2
    assert "exists" in capsys.readouterr().err and json.loads(res.read_text())["rows"]  # kept
    _fake_fastplaid("another", qrels, tmp_path / "other.json")
    capsys.readouterr()
    assert main(["merge", str(out), str(tmp_path / "other.json")]) == 2
    assert "another export" in capsys.readouterr().err
