"""The sweep's gradient matching targets the real labels (the mutant sweep-target-labels-permuted)."""

from __future__ import annotations

import torch
from dd_multiindex.config import DistillConfig, SearchConfig, SweepSpec
from dd_multiindex.distill import DISTILLERS, real_gradients
from dd_multiindex.sweep import run_cell

SPEC = SweepSpec(cells=((8, 1, 8, "12"),), seeds=1, tune_lr=False,
                 distill=DistillConfig(steps=5, lr=0.1, n_inits=1),
                 search=SearchConfig(m1_max=4, n_val=64, n_test=64, real_max_factor=1))


def test_the_sweep_matches_the_gradient_of_the_real_stage1_labels(monkeypatch):
    """G_real handed to the distiller is the gradient on (X₁, y₁) exactly as the cell drew them."""
    seen: list = []
    gm = DISTILLERS["gm"]

    def spy(lrn, X, y, m, cfg, seed, *, G_real=None, inits=None, **kw):
        seen.append((lrn, X, y, G_real, inits))
        return gm(lrn, X, y, m, cfg, seed, G_real=G_real, inits=inits, **kw)

    monkeypatch.setitem(DISTILLERS, "gm", spy)
    run_cell(SPEC, 8, 1, 8, "12", 0, 0.1)
    assert seen, "the stage-1 search never called the distiller"
    lrn, X, y, G_real, inits = seen[0]
    assert G_real is not None and inits is not None
    want = real_gradients(lrn, *inits, X, y)
    assert torch.allclose(G_real, want, rtol=1e-6, atol=1e-9)
