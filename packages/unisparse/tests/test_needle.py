"""The end-to-end needle study: per-layer configs reach the layers, baselines are matched to
UniSparse's measured density per layer, MInference gets each layer's own patterns, the statistics
(Wilson interval, paired interval against dense) and the CLI's refusals."""

from __future__ import annotations

import pytest
import torch
import unisparse
from unisparse.cli import main
from unisparse.config import SparseConfig
from unisparse.io import patch_state
from unisparse.needle import run_documents, summarize, wilson

transformers = pytest.importorskip("transformers")


def _docs(n=1, length=192):
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(3, 96, (length,), generator=g).tolist(), "00000", (40, 48))
            for _ in range(n)]


def test_layer_cfgs_override_the_shared_config(tiny):
    ids = torch.tensor(_docs()[0][0])[None]
    dense_layer = {0: SparseConfig(method="unisparse", block_size=16, density=1.0)}
    unisparse.patch(tiny, method="unisparse", density=0.2, block_size=16, layer_cfgs=dense_layer,
                    min_seq_len=32)
    try:
        with torch.no_grad():
            tiny(ids)
        dens = patch_state(tiny).layer_densities
    finally:
        unisparse.unpatch(tiny)
    assert dens[0] == 1.0 and dens[1] < 0.5, dens


def test_baselines_are_matched_to_unisparse_per_layer(tiny, monkeypatch):
    from unisparse import baselines

    seen = []
    inner = baselines.SELECTORS["minference"]
    monkeypatch.setitem(baselines.SELECTORS, "minference",
                        lambda q, k, cfg, *a: seen.append(cfg.patterns) or inner(q, k, cfg, *a))
    methods = ("unisparse", "xattention", "flexprefill", "minference", "ashape")
    pats = {0: ("ashape",) * 4, 1: ("vertical_slash",) * 4}
    rows = run_documents(tiny, None, _docs(), methods, block=16, density=0.25, new_tokens=1,
                         patterns=pats)
    r = rows[0]
    ref = r["unisparse"]["layer_density"]
    assert set(ref) == {0, 1} and r["dense"]["agree"] == 1.0
    for m in ("xattention", "flexprefill"):
        for layer, d in r[m]["layer_density"].items():
            assert d <= ref[layer] + 1e-6, (m, layer, d, ref[layer])
    assert seen == [pats[0], pats[1]], "each layer must run its own dev-searched patterns"
    assert all(0 < r[m]["agree"] < 1 for m in methods), "sparse arms must change some logits"


def test_two_workers_equal_one_process():
    """0.3.8: spawned workers load the model while the parent searches MInference's patterns
    and receive them on a queue; every document's result equals the one-process run."""
    from unisparse.needle import needle_study

    kw = dict(length=192, n_docs=2, density=0.25, block=16, new_tokens=1,
              methods=("unisparse", "xattention", "minference"))
    one, two = needle_study("tiny", workers=1, **kw), needle_study("tiny", workers=2, **kw)
    assert one["patterns"] == two["patterns"] and set(one["patterns"]) == {0, 1}
    assert one["per_doc"] == two["per_doc"]
    assert two["per_doc"][0]["minference"]["density"] < 1


def test_matched_baseline_without_unisparse_is_refused(tiny):
    with pytest.raises(ValueError, match="matched budgets"):
        run_documents(tiny, None, _docs(), ("xattention",), block=16, density=0.25, new_tokens=1)


def test_summary_statistics():
    rows = [{"dense": {"correct": 1.0, "density": 1.0, "agree": 1.0},
             "unisparse": {"correct": float(i % 2), "density": 0.3, "agree": 0.9}}
            for i in range(20)]
    s = summarize(rows)
    assert s["dense"]["accuracy"] == 1.0 and s["unisparse"]["accuracy"] == 0.5
    assert s["unisparse"]["ratio_to_dense"] == 0.5
    mean, low, high = s["unisparse"]["minus_dense"]
    assert mean == -0.5 and low < -0.5 < high < 0
    lo, hi = wilson(10, 20)
    assert lo == pytest.approx(0.2993, abs=1e-3) and hi == pytest.approx(0.7007, abs=1e-3)


@pytest.mark.parametrize("argv,msg", [
    (["needle", "--methods", "random"], "unknown method 'random'"),
    (["needle", "--methods", "xattention"], "include 'unisparse'"),
    (["needle", "--density", "1"], "--density must lie in (0, 1)"),
    (["needle", "--length", "64"], "at least 4 blocks"),
    (["needle", "--workers", "0"], "--workers must lie in [1, 16]"),
    (["needle", "--model", "/nonexistent/model"], "/nonexistent/model does not exist"),
    (["needle", "--docs", "0"], "--docs must lie in [1, 10000]"),
    (["needle", "--haystack", "lorem"], "invalid choice: 'lorem'"),
    (["sensitivity", "--density", "nan"], "--density must lie in (0, 1)"),
    (["sensitivity", "--length", "100"], "at least 4 blocks (128)"),
    (["sensitivity", "--method", "dense"], "unknown method 'dense'"),
    (["sensitivity", "--docs", "1001"], "--docs must lie in [1, 1000]"),
    (["tau-sweep", "--targets", "0.9", "1"], "--targets must lie in (0, 1)"),
    (["tau-sweep", "--methods", "nope"], "unknown method 'nope'"),
    (["tau-sweep", "--length", "200"], "at least 4 blocks (256)"),
    (["tau-sweep", "--block-size", "48"], "--block-size must be a power of two"),
])
def test_study_user_errors(argv, msg, capsys, tmp_path):
    out = tmp_path / "o.json"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("unisparse: error: ") and msg in err[0]
    assert not out.exists()


@pytest.mark.parametrize("cmd", ["needle", "sensitivity", "tau-sweep"])
def test_study_out_is_not_overwritten(cmd, capsys, tmp_path):
    out = tmp_path / "o.json"
    out.write_text("keep")
    assert main([cmd, "--model", "tiny", "--out", str(out)]) == 2
    assert out.read_text() == "keep" and "exists" in capsys.readouterr().err


def test_one_layer_at_a_time_sparsifies_only_that_layer(tiny):
    from unisparse.needle import answer_logprob, layer_sensitivity

    docs = _docs(2)
    res = layer_sensitivity(tiny, None, docs, block=16, density=0.25)
    assert res["dense"][0] == pytest.approx(answer_logprob(tiny, docs[0][0], [5, 6, 7]))
    for layer in (0, 1):
        assert all(d < 0.5 for d in res["density"][layer])
        assert all(abs(x) > 1e-4 for x in res["delta"][layer]), "a sparse layer changes p(key)"
    # the other layers ran dense (the model's SDPA path): one sparse layer differs from two
    unisparse.patch(tiny, method="unisparse", density=0.25, block_size=16, min_seq_len=32)
    try:
        both = answer_logprob(tiny, docs[0][0], [5, 6, 7]) - res["dense"][0]
    finally:
        unisparse.unpatch(tiny)
    assert all(abs(both - res["delta"][i][0]) > 1e-5 for i in (0, 1))
