"""The token-level monolithic LAM (issue 57, item 4): one latent per transition, but the state that carries
z_t to z_hat_{t+1} stays per token ([..., N, D]; no vector narrower than N x D), unlike `lam`'s pooled vector."""

from __future__ import annotations

import torch
from flam_wm.baselines import build
from flam_wm.core import WorldModel, n_params, tokenize
from flam_wm.sprites import generate


def _shapes(model: WorldModel, z: torch.Tensor) -> list[tuple]:
    """The shapes of the states on the prediction path: the encoder's output, the FDM's input and output."""
    seen = []
    hooks = [model.factorizer.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape))),
             model.fdm.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)) or seen.append(
                 tuple(o.shape)))]
    with torch.no_grad():
        model.loss(z, torch.Generator().manual_seed(0))
    for h in hooks:
        h.remove()
    return seen


def test_lam_token_keeps_a_per_token_state_and_lam_does_not():
    z = tokenize(torch.from_numpy(generate(2, 2, 4, size=16, seed=1)[0]), 4)   # [2, 4, 16 tokens, 48]
    n = z.shape[2]
    torch.manual_seed(0)
    tok = WorldModel(build("lam-token", 2, width=16, latent_dim=6, size=16))
    d = tok.cfg.width
    assert all(s[-2:] == (n, d) for s in _shapes(tok, z))                      # every state N x D
    mu, _ = tok.infer(tok.slots(z))
    assert mu.shape == (2, 3, 1, 6)                                            # one latent of size d
    with torch.no_grad():  # the latent reaches every token's prediction
        s = tok.slots(z)[:, :1]
        a = torch.zeros(2, 1, 1, 6)
        moved = tok.agg(tok.fdm(s, a + 3.0)) - tok.agg(tok.fdm(s, a))
        assert (moved.abs().amax(-1) > 1e-4).all()
    lam = WorldModel(build("lam", 2, width=16, latent_dim=6, size=16))
    assert any(s[-2] == 1 for s in _shapes(lam, z))                           # lam pools to one vector


def test_lam_token_is_parameter_matched_to_flam_and_trains():
    f = build("flam", 4, width=32, latent_dim=12, beta=0.03, k_offset=2, tokenizer="conv", token_grid=8,
              token_channels=8, token_hidden=16)
    t = build("lam-token", 4, width=32, latent_dim=12, beta=0.03, k_offset=2, tokenizer="conv", token_grid=8,
              token_channels=8, token_hidden=16)
    pf, pt = n_params(WorldModel(f)), n_params(WorldModel(t))
    assert abs(pt - pf) / pf < 0.1, (pt, pf)
    from flam_wm.config import TrainConfig
    from flam_wm.train import train

    video = generate(2, 12, 5, size=16, seed=2)[0]
    cfg = build("lam-token", 2, width=16, latent_dim=6, size=16)
    z = tokenize(torch.from_numpy(video), 4)
    torch.manual_seed(0)
    before = WorldModel(cfg).loss(z, torch.Generator().manual_seed(0))[0].item()
    model = train(cfg, TrainConfig(steps=60, batch_size=8, window=5, lr=3e-3), video)
    after = model.loss(z, torch.Generator().manual_seed(0))[0].item()
    assert after < 0.5 * before, (before, after)


def test_lam_token_idm_reads_each_tokens_change_through_a_query_token():
    """Its IDM (``token_idm="query-delta"``, the default chosen on dev) reads each token's change z_{t+1} - z_t
    beside z_t, and the latent comes from the query token's output; "mean" is the IDM of RUNs written before
    0.13.0 (the tokens' mean over (z_t, z_{t+1}))."""
    from flam_wm.config import ModelConfig

    torch.manual_seed(0)
    model = WorldModel(build("lam-token", 2, width=16, latent_dim=6, size=16))
    assert model.cfg.token_idm == "query-delta" and model.idm.delta and model.idm.query is not None
    idm, w = model.idm, model.cfg.width
    s_t, change = torch.randn(2, 3, 16, w), torch.randn(2, 3, 16, w)
    with torch.no_grad():
        mu = idm(s_t, s_t + change)[0]
        assert not torch.allclose(mu, idm(s_t, s_t + 2 * change)[0], atol=1e-4)        # the change is read
        idm.delta = False                                                             # not the second frame
        assert not torch.allclose(mu, idm(s_t, s_t + change)[0], atol=1e-4)
        assert torch.allclose(mu, idm(s_t, change)[0])
        idm.delta = True
        idm.query.add_(1.0)
        assert not torch.allclose(mu, idm(s_t, s_t + change)[0], atol=1e-4)            # through the query token
    old = WorldModel(ModelConfig(**{**model.cfg.to_dict(), "token_idm": "mean"}))
    assert old.idm.query is None and not old.idm.delta
    import pytest

    with pytest.raises(ValueError, match="token_idm"):
        ModelConfig(model="lam-token", slots=1, token_idm="max")
