"""The SmolLM2 harness (dev choice, timed side-by-side test, claims) on a tiny random Llama."""

import numpy as np
import pytest
from esp_decode import smol
from esp_decode.core import ratio_interval
from esp_decode.experiments import _claims, _ratios

from icml26_shared import Results


def test_harness_chooses_on_dev_times_every_drafter_and_checks_claims(tiny_llama):
    prompts = {"open": [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8]], "code": [[3, 4] * 6 + [5], [9, 9, 8, 7, 9, 9]]}
    esp_cfg, scores = smol.choose(tiny_llama, prompts["open"][:1], 6, None, smol.ESP_GRID[:2], "esp", "esp", 0)
    assert esp_cfg == smol.ESP_GRID[int(np.argmax(scores))] and len(scores) == 2
    res = Results(package="esp-decode", version="test", scale="quick", seed=0)
    parts = [smol.run_regime(tiny_llama, prompts[r], r, 8, None, 0, esp_cfg, smol.LADE_GRID[0], batch=2, anchors=True)
             for r in ("open", "code")]
    out = smol.collect(res, parts, esp_cfg, smol.LADE_GRID[0])
    assert out["lossless_all"] and out["regimes"] == ["open", "code"]
    assert all(len(out["arms"]["esp"][r]["mal"]) == 2 for r in out["regimes"])   # one row per prompt
    # one timing per batch (a regime's two prompts in one padded call per step)
    assert set(out["throughput"]) == {"ar", *smol.ARMS} and all(len(v) == 2 for v in out["throughput"].values())
    assert all(x > 0 for v in out["throughput"].values() for x in v)
    assert out["accepted"]["ar"]["mean_accepted_length"] == 1.0
    # the anchors: transformers' greedy and prompt lookup, lossless, and our 1-match pld makes their calls
    assert set(out["anchors"]) == set(smol.ANCHORS)
    assert all(x for a in smol.ANCHORS for r in out["regimes"] for x in out["anchors"][a][r]["lossless"])
    assert [c for r in out["regimes"] for c in out["anchors"]["hf-greedy"][r]["calls"]] == [8, 8, 8, 8]
    check = [c for c in res.claims if c.claim_id == "pld_1_match_calls"]
    assert check and check[0].status == "held"
    # pld at the hybrid's node budget: as many nodes as esp+pld may use
    name, kw = smol.arm_spec("pld@budget", esp_cfg, smol.LADE_GRID[0])
    assert name == "pld" and kw["pld"].max_nodes == esp_cfg.max_nodes
    assert kw["pld"].max_matches * kw["pld"].num_pred >= esp_cfg.max_nodes
    assert out["accepted"]["esp"]["items_per_call"] > 1 + esp_cfg.num_masks   # a tree and masks, not AR
    _claims(res, out, "smollm2")
    assert [c.claim_id for c in res.claims][-1] == "throughput"
    _ratios(res, out, "smollm2")   # ESP over every arm and anchor, esp+pld over pld@budget, paired
    ratios = {r.method for r in res.rows if r.experiment == "smollm2/ratios/all"}
    assert {"esp / esp-nullmask", "esp / hf-prompt-lookup", "esp / lade", "esp+pld / pld@budget"} <= ratios
    # two test prompts give no interval (icml26-shared 0.2): the verdict is withheld, not guessed
    assert res.claims[-1].ours is not None and res.claims[-1].status == "not evaluated"
    by_id = {c.claim_id: c for c in res.claims}
    for cid, base, regime in (("esp_vs_pld", "pld", "all"), ("esp_vs_lade", "lade", "all"),
                              ("esp_open_vs_pld", "pld", "open"), ("esp_open_vs_lade", "lade", "open")):
        c = by_id[cid]   # each baseline on its own: target = 1.1 x that baseline's mean on the same prompts
        want = 1.1 * np.mean([v for r in (out["regimes"] if regime == "all" else [regime])
                              for v in out["arms"][base][r]["mal"]])
        assert c.baseline == pytest.approx(want) and "ratio" in c.note, cid


def test_ratio_interval_is_paired_and_brackets_the_ratio():
    a, b = np.array([1.2, 1.3, 1.1, 1.5, 1.4]), np.array([1.0, 1.1, 1.0, 1.2, 1.3])
    r, lo, hi = ratio_interval(a, b)
    assert r == pytest.approx(a.mean() / b.mean()) and lo < r < hi
    # pairing matters: the same values unpaired (b shuffled) give a wider interval
    _, lo2, hi2 = ratio_interval(a, b[[4, 3, 2, 1, 0]])
    assert hi2 - lo2 > hi - lo
    assert ratio_interval([2.0], [1.0]) == (2.0, 2.0, 2.0)
