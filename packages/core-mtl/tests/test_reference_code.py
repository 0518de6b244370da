"""Nash-MTL and CORE's counterfactual pass as the reference code does them (issue 49, items 1-2):
the unnormalised bargaining system, the max-norm-1 clip and alpha-weighted heads [C: LibMTL];
the eval()-mode counterfactual forward, CORE's clip at 10 and the independence-weight ramp
[C: Hope-Rita/CORE-MTL engine/trainer.py]."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from core_mtl import baselines
from core_mtl.config import LossWeights, TaskSpec, TrainConfig
from core_mtl.model import CoreMTL
from core_mtl.train import (
    aggregated_backward,
    bn_protected,
    core_loss,
    independence_weight,
    train,
)
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

TASKS = (TaskSpec("seg", "segmentation", "label", 4), TaskSpec("depth", "depth", "depth"),
         TaskSpec("normal", "normal", "normal"))


def _G(scale=1.0):
    g = torch.Generator().manual_seed(2)
    return torch.randn(3, 40, dtype=torch.float64, generator=g) * torch.tensor([[1.0], [3.0], [0.2]],
                                                                             dtype=torch.float64) * scale


# ---------------------------------------------------------------- Nash-MTL


def test_nashmtl_alpha_solves_the_unnormalised_system():
    G = _G()
    a = baselines.NashMTL(3).weights(G)
    K = (G @ G.T).numpy()
    assert (a > 0).all()
    np.testing.assert_allclose(a * (K @ a), 1.0, atol=1e-6)  # alpha_i (K alpha)_i = 1, no rescale
    raw = torch.as_tensor(a) @ G
    assert raw.norm().item() == pytest.approx(np.sqrt(3), rel=1e-6)  # sqrt(T) before the clip


def test_nashmtl_update_is_clipped_at_one_and_scale_free():
    G = _G()
    d = baselines.aggregate("nashmtl", G)
    assert d.norm().item() <= 1.0 + 1e-9
    for c in (10.0, 0.1):
        torch.testing.assert_close(baselines.aggregate("nashmtl", G * c), d, rtol=1e-6, atol=1e-9)


def test_nashmtl_solver_failure_warns_and_keeps_the_previous_alpha(monkeypatch):
    agg = baselines.NashMTL(3)
    a0 = agg.weights(_G()).copy()

    class Bad:
        x = np.full(3, np.nan)

    monkeypatch.setattr(baselines, "minimize", lambda *a, **k: Bad())
    with pytest.warns(RuntimeWarning, match="keeping the previous alpha"):
        a1 = agg.weights(_G(5.0) + 1.0)
    np.testing.assert_array_equal(a1, a0)


class _Toy(nn.Module):
    """A shared trunk and two task heads, with the trainer's parameter interface."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Linear(5, 4).double()
        self.heads = nn.ModuleList([nn.Linear(4, 1).double() for _ in range(2)])

    def shared_parameters(self):
        return list(self.trunk.parameters())

    def losses(self, x, ys):
        h = torch.tanh(self.trunk(x))
        return [((head(h).squeeze(1) - y) ** 2).mean() * s for head, y, s in zip(self.heads, ys, (30.0, 1.0))]


def test_nashmtl_in_the_trainer_clips_shared_and_weights_heads_by_alpha():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 5, dtype=torch.float64, generator=g)
    ys = [torch.randn(16, dtype=torch.float64, generator=g) for _ in range(2)]
    m = _Toy()
    agg = baselines.make("nashmtl", 2)
    G = aggregated_backward(m, m.losses(x, ys), agg)
    a = torch.as_tensor(agg.alpha)
    shared = torch.cat([p.grad.reshape(-1) for p in m.shared_parameters()])
    raw = a @ G
    assert raw.norm().item() == pytest.approx(np.sqrt(2), rel=1e-5)
    assert shared.norm().item() <= 1.0 + 1e-6  # clipped at max-norm 1
    torch.testing.assert_close(shared, raw / raw.norm() * shared.norm(), rtol=1e-5, atol=1e-9)
    ref = _Toy()
    Ls = ref.losses(x, ys)
    for t, head in enumerate(ref.heads):
        want = torch.autograd.grad(a[t] * Ls[t], list(head.parameters()), retain_graph=True)
        for p, w in zip(m.heads[t].parameters(), want):
            torch.testing.assert_close(p.grad, w)  # heads get alpha_t grad L_t


