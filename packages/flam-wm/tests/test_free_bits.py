"""0.9.1's per-slot KL floor (free bits): each slot's batch-mean KL is priced only above the floor, so
a slot whose latent carries less than the floor feels no pull toward the prior, and one above it is
priced exactly as without the floor."""

from __future__ import annotations

import pytest
import torch
from flam_wm.baselines import build
from flam_wm.config import ModelConfig
from flam_wm.core import WorldModel, gaussian_kl


def _pair(free_bits: float, beta: float = 0.03, name: str = "flam") -> tuple[WorldModel, WorldModel]:
    cfg = build(name, 4, width=16, latent_dim=12, beta=beta, k_offset=2)
    local = {"local_sigma": 1.0} if name == "flam" else {}
    torch.manual_seed(0)
    a = WorldModel(ModelConfig(**{**cfg.to_dict(), "free_bits": free_bits, **local}))
    b = WorldModel(ModelConfig(**{**cfg.to_dict(), "beta": 0.0, **local}))
    b.load_state_dict(a.state_dict())
    return a, b


def _loss_grads(m: WorldModel, z: torch.Tensor, eps: torch.Tensor):
    loss, info = m.loss(z, eps=eps)
    return loss, info, torch.autograd.grad(loss, [p for p in m.parameters() if p.requires_grad], allow_unused=True)


def test_a_slot_under_the_floor_feels_no_kl_and_one_above_is_priced_as_before():
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(4, 4, 64, 3 * 16, generator=gen) * 0.3
    eps = torch.randn(4, 3, 6, 2, generator=gen)
    floored, free = _pair(free_bits=50.0)  # far above every slot's KL at init
    lf, info, gf = _loss_grads(floored, z, eps)
    l0, _, g0 = _loss_grads(free, z, eps)
    assert info["kl"] > 0
    assert lf.item() == pytest.approx(l0.item() + 0.03 * 6 * 50.0, rel=1e-6)  # the floor is a constant
    for a, b in zip(gf, g0, strict=True):  # ... so the gradient is the unpriced one
        if a is not None:
            torch.testing.assert_close(a, b)
    # a floor below every slot's KL changes nothing: the loss of the plain beta-weighted sum
    plain = WorldModel(ModelConfig(**{**floored.cfg.to_dict(), "free_bits": 0.0}))
    plain.load_state_dict(floored.state_dict())
    low = WorldModel(ModelConfig(**{**floored.cfg.to_dict(), "free_bits": 1e-9}))
    low.load_state_dict(floored.state_dict())
    s = plain.slots(z)
    kl_k = gaussian_kl(*plain.idm(s[:, :-1], s[:, 1:])).flatten(0, -2).mean(0)
    assert (kl_k > 1e-9).all()
    assert low.loss(z, eps=eps)[0].item() == pytest.approx(plain.loss(z, eps=eps)[0].item(), rel=1e-6)


def test_free_bits_is_checked():
    with pytest.raises(ValueError, match="free_bits"):
        ModelConfig(free_bits=-1.0)


def test_lam_respects_the_floor_on_its_one_latent():
    """0.9.2: the monolithic baseline's single d-dim latent is one slot: a floor above its KL adds a
    constant and leaves the gradient that of beta = 0; without the floor its KL is priced."""
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(4, 4, 64, 3 * 16, generator=gen) * 0.3
    eps = torch.randn(4, 3, 1, 12, generator=gen)
    floored, free = _pair(free_bits=50.0, name="lam")
    assert floored.cfg.slots == 1 and floored.cfg.latent_dim == 12
    lf, info, gf = _loss_grads(floored, z, eps)
    l0, _, g0 = _loss_grads(free, z, eps)
    assert 0 < info["kl"] < 50.0
    assert lf.item() == pytest.approx(l0.item() + 0.03 * 50.0, rel=1e-6)
    for a, b in zip(gf, g0, strict=True):
        if a is not None:
            torch.testing.assert_close(a, b)
    plain = WorldModel(ModelConfig(**{**floored.cfg.to_dict(), "free_bits": 0.0}))
    plain.load_state_dict(floored.state_dict())
    lp, _, gp = _loss_grads(plain, z, eps)
    assert lp.item() == pytest.approx(l0.item() + 0.03 * info["kl"], rel=1e-5)
    assert any(a is not None and not torch.allclose(a, b) for a, b in zip(gp, g0, strict=True))
