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