# ---------------------------------------------------------------- the counterfactual pass


def test_counterfactual_forward_runs_in_eval_mode_and_restores_train_mode(batch):
    torch.manual_seed(0)
    m = CoreMTL(TASKS).train()
    m.heads.eval()  # a mixed state is restored module by module
    before_modes = {n: mod.training for n, mod in m.named_modules()}
    bns = [mod for mod in m.modules() if isinstance(mod, nn.BatchNorm2d)]
    seen = []
    hooks = [b.register_forward_pre_hook(lambda mod, inp: seen.append(mod.training)) for b in bns]
    buffers = [b.clone() for _, b in m.named_buffers()]
    x = batch.image
    with bn_protected(m):
        out = m(x)["tasks"]
        x2 = x.clone()
        x2[1:] = x[1:].flip(0) * 0.3  # change every other image of the batch
        out2 = m(x2)["tasks"]
    for h in hooks:
        h.remove()
    assert bns and seen and not any(seen)  # every BatchNorm in eval mode during the pass
    for k in out:  # image 0's counterfactual output does not depend on the rest of the batch
        torch.testing.assert_close(out[k][0], out2[k][0], rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(buffers, [b for _, b in m.named_buffers()]))
    assert {n: mod.training for n, mod in m.named_modules()} == before_modes
    assert out["seg"].requires_grad  # gradients still flow through the pass


def test_core_gradients_are_clipped_at_ten(batch):
    norms = []

    def hook(opt, args, kwargs):
        ps = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ps])).item())

    huge = LossWeights(seg=1e6, depth=1e6, normal=1e6)
    cfg = TrainConfig(epochs=1, batch_size=8, stage0_frac=0.0, cfa=False, weights=huge)
    h = register_optimizer_step_pre_hook(hook)
    try:
        train(cfg, TASKS, batch)
        clipped = list(norms)
        norms.clear()
        train(cfg.with_(core_clip=None), TASKS, batch)
    finally:
        h.remove()
    assert max(clipped) <= 10.0 + 1e-3
    assert max(norms) > 100.0  # the loss really is huge: the bound above is the clip's doing


def test_independence_weight_ramps_from_zero_after_stage0(batch):
    cfg = TrainConfig(stage0_frac=0.1, ind_warmup_frac=0.2, cfa=False)
    total = 100
    assert independence_weight(cfg, 0, total) == 0.0
    assert independence_weight(cfg, 10, total) == 0.0  # start of joint training
    assert independence_weight(cfg, 20, total) == pytest.approx(0.5 * cfg.weights.cka)
    assert independence_weight(cfg, 30, total) == cfg.weights.cka  # full after the ramp
    assert independence_weight(cfg, 99, total) == cfg.weights.cka
    # in CORE's real loss: at the first joint step the CKA term adds nothing, after the ramp it does
    torch.manual_seed(0)
    m = CoreMTL(TASKS).eval()
    with torch.no_grad():
        out = m(batch.image, decode=True, physics=cfg.physics)
        gen = torch.Generator()
        on0 = core_loss(m, batch, out, cfg, 10, total, gen)
        off0 = core_loss(m, batch, out, cfg.with_(cka=False), 10, total, gen)
        on1 = core_loss(m, batch, out, cfg, 40, total, gen)
        off1 = core_loss(m, batch, out, cfg.with_(cka=False), 40, total, gen)
    assert float(on0) == pytest.approx(float(off0), rel=1e-7)
    assert float(on1 - off1) > 1e-4
