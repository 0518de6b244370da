"""The models compared, behind one interface: a registry of ``ModelConfig`` builders. A new
variant is one decorated function ``(entities, width, latent_dim, beta, k_offset, **tok) -> ModelConfig``
(``tok``: the tokenizer fields of ``ModelConfig``, the same for every model)."""

from __future__ import annotations

from collections.abc import Callable

from .config import ModelConfig

VARIANTS: dict[str, Callable[..., ModelConfig]] = {}


def variant(name: str):
    def deco(fn):
        VARIANTS[name] = fn
        return fn
    return deco


@variant("flam")
def flam(entities: int, width: int, latent_dim: int, beta: float, k_offset: int = 1, **tok) -> ModelConfig:
    """FLAM: K = E + k_offset slots (default one extra for the background) [R], temporal attention
    and per-slot KL on [P]; d is cut to a multiple of K."""
    k = entities + k_offset
    return ModelConfig(model="flam", slots=k, latent_dim=latent_dim - latent_dim % k, width=width,
                       beta=beta, temporal=True, **tok)


@variant("flam-no-temporal")
def flam_no_temporal(entities: int, width: int, latent_dim: int, beta: float, k_offset: int = 1,
                     **tok) -> ModelConfig:
    """Ablation [P]: FLAM with slots re-initialised every frame and no causal temporal attention."""
    cfg = flam(entities, width, latent_dim, beta, k_offset, **tok)
    return ModelConfig(**{**cfg.to_dict(), "temporal": False})


@variant("flam-one-latent")
def flam_one_latent(entities: int, width: int, latent_dim: int, beta: float, k_offset: int = 1,
                    **tok) -> ModelConfig:
    """The factorisation's ablation [R, issue 57]: FLAM's slots, FDM and compositor, one latent of size d
    inferred from all slots together and given to every slot's FDM (``ModelConfig.one_latent``)."""
    cfg = flam(entities, width, latent_dim, beta, k_offset, **tok)
    return ModelConfig(**{**cfg.to_dict(), "one_latent": True})


@variant("lam")
def lam(entities: int, width: int, latent_dim: int, beta: float, k_offset: int = 1, **tok) -> ModelConfig:
    """Monolithic continuous latent action model (AdaWorld-style) [P baseline; R architecture]:
    one latent of size d per transition, same IDM / FDM / aggregator code with K = 1; its width
    is set so that its parameter count is closest to FLAM's (within 10%, checked)."""
    from .core import WorldModel, n_params

    target = n_params(WorldModel(flam(entities, width, latent_dim, beta, k_offset, **tok)))
    best = min(range(8, 4 * width + 1, 2),
               key=lambda w: abs(n_params(WorldModel(ModelConfig(model="lam", slots=1, latent_dim=latent_dim,
                                                                  width=w, beta=beta, **tok))) - target))
    return ModelConfig(model="lam", slots=1, latent_dim=latent_dim, width=best, beta=beta, **tok)


@variant("lam-vq")
def lam_vq(entities: int, width: int, latent_dim: int, beta: float, k_offset: int = 1, **tok) -> ModelConfig:
    """Monolithic VQ latent action model (Genie-style) [P baseline; R architecture]: the IDM's output
    snapped to the nearest of 8 codes (straight-through, codebook + commitment loss instead of the
    KL); same IDM / FDM / aggregator code with K = 1, width matched to FLAM's parameter count."""
    cfg = lam(entities, width, latent_dim, beta, k_offset, **tok)
    return ModelConfig(**{**cfg.to_dict(), "model": "lam-vq"})


@variant("lam-token")
def lam_token(entities: int, width: int, latent_dim: int, beta: float, k_offset: int = 1, **tok) -> ModelConfig:
    """Token-level monolithic LAM (LAPO / Genie / AdaWorld-style) [P baseline; R sizes; issue 57]: one latent
    of size d from a transformer over (z_t, z_{t+1})'s tokens, a transformer FDM over z_t's tokens with the
    latent at every token, predicting every token of z_{t+1} -- no vector narrower than N x D on the way.
    Its width is the one whose parameter count is closest to FLAM's (reported, not forced within 10%)."""
    from .core import WorldModel, n_params

    target = n_params(WorldModel(flam(entities, width, latent_dim, beta, k_offset, **tok)))
    best = min(range(8, 2 * width + 1, 4),
               key=lambda w: abs(n_params(WorldModel(ModelConfig(model="lam-token", slots=1, latent_dim=latent_dim,
                                                                  width=w, beta=beta, **tok))) - target))
    return ModelConfig(model="lam-token", slots=1, latent_dim=latent_dim, width=best, beta=beta, **tok)


def build(name: str, entities: int, width: int = 32, latent_dim: int = 10, beta: float = 0.01,
          k_offset: int = 1, **tok) -> ModelConfig:
    if name not in VARIANTS:
        raise ValueError(f"unknown model {name!r} (choose from {', '.join(VARIANTS)})")
    return VARIANTS[name](entities, width, latent_dim, beta, k_offset, **tok)
