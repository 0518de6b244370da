"""One task-weight vector for every arm (issue 49, item 3): CORE's 20:10:10 is applied to the task
losses of EW, the gradient and the loss methods before any aggregation, not to CORE alone."""

from __future__ import annotations

import pytest
import torch
from core_mtl.config import LossWeights, TaskSpec, TrainConfig
from core_mtl.train import train
from torch.optim.optimizer import register_optimizer_step_pre_hook

TASKS = (TaskSpec("seg", "segmentation", "label", 4), TaskSpec("depth", "depth", "depth"),
         TaskSpec("normal", "normal", "normal"))


def _first_seg_head_grad(cfg, batch, monkeypatch):
    """The segmentation head's gradient at the first optimiser step of the real trainer."""
    import core_mtl.train as tr

    built, grads = [], []
    real = tr.build_model
    monkeypatch.setattr(tr, "build_model", lambda *a, **k: built.append(real(*a, **k)) or built[-1])

    def hook(opt, args, kwargs):
        if not grads:
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in built[-1].heads["seg"].parameters()]))

    h = register_optimizer_step_pre_hook(hook)
    try:
        train(cfg.with_(epochs=1), TASKS, batch)
    finally:
        h.remove()
    return grads[0]


@pytest.mark.parametrize("method", ["ew", "core"])
def test_raising_the_seg_weight_scales_the_seg_head_gradient(batch, method, monkeypatch):
    # CORE: no edge term (it also reaches the seg head, unweighted), no counterfactual pass, no
    # stage 0 (heads frozen) and no clip (it would rescale): only the weighted task loss remains
    w = LossWeights(edge=0.0)
    cfg = TrainConfig(method=method, batch_size=8, stage0_frac=0.0, cfa=False, core_clip=None, weights=w)
    g20 = _first_seg_head_grad(cfg, batch, monkeypatch)
    g40 = _first_seg_head_grad(cfg.with_(weights=LossWeights(edge=0.0, seg=40.0)), batch, monkeypatch)
    assert g20.abs().max() > 0
    torch.testing.assert_close(g40, 2.0 * g20, rtol=1e-4, atol=1e-7)


def test_every_gradient_arm_sees_the_weights(batch, monkeypatch):
    """MGDA's update depends on the task weights (it would not if they were left out)."""
    cfg = TrainConfig(method="mgda", batch_size=8)
    a = _first_seg_head_grad(cfg, batch, monkeypatch)
    b = _first_seg_head_grad(cfg.with_(weights=LossWeights(seg=1.0, depth=1.0, normal=1.0)), batch, monkeypatch)
    assert not torch.allclose(a, b)
