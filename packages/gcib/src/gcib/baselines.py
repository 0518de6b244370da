"""The methods GCIB is compared with, behind one trainer: a variant is one registered function
mapping the shared options to its ``TrainConfig``. Each keeps its own selection rule (the epoch
with the best valid HR@10; the test-time mask mode on the valid item for GCIB)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .config import TrainConfig

METHODS: dict[str, Callable[[TrainConfig], TrainConfig]] = {}
DESCRIPTIONS: dict[str, str] = {}


def register(name: str, description: str):
    def deco(fn: Callable[[TrainConfig], TrainConfig]):
        METHODS[name] = fn
        DESCRIPTIONS[name] = description
        return fn
    return deco


@register("gcib", "GCIB: learned edge masks + GIB (HSIC) + cross-behaviour InfoNCE + fusion [P/S/R]")
def _gcib(c: TrainConfig) -> TrainConfig:
    return replace(c, method="gcib")


@register("lightgcn", "LightGCN on the target behaviour only (never sees auxiliary edges)")
def _lightgcn(c: TrainConfig) -> TrainConfig:
    return replace(c, method="lightgcn", gib_weight=0.0, cl_weight=0.0)


@register("lightgcn-merged", "LightGCN on one graph of all behaviours merged")
def _merged(c: TrainConfig) -> TrainConfig:
    return replace(c, method="lightgcn-merged", gib_weight=0.0, cl_weight=0.0)


@register("lightgcn-aux", "LightGCN on the auxiliary behaviours only (their edges are its graph and its "
          "BPR positives; the target trains nothing): the pilot study's auxiliary-only arm")
def _aux(c: TrainConfig) -> TrainConfig:
    return replace(c, method="lightgcn-aux", gib_weight=0.0, cl_weight=0.0)


@register("mbgcn", "MBGCN-lite: one LightGCN per behaviour, fused with learned behaviour weights")
def _mbgcn(c: TrainConfig) -> TrainConfig:
    return replace(c, method="mbgcn", gib_weight=0.0, cl_weight=0.0)


@register("cml", "CML-lite: per-behaviour LightGCN + cross-behaviour InfoNCE, no denoising")
def _cml(c: TrainConfig) -> TrainConfig:
    return replace(c, method="cml", gib_weight=0.0)


@register("gcib-no-gib", "ablation: GCIB with --gib-weight 0 (mask learned from BPR + contrast only)")
def _no_gib(c: TrainConfig) -> TrainConfig:
    return replace(c, method="gcib", gib_weight=0.0)


@register("gcib-no-cl", "ablation: GCIB with --cl-weight 0")
def _no_cl(c: TrainConfig) -> TrainConfig:
    return replace(c, method="gcib", cl_weight=0.0)


@register("cosine-prior", "GIB control: GCIB with its scorer frozen at its start, keep = "
          "σ(scorer_init·cos(z_u, z_i) + logit(keep_init)) on the target encoder (the prior alone)")
def _cosine_prior(c: TrainConfig) -> TrainConfig:
    return replace(c, method="gcib", train_scorer=False)


@register("gcib-s0", "GIB control: GCIB with --scorer-init 0 (what the objective learns with no cosine prior)")
def _gcib_s0(c: TrainConfig) -> TrainConfig:
    return replace(c, method="gcib", scorer_init=0.0)


@register("gcib-no-gib-s0", "GIB control: gcib-no-gib with --scorer-init 0")
def _no_gib_s0(c: TrainConfig) -> TrainConfig:
    return replace(c, method="gcib", gib_weight=0.0, scorer_init=0.0)


@register("random-prune", "ablation: GCIB's losses with a random fixed mask at GCIB's keep rate")
def _random(c: TrainConfig) -> TrainConfig:
    return replace(c, method="random-prune")


BASELINES = ("lightgcn", "lightgcn-merged", "mbgcn", "cml")
ABLATIONS = ("gcib-no-gib", "gcib-no-cl", "random-prune")
GIB_ARMS = ("gcib-no-gib", "cosine-prior", "gcib-s0", "gcib-no-gib-s0")  # item 2 of issue 60: the GIB isolated


def method_config(name: str, base: TrainConfig | None = None, **overrides) -> TrainConfig:
    """The ``TrainConfig`` of a registered method from shared options (``ValueError`` if unknown)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r} (choose from {', '.join(METHODS)})")
    return METHODS[name](replace(base or TrainConfig(), **overrides))
