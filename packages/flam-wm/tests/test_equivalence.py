"""0.9 made a training step cheaper without changing its maths: Slot Attention's softmax over the
slots laid out along a middle axis (and the frames unbound instead of indexed), the BC policy's
parameter-free pooling done once per frame. These tests hold the new code to the 0.8.0 computation,
written out here as the reference, on a fixed batch: the loss and every gradient within fp tolerance."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from flam_wm.baselines import build
from flam_wm.bc import Policy, clone
from flam_wm.config import ModelConfig
from flam_wm.core import WorldModel


def _attend_080(self, keys, vals, slots, iters, pos=None):
    """0.8.0's Slot Attention update: attention laid out [B, N, K], softmax over its last axis."""
    b, k, d = slots.shape
    for _ in range(iters):
        q = self.q(self.norm_s(slots))
        attn = torch.softmax(torch.einsum("bnd,bkd->bnk", keys, q) * self.scale, dim=-1)
        w = (attn + 1e-8) / (attn + 1e-8).sum(1, keepdim=True)
        upd = torch.einsum("bnk,bnd->bkd", w, vals)
        slots = self.gru(upd.reshape(-1, d), slots.reshape(-1, d)).reshape(b, k, d)
        slots = slots + self.ff(slots)
    return slots, attn, pos


def _quick_cfg(**kw) -> ModelConfig:
    cfg = build("flam", 4, width=32, latent_dim=12, beta=0.01, k_offset=1, tokenizer="conv", token_grid=8,
                token_channels=8, token_hidden=16)
    return ModelConfig(**{**cfg.to_dict(), "unroll": 4, **kw})


@pytest.mark.parametrize("temporal", [True, False])
@pytest.mark.parametrize("unroll", [1, None])
def test_loss_and_gradients_equal_the_080_computation(temporal, unroll):
    torch.manual_seed(0)
    new = WorldModel(_quick_cfg(temporal=temporal))
    ref = WorldModel(_quick_cfg(temporal=temporal))
    ref.load_state_dict(new.state_dict())
    ref.factorizer._attend = types.MethodType(_attend_080, ref.factorizer)
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(8, 5, 64, 8, generator=gen)
    eps = torch.randn(8, 4, 5, 2, generator=gen)
    params = [[p for p in m.parameters() if p.requires_grad] for m in (new, ref)]
    (ln, info), (lr, _) = new.loss(z, eps=eps, unroll=unroll), ref.loss(z, eps=eps, unroll=unroll)
    gn = torch.autograd.grad(ln, params[0], allow_unused=True)  # no temporal attention: its weights unused
    gr = torch.autograd.grad(lr, params[1], allow_unused=True)
    assert ln.item() == pytest.approx(lr.item(), rel=1e-6) and info["recon"] > 0
    assert sum(a is not None for a in gn) >= len(gn) - 4
    for a, b in zip(gn, gr, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    s_new, attn_new = new.factorizer.encode(z)
    s_ref, attn_ref = ref.factorizer.encode(z)
    torch.testing.assert_close(s_new, s_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(attn_new, attn_ref, rtol=1e-5, atol=1e-6)


def test_pooling_once_clones_the_same_policy():
    """``clone`` pools every frame once; the reference pools each batch inside the policy (0.8.0)."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(300, 16, 16, 3), dtype=np.uint8)
    actions = rng.integers(0, 5, 300)
    got = clone(frames, actions, 16, steps=15, batch=32, seed=3, restarts=1, max_restarts=1)  # one start (0.9.3)
    torch.manual_seed(3)
    pol = Policy(16)
    opt = torch.optim.Adam(pol.parameters(), lr=1e-2)
    idx_rng = np.random.default_rng(3)
    x, y = torch.from_numpy(frames), torch.as_tensor(actions)
    for _ in range(15):
        idx = torch.as_tensor(idx_rng.integers(0, len(x), 32))
        loss = torch.nn.functional.cross_entropy(pol(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    for a, b in zip(got.state_dict().values(), pol.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(got.head[0].weight, Policy(16).head[0].weight)  # it trained


def test_local_attention_keeps_an_object_slot_near_its_position():
    """``local_sigma``: an object slot's attention falls off with the distance from its position,
    the background slot (0) has none; without it the attention ignores where a token is."""
    torch.manual_seed(0)
    fac = WorldModel(_quick_cfg(local_sigma=1.0)).factorizer
    keys = torch.zeros(1, 64, 32)  # every token alike: only the locality tells them apart
    vals, slots = torch.randn(1, 64, 32), torch.randn(1, 5, 32)
    pos = torch.tensor([[[0.0, 0.0], [-3.5, -3.5], [3.5, 3.5], [-3.5, 3.5], [3.5, -3.5]]])
    _, attn, new_pos = fac._attend(keys, vals, slots, 1, pos)
    near = (fac.xy - pos[0, 1]).pow(2).sum(-1).argmin()
    far = (fac.xy - pos[0, 2]).pow(2).sum(-1).argmin()
    assert attn[0, near, 1] > 0.4 and attn[0, far, 1] < 1e-3
    assert torch.linalg.norm(new_pos[0, 1] - pos[0, 1]) < 1.0  # the slot stays at its corner
    _, flat, none = fac._attend(keys, vals, slots, 1, None)
    assert none is None and torch.allclose(flat[0, near], flat[0, far])
    with pytest.raises(ValueError, match="local_sigma needs"):
        _quick_cfg(local_sigma=1.0, slot_pos=False)


def test_a_run_written_before_local_attention_resumes_as_the_same_config(tmp_path):
    import json

    from flam_wm.io import open_run

    config = {"model": _quick_cfg().to_dict(), "train": {"steps": 5, "seed": 0, "unroll_from": 0}}
    old = {**config, "model": {k: v for k, v in config["model"].items() if k != "local_sigma"}}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(old))
    assert open_run(tmp_path / "run", config) is True
    local = {**config, "model": {**config["model"], "local_sigma": 1.0}}
    with pytest.raises(Exception, match="another config"):
        open_run(tmp_path / "run", local)
