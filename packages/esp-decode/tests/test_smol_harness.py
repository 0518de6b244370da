"""The SmolLM2 harness (dev choice, timed side-by-side test, claims) on a tiny random Llama."""

import numpy as np
from esp_decode import smol
from esp_decode.experiments import _claims

from icml26_shared import Results


def test_harness_chooses_on_dev_times_every_drafter_and_checks_claims(tiny_llama):
    prompts = {"open": [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8]], "code": [[3, 4] * 6 + [5], [9, 9, 8, 7, 9, 9]]}
    esp_cfg, scores = smol.choose(tiny_llama, prompts["open"][:1], 6, None, smol.ESP_GRID[:2], "esp", "esp", 0)
    assert esp_cfg == smol.ESP_GRID[int(np.argmax(scores))] and len(scores) == 2
    res = Results(package="esp-decode", version="test", scale="quick", seed=0)
    parts = [smol.run_regime(tiny_llama, prompts[r], r, 8, None, 0, esp_cfg, smol.LADE_GRID[0], batch=2)
             for r in ("open", "code")]
    out = smol.collect(res, parts, esp_cfg, smol.LADE_GRID[0])
    assert out["lossless_all"] and out["regimes"] == ["open", "code"]
    assert all(len(out["arms"]["esp"][r]["mal"]) == 2 for r in out["regimes"])   # one row per prompt
    # one timing per batch (a regime's two prompts in one padded call per step)
    assert set(out["throughput"]) == {"ar", *smol.ARMS} and all(len(v) == 2 for v in out["throughput"].values())
    assert all(x > 0 for v in out["throughput"].values() for x in v)
    assert out["accepted"]["ar"]["mean_accepted_length"] == 1.0
    assert out["accepted"]["esp"]["items_per_call"] > 1 + esp_cfg.num_masks   # a tree and masks, not AR
    _claims(res, out, "smollm2")
    assert [c.claim_id for c in res.claims][-1] == "throughput"
    assert res.claims[-1].ours is not None and res.claims[-1].held is not None
