"""The recall claim's reading (0.3.6): per layer, answer-rows recall, each faithful baseline,
paired intervals; it holds only when every (layer, baseline) interval clears 0."""

from __future__ import annotations

import pytest
import torch
from unisparse import core
from unisparse.experiments import recall_claim
from unisparse.fidelity import BASELINES


def _per_layer(ours_by_layer, theirs_by_layer, n=12):
    g = torch.Generator().manual_seed(0)
    out = {}
    for layer in ours_by_layer:
        noise = (torch.rand(n, generator=g) * 0.02).tolist()
        cell = {"answer_rows_recall": [ours_by_layer[layer] + e for e in noise],
                "answer_rows_density": [0.3] * n, "density": [0.3] * n}
        out[("unisparse", 0.3, layer)] = cell
        for m in BASELINES:
            out[(m, 0.3, layer)] = {"answer_rows_recall": [theirs_by_layer[layer] + 2 * e
                                                           for e in noise],
                                    "answer_rows_density": [0.25] * n, "density": [0.29] * n}
    return out


def test_recall_claim_reads_every_layer_and_baseline():
    rc = recall_claim(_per_layer({2: 0.9, 8: 0.6}, {2: 0.7, 8: 0.8}), 0.3)
    assert rc["pairs"] == 2 * len(BASELINES) and rc["layers"] == 2
    assert rc["ahead"] == len(BASELINES) and rc["behind"] == len(BASELINES)
    assert rc["layers_ahead"] == 1
    assert rc["weakest"]["layer"] == 8 and rc["weakest"]["high"] < 0  # the claim fails here
    assert rc["weakest"]["theirs_answer_density"] == 0.25  # densities travel beside
    rc = recall_claim(_per_layer({2: 0.9, 8: 0.9}, {2: 0.7, 8: 0.8}), 0.3)
    assert rc["established"] == rc["pairs"] and rc["weakest"]["low"] > 0


def test_row_density_of_the_answer_rows():
    valid = core.causal_block_valid(256, 256, 16)
    mask = valid.clone()
    mask[-2:] = False  # the last two rows keep only their first and diagonal blocks
    mask[-2:, 0] = mask[-2, 14] = mask[-1, 15] = True
    got = core.row_density(mask[None, None], 256, 256, 16, 2)
    assert float(got) == pytest.approx(4 / float(valid[-2:].sum()))
    assert float(core.row_density(valid[None, None], 256, 256, 16, 3)) == 1.0


@pytest.mark.parametrize("ours,held", [([1.0] * 20, True), ([1.0] * 19 + [0.0], False)])
def test_quick_needle_claim_from_the_study(monkeypatch, ours, held):
    """``quick``'s needle part: ``needle_study`` on the test documents with the dev-chosen
    settings; the claim is UniSparse >= 0.95 x dense per document, paired interval."""
    from unisparse import experiments, needle

    from icml26_shared import Results

    calls = {}

    def fake_study(spec, **kw):
        calls.update(kw, spec=spec)
        rows = [{"dense": {"correct": 1.0, "density": 1.0, "agree": 1.0},
                 **{m: {"correct": o if m == "unisparse" else 0.0, "density": 0.27, "agree": 0.9}
                    for m in kw["methods"]}} for o in ours]
        return {"per_doc": rows, "summary": needle.summarize(rows), "patterns": {0: ["ashape"]},
                "wall_s": 1.0}

    monkeypatch.setattr(needle, "needle_study", fake_study)
    q = experiments.SCALES["quick"]["needle"]
    res = Results(package="unisparse", version="0", scale="quick", seed=0)
    e2e = experiments._needle(res, q, 0)
    assert calls["spec"] == "smollm2" and calls["n_docs"] >= 20 and calls["length"] == 4096
    assert calls["density"] <= 0.3 and calls["haystack"] == q["haystack"]
    assert {"xattention", "flexprefill", "minference", "ashape", "oracle"} <= set(calls["methods"])
    rows = {r.method: r for r in res.rows if r.experiment == "needle"}
    assert rows["unisparse"].value == sum(ours) / 20 and rows["dense"].value == 1.0
    claim = experiments._claims_needle(e2e, q["length"], q["density"])
    assert claim.held is held and claim.ours == sum(ours) / 20
    assert claim.baseline == pytest.approx(0.95)
