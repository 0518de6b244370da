"""0.3.3's fix: UniSparse's default composite tokens pool the queries of a block but not the
keys. Pooling keys averages a single high-logit key (the needle) with its block's other keys, so
a block of uniformly moderate keys outranks it; the true attention mass does not. The planted
case below loses the needle under the 0.1–0.3.2 default ``(block, block/4)`` and keeps it under
the new default; ``full``'s needle part goes through ``needle_study``."""

from __future__ import annotations

import math

import pytest
import torch
import unisparse
from unisparse import core

BS, T, D = 16, 256, 32
NEEDLE, DECOYS = 3, range(5, 13)


def _planted():
    g = torch.Generator().manual_seed(0)
    u = torch.zeros(D)
    u[0] = 1.0
    q = 0.05 * torch.randn(1, 1, T, D, generator=g)
    k = 0.05 * torch.randn(1, 1, T, D, generator=g)
    c = 4.0
    q[0, 0, -BS:] += c * u  # the last query block (the question) looks along u
    k[0, 0, NEEDLE * BS + 7] += (8.0 * math.sqrt(D) / c) * u  # one needle key: logit ~8
    for j in DECOYS:  # decoy blocks: every key at logit ~1
        k[0, 0, j * BS:(j + 1) * BS] += (1.0 * math.sqrt(D) / c) * u
    return q, k


def _kept(mask):
    return mask[0, 0, -1].nonzero().flatten().tolist()


def test_default_keeps_the_needle_key_pooling_loses_it():
    q, k = _planted()
    mass = core.block_attention_mass(q, k, BS)[0, 0, -1]
    assert int(mass[1:-1].argmax()) + 1 == NEEDLE  # the true attention: the needle dominates
    new = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25)
    old = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, granularities=(BS, BS // 4))
    one = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, granularities=(BS,))
    orc = unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, method="oracle")
    assert NEEDLE in _kept(new) and NEEDLE in _kept(orc)
    assert NEEDLE not in _kept(old) and NEEDLE not in _kept(one)  # the 0.3.2 default: lost
    assert new.sum() == old.sum()  # the same budget


def test_query_and_key_factors_are_separate():
    q, k = _planted()
    exact = core.normalize_rows(core.block_attention_mass(q, k, BS),
                                core.causal_block_valid(T, T, BS))
    s11 = core.unisparse_scores(q, k, BS, ((1, 1),))
    assert torch.allclose(s11, exact, atol=1e-5)  # (1, 1) is the exact block mass
    # pooling queries only: each key still scored on its own, so the scores differ from (b, b)
    sq = core.unisparse_scores(q, k, BS, ((BS, 1),))
    sb = core.unisparse_scores(q, k, BS, (BS,))
    assert sq[0, 0, -1, NEEDLE] > 0.5 > sb[0, 0, -1, NEEDLE]


@pytest.mark.parametrize("bad", [((16, 3),), ((16, 1, 1),), ((16.0, 1),)])
def test_bad_pairs_are_refused(bad):
    from icml26_shared import UserError

    q, k = _planted()
    with pytest.raises(UserError, match="granularity"):
        unisparse.estimate_block_mask(q, k, block_size=BS, density=0.25, granularities=bad)


def test_full_runs_the_needle_study(monkeypatch, tmp_path, tiny_dir):
    from unisparse import gpu_bench, needle

    monkeypatch.setenv("UNISPARSE_MODEL", str(tiny_dir))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    calls = {}

    def fake_study(spec, **kw):
        calls.update(kw, spec=spec)
        rows = [{"dense": {"correct": 1.0, "density": 1.0, "agree": 1.0},
                 "unisparse": {"correct": 1.0, "density": 0.3, "agree": 1.0}}] * 3
        return {"per_doc": rows, "summary": needle.summarize(rows)}

    monkeypatch.setattr(needle, "needle_study", fake_study)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    shapes = [{"shape": "s", "provider": p, "median": 1.0}
              for p in ("sdpa_flash", "block_sparse_kernel", "unisparse_estimate")]
    monkeypatch.setattr(gpu_bench, "run", lambda *a, **k: shapes)
    monkeypatch.setattr(gpu_bench, "write_csv", lambda rows, path: path)
    res = gpu_bench.full_recipe(tmp_path, 0)
    assert calls["spec"] == str(tiny_dir) and calls["device"] == "cuda" and calls["workers"] == 1
    assert calls["length"] == 4096 and calls["n_docs"] == 24
    assert {r.method for r in res.rows if r.experiment == "end_to_end"} == {"dense", "unisparse"}
