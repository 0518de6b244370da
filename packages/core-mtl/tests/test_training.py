"""The mechanism: counterfactual swaps, original labels, stage 0, BN protection, the CKA penalty,
and per-task all-reduce before aggregation (one global batch)."""

from __future__ import annotations

import pytest
import torch
from core_mtl import baselines
from core_mtl.config import TaskSpec, TrainConfig
from core_mtl.losses import weighted_task_sum
from core_mtl.model import CoreMTL
from core_mtl.train import bn_protected, counterfactual_loss, task_gradients, train

TASKS = (TaskSpec("seg", "segmentation", "label", 4), TaskSpec("depth", "depth", "depth"),
         TaskSpec("normal", "normal", "normal"))


def test_identity_swap_leaves_the_decoded_image_unchanged(batch):
    torch.manual_seed(0)
    m = CoreMTL(TASKS).eval()
    out = m(batch.image, decode=True)
    ident = m.counterfactual(out["z_s"], out["z_p"], torch.arange(len(batch)), (16, 16))
    assert torch.equal(ident, out["app_recon"])
    swapped = m.counterfactual(out["z_s"], out["z_p"], torch.arange(len(batch)).flip(0), (16, 16))
    assert (swapped - out["app_recon"]).abs().max() > 1e-4  # z_p really changes the decoding


def test_counterfactual_loss_uses_the_original_labels(batch, monkeypatch):
    import core_mtl.train as tr
    from core_mtl.losses import pooled_cka

    torch.manual_seed(0)
    m = CoreMTL(TASKS).eval()
    cfg = TrainConfig()
    out = m(batch.image)
    perm = torch.arange(len(batch)).roll(1)
    seen = []
    real = tr.task_losses
    monkeypatch.setattr(tr, "task_losses", lambda t, o, y: seen.append(y) or real(t, o, y))
    got = counterfactual_loss(m, batch, out["z_s"], out["z_p"], perm, cfg)
    assert len(seen) == 1 and all(torch.equal(seen[0][k], batch.targets[k]) for k in batch.targets)
    i_cf = m.counterfactual(out["z_s"], out["z_p"], perm, (16, 16))
    o = m(i_cf)
    orig = weighted_task_sum(m.tasks, real(m.tasks, o["tasks"], batch.targets), cfg.weights)
    orig = orig + cfg.weights.cfa_cka * pooled_cka(o["z_s"], o["z_p"])
    assert torch.allclose(got, cfg.weights.cfa * orig, rtol=1e-6)
    assert not torch.equal(i_cf, out.get("app_recon", m(batch.image, decode=True)["app_recon"]))


def test_counterfactual_pass_keeps_bn_statistics(batch):
    m = CoreMTL(TASKS).train()
    before = [b.clone() for n, b in m.named_buffers()]
    with bn_protected(m):
        m(batch.image * 0.5)
    assert all(torch.equal(a, b) for a, b in zip(before, [b for _, b in m.named_buffers()]))
    m(batch.image)  # an ordinary pass does move them (so the check above is not vacuous)
    assert not all(torch.equal(a, b) for a, b in zip(before, [b for _, b in m.named_buffers()]))


def _heads_after(cfg, batch):
    torch.manual_seed(0)
    ref = {k: v.clone() for k, v in CoreMTL(TASKS, cfg.model).heads.state_dict().items()}
    r = train(cfg, TASKS, batch)
    now = r.model.heads.state_dict()
    return max((now[k] - ref[k]).abs().max().item() for k in ref)


def test_stage0_freezes_the_heads(batch):
    base = TrainConfig(epochs=1, batch_size=8, cfa_start_frac=1.0)
    assert _heads_after(base.with_(stage0_frac=1.0), batch) == 0.0
    assert _heads_after(base.with_(stage0_frac=0.0), batch) > 0.0


def test_cka_penalty_lowers_cka(batch):
    from core_mtl.core import linear_cka

    # full lambda_ind from the first step (no ramp): this is about the penalty, not its schedule
    cfg = TrainConfig(epochs=3, batch_size=8, stage0_frac=0.0, ind_warmup_frac=0.0, cfa=False, lr=1e-2)
    cka = {}
    for on in (True, False):
        m = train(cfg.with_(cka=on), TASKS, batch).model
        with torch.no_grad():
            out = m(batch.image)
        cka[on] = linear_cka(out["z_s"].mean((2, 3)).numpy(), out["z_p"].numpy())
    assert cka[True] < cka[False]


def _shard_grads(x, ys, w, shards):
    """Per-task gradients of mean-squared losses, averaged over equal shards (the all-reduce)."""
    Gs = []
    for idx in shards:
        losses = [((x[idx] @ w - y[idx]) ** 2).mean() for y in ys]
        Gs.append(task_gradients(losses, [w]))
    return torch.stack(Gs).mean(0)


@pytest.mark.parametrize("method", ["ew", "pcgrad", "mgda"])
def test_reducing_task_gradients_first_equals_one_global_batch(method):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    ys = [torch.randn(8, generator=gen, dtype=torch.float64) for _ in range(2)]
    w = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    G_global = _shard_grads(x, ys, w, [torch.arange(8)])
    G_two = _shard_grads(x, ys, w, [torch.arange(0, 8, 2), torch.arange(1, 8, 2)])
    assert torch.allclose(G_two, G_global)
    torch.manual_seed(1)
    d_global = baselines.aggregate(method, G_global)
    torch.manual_seed(1)
    assert torch.allclose(baselines.aggregate(method, G_two), d_global)
    if method != "ew":  # aggregating each shard, then averaging, is NOT the global-batch step
        local = [_shard_grads(x, ys, w, [idx]) for idx in (torch.arange(0, 8, 2), torch.arange(1, 8, 2))]
        torch.manual_seed(1)
        d_local = torch.stack([baselines.aggregate(method, g) for g in local]).mean(0)
        assert not torch.allclose(d_local, d_global, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ew", "pcgrad", "mgda"])
def test_two_processes_equal_one(method):
    from core_mtl.disttest import run_check

    multi, single = run_check(method)
    assert torch.allclose(multi, single)
