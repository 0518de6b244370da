"""Tests that catch mutants of CORE-MTL's mechanism (tests/mutants.toml)."""

from __future__ import annotations

import torch
from core_mtl.config import TaskSpec, TrainConfig
from core_mtl.model import CoreMTL
from core_mtl.synthetic import make_split
from core_mtl.train import Batch, core_loss, counterfactual_loss

TASKS = (TaskSpec("seg", "segmentation", "label", 4), TaskSpec("depth", "depth", "depth"),
         TaskSpec("normal", "normal", "normal"))


def test_core_loss_adds_the_counterfactual_term():
    """With the counterfactual pass due (start 0, probability 1), CORE's loss is the loss without
    it plus exactly ``counterfactual_loss`` on the permutation the generator draws."""
    d = make_split(8, 16, seed=0)
    batch = Batch(torch.from_numpy(d["image"]), {"seg": torch.from_numpy(d["label"]),
                                                 "depth": torch.from_numpy(d["depth"]),
                                                 "normal": torch.from_numpy(d["normal"])})
    torch.manual_seed(0)
    m = CoreMTL(TASKS).eval()
    cfg = TrainConfig(stage0_frac=0.0, cfa_start_frac=0.0, cfa_prob=1.0)
    with torch.no_grad():
        out = m(batch.image, decode=True, physics=cfg.physics)
        on = core_loss(m, batch, out, cfg, 0, 10, torch.Generator().manual_seed(3))
        off = core_loss(m, batch, out, cfg.with_(cfa=False), 0, 10, torch.Generator().manual_seed(3))
        g = torch.Generator().manual_seed(3)
        torch.rand(1, generator=g)
        perm = torch.randperm(len(batch), generator=g)
        cf = counterfactual_loss(m, batch, out["z_s"], out["z_p"], perm, cfg)
    assert float(cf) > 0
    torch.testing.assert_close(on - off, cf, rtol=1e-4, atol=1e-6)
