"""Mechanism checks named by tests/mutants.toml: each slot's own latent reaches its FDM (M1 of issue
57) and the causal temporal attention over a slot's history reaches the slots."""

from __future__ import annotations

import torch
from flam_wm.config import ModelConfig
from flam_wm.core import WorldModel, tokenize
from flam_wm.sprites import generate


def _model(**kw) -> WorldModel:
    torch.manual_seed(0)
    return WorldModel(ModelConfig(model="flam", slots=3, latent_dim=6, width=16, size=16, **kw))


def _tokens(seed: int = 2):
    return tokenize(torch.from_numpy(generate(2, 2, 4, size=16, seed=seed)[0]), 4)


def test_each_slots_own_latent_reaches_its_fdm():
    """With eps given, the latent that the loss hands slot k's FDM is mu_k + eps_k * sigma_k."""
    model, z = _model(), _tokens()
    seen = []
    fdm = model.fdm.forward
    model.fdm.forward = lambda s, a: (seen.append(a), fdm(s, a))[1]
    with torch.no_grad():
        s = model.slots(z)
        mu, logvar = model.idm(s[:, :-1], s[:, 1:])
        eps = torch.randn(mu.shape, generator=torch.Generator().manual_seed(0))
        model.loss(z, eps=eps, unroll=1)
    want = mu + eps * (0.5 * logvar).exp()
    assert seen and seen[0].shape == want.shape
    assert torch.allclose(seen[0], want, atol=1e-6)
    assert (want - want.mean(-2, keepdim=True)).abs().max() > 1e-3  # the slots' latents differ


def test_temporal_attention_reaches_the_slots_and_is_causal():
    """Zeroing the temporal attention's output projection changes the slots after frame 0; a change to
    the last frame leaves the earlier frames' slots as they were."""
    on, z = _model(temporal=True), _tokens()
    off = _model(temporal=True)
    off.load_state_dict(on.state_dict())
    with torch.no_grad():
        off.factorizer.time_attn.out_proj.weight.zero_()
        off.factorizer.time_attn.out_proj.bias.zero_()
        s_on, s_off = on.slots(z), off.slots(z)
        assert (s_on[:, 1:] - s_off[:, 1:]).abs().max() > 1e-3
        z2 = z.clone()
        z2[:, -1] = torch.rand_like(z2[:, -1])
        assert torch.allclose(on.slots(z2)[:, :-1], s_on[:, :-1], atol=1e-6)


def test_flam_one_latent_gives_every_fdm_one_latent_of_size_d_from_all_slots():
    """Issue 57, item 3: the factorisation's ablation keeps FLAM's slots, FDM and compositor but infers one
    latent of size d from every slot and hands that same latent to each slot's FDM."""
    from flam_wm import experiments as ex
    from flam_wm.baselines import build

    torch.manual_seed(0)
    cfg = build("flam-one-latent", 2, width=16, latent_dim=6, beta=0.01, size=16)
    model, z = WorldModel(cfg), _tokens()
    assert cfg.model == "flam" and cfg.one_latent and cfg.latent_slots == 1 and cfg.slot_latent == 6
    assert type(model.agg).__name__ == "SlotCompositor" and model.factorizer.k == cfg.slots == 3
    seen = []
    fdm = model.fdm.forward
    model.fdm.forward = lambda s, a: (seen.append((s.shape, a)), fdm(s, a))[1]
    with torch.no_grad():
        s = model.slots(z)
        mu, logvar = model.infer(s)
        assert mu.shape == (2, 3, 1, 6)
        s2 = s.clone()
        s2[:, :, 2] += 1.0                                   # one slot moves: the one latent changes
        assert (model.infer(s2)[0] - mu).abs().max() > 1e-3
        eps = torch.randn(mu.shape, generator=torch.Generator().manual_seed(0))
        model.loss(z, eps=eps, unroll=1)
    (shape, a), = seen
    assert torch.allclose(a, mu + eps * (0.5 * logvar).exp(), atol=1e-6) and shape[-2] == 3
    with torch.no_grad():  # the FDM gives its one latent to every slot: as if each slot had been handed it
        assert torch.allclose(fdm(s[:, :-1], a), fdm(s[:, :-1], a.expand(-1, -1, 3, -1)), atol=1e-6)
    q = ex.CFG["quick"]
    assert "flam-one-latent" in q["arms"]
    m = ex._model_cfg("flam-one-latent", 4, q["width"], q["flam_choice"], None, 4, q["local_sigma"])
    f = ex._model_cfg("flam", 4, q["width"], q["flam_choice"], None, 4, q["local_sigma"])
    assert m.free_bits == f.free_bits * f.slots and m.local_sigma == f.local_sigma and m.slots == f.slots


def test_delta_idm_is_invariant_to_translating_every_slot():
    """Issue 57 item 0: with ``idm_input="delta"`` the IDM reads each slot's features and position change,
    never its absolute position, so moving every slot by the same constant leaves the latents unchanged;
    with ``"absolute"`` (0.11's) they change -- the test can fail. The FDM still reads absolute positions."""
    z = _tokens()
    for kind, invariant in (("delta", True), ("absolute", False)):
        model = _model(idm_input=kind)
        with torch.no_grad():
            s = model.slots(z)
            shifted = s.clone()
            shifted[..., -2:] += torch.tensor([1.5, -2.0])
            mu, logvar = model.infer(s)
            mu2, logvar2 = model.infer(shifted)
            same = torch.allclose(mu, mu2, atol=1e-5) and torch.allclose(logvar, logvar2, atol=1e-5)
            assert same == invariant, kind
            # the position change does reach the latent
            moved = s.clone()
            moved[:, 1:, :, -2:] += 1.0
            assert (model.infer(moved)[0] - mu).abs().max() > 1e-4, kind
            if kind == "delta":  # the FDM places the sprite from the absolute position
                a = mu[:, 0]
                assert (model.fdm(shifted[:, 0], a) - model.fdm(s[:, 0], a)).abs().max() > 1e-4
