"""TREC run / qrels I/O and evaluation."""

import pytest
from crossq.io import evaluate, read_corpus, read_qrels, read_run, read_scored_run, write_run

from icml26_shared import UserError


def test_run_round_trip_and_perfect_ranking(tmp_path):
    run = {"q1": [("d1", 3.0), ("d2", 2.0)], "q2": [("d5", 1.5), ("d1", 0.5)]}
    path = write_run(tmp_path / "run", run)
    assert read_run(path) == {"q1": ["d1", "d2"], "q2": ["d5", "d1"]}
    (tmp_path / "qrels").write_text("q1 0 d1 1\nq2 0 d5 2\nq2 0 d9 0\n")
    m = evaluate(read_run(path), read_qrels(tmp_path / "qrels"), recall_k=(1,))
    assert m["mrr@10"] == 1.0 and m["ndcg@10"] == 1.0 and m["recall@1"] == 1.0


def test_second_place_scores():
    m = evaluate({"q": ["a", "b"]}, {"q": {"b": 1}}, recall_k=(1, 2))
    assert m["mrr@10"] == 0.5 and m["recall@1"] == 0.0 and m["recall@2"] == 1.0
    assert m["ndcg@10"] == pytest.approx(1 / 1.5849625, rel=1e-6)


def test_run_lines_sorted_by_score_not_file_order(tmp_path):
    (tmp_path / "r").write_text("q Q0 a 1 0.1 t\nq Q0 b 2 0.9 t\n")
    assert read_run(tmp_path / "r") == {"q": ["b", "a"]}


def test_ties_and_missing_queries_follow_trec_eval(tmp_path):
    """Hand-computed trec_eval values. Ties on score are ordered by document id in decreasing
    string order (trec_eval's ``strcmp(b, a)``), whatever the rank column says: q1 ranks
    d2, d1, d3 -> RR 1/2, nDCG@10 = (1/log2(3)) / 1; q2 ranks d9 (rel 0), d5 (rel 2), d4 (rel 1)
    -> RR 1/2, nDCG@10 = (2/log2(3) + 1/log2(4)) / (2 + 1/log2(3)); q3 is judged but absent from
    the run -> 0 everywhere (trec_eval -c), counted in the means."""
    import math

    (tmp_path / "r").write_text("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 1.0 t\nq1 Q0 d3 3 0.5 t\n"
                                "q2 Q0 d4 1 0.2 t\nq2 Q0 d5 2 0.7 t\nq2 Q0 d9 3 0.7 t\n")
    (tmp_path / "qrels").write_text("q1 0 d1 1\nq2 0 d5 2\nq2 0 d4 1\nq2 0 d9 0\nq3 0 d1 1\n")
    run = read_run(tmp_path / "r")
    assert run == {"q1": ["d2", "d1", "d3"], "q2": ["d9", "d5", "d4"]}
    l2 = math.log2
    ndcg1 = 1 / l2(3)
    ndcg2 = (2 / l2(3) + 1 / l2(4)) / (2 + 1 / l2(3))
    # the scored run: ir-measures (pytrec_eval, i.e. trec_eval) breaks the ties itself
    for given in (read_scored_run(tmp_path / "r"), run):
        m = evaluate(given, read_qrels(tmp_path / "qrels"), recall_k=(1, 3))
        assert m["mrr@10"] == pytest.approx((0.5 + 0.5 + 0) / 3)
        assert m["ndcg@10"] == pytest.approx((ndcg1 + ndcg2 + 0) / 3)
        assert m["recall@1"] == 0.0 and m["recall@3"] == pytest.approx((1 + 1 + 0) / 3)
        assert m["queries"] == 3 and m["missing_queries"] == 1
    with pytest.raises(UserError, match="not in the run"):
        evaluate(run, read_qrels(tmp_path / "qrels"), strict=True)


def test_reciprocal_rank_is_cut_at_k():
    """trec_eval's recip_rank has no cutoff: RR@10 must still be 0 for a first hit at rank 11,
    and a tie straddling the cutoff is resolved as trec_eval orders it."""
    scores = {f"d{i:02d}": 100.0 - i for i in range(1, 12)}  # d11 is 11th
    m = evaluate({"q": scores}, {"q": {"d11": 1}}, recall_k=(11,))
    assert m["mrr@10"] == 0.0 and m["recall@11"] == 1.0 and m["ndcg@10"] == 0.0
    tie = {**scores, "d10": 0.0, "d11": 0.0}  # tied 10th/11th: d11 > d10 in strcmp, so d11 is 10th
    assert evaluate({"q": tie}, {"q": {"d11": 1}})["mrr@10"] == pytest.approx(0.1)
    assert evaluate({"q": tie}, {"q": {"d10": 1}})["mrr@10"] == 0.0


def test_bad_run_line_names_the_line(tmp_path):
    (tmp_path / "r").write_text("q Q0 a 1 0.1 t\nq Q0 b two 0.9 t\n")
    with pytest.raises(UserError, match=r"r:2: rank must be an integer"):
        read_run(tmp_path / "r")


def test_corpus_must_be_jsonl_or_dataset_folder(tmp_path):
    (tmp_path / "c.csv").write_text("id,text\n1,a\n")
    with pytest.raises(UserError, match="expected .jsonl"):
        read_corpus(tmp_path / "c.csv")
    with pytest.raises(UserError, match="does not exist"):
        read_corpus(tmp_path / "missing.jsonl")


def test_local_datasets_folder_as_corpus(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"id": [1, 2], "text": ["alpha beta", "gamma delta"]}).save_to_disk(
        str(tmp_path / "ds"))
    assert read_corpus(tmp_path / "ds") == (["1", "2"], ["alpha beta", "gamma delta"])
    datasets.Dataset.from_dict({"id": [1, 1], "text": ["a", "b"]}).save_to_disk(str(tmp_path / "dup"))
    with pytest.raises(UserError, match="duplicate id"):
        read_corpus(tmp_path / "dup")


def test_stdlib_task_is_identical_across_hash_seeds():
    """The corpus must not depend on PYTHONHASHSEED (set reprs in signatures once did)."""
    import subprocess
    import sys

    code = ("import hashlib, json; from crossq.corpus import build_task; t = build_task(300, 50); "
            "print(hashlib.sha256(json.dumps([t.doc_texts, t.query_texts, t.qrels]).encode()).hexdigest())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")}
    assert len(outs) == 1
