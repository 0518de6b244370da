"""Every learner behind one interface: MVProbe, its ablations and the paper's baselines.

A method is one decorated builder ``fn(shape, n_labels, probe) -> Learner``; a ``Learner`` has
``fit(X, Y, X_val, Y_val, train_cfg) -> dict`` and ``predict_proba(X) -> [N, K]``. All torch
learners share ``train.fit`` (same optimiser, batches, epochs and best-on-val rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from .config import FIRST_ORDER, SECOND_ORDER, ProbeConfig, TrainConfig
from .core import MVProbe
from .train import converged, fit, per_label_accuracy, predict_proba


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    build: Callable[..., Learner]
    source: str  # [P] / [C] / [R]


METHODS: dict[str, Method] = {}


def register(name: str, description: str, source: str):
    def deco(fn):
        METHODS[name] = Method(name, description, fn, source)
        return fn
    return deco


def build(method: str, shape: tuple[int, int], n_labels: int, probe: ProbeConfig | None = None) -> Learner:
    if method not in METHODS:
        from icml26_shared import UserError

        raise UserError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    return METHODS[method].build(tuple(shape), n_labels, probe or ProbeConfig())


class Learner:
    method: str = ""
    lr: float | None = None  # the method's own learning rate, when it differs from TrainConfig's

    def fit(self, X, Y, X_val, Y_val, cfg: TrainConfig) -> dict:
        raise NotImplementedError

    def predict_proba(self, X: torch.Tensor) -> np.ndarray:
        raise NotImplementedError


class TorchLearner(Learner):
    """A torch module trained by ``train.fit``; ``standardize_inputs`` z-scores the flattened
    weights with training statistics (the flat baselines); the probes read raw weights [C]."""

    def __init__(self, method: str, module: nn.Module, standardize_inputs: bool = False,
                 lr: float | None = None):
        self.method, self.module, self.lr = method, module, lr
        self.standardize_inputs = standardize_inputs
        self.mean: torch.Tensor | None = None
        self.std: torch.Tensor | None = None

    def _prep(self, X: torch.Tensor) -> torch.Tensor:
        X = X.float()
        if self.standardize_inputs:
            if self.mean is None:
                raise RuntimeError("fit first")
            X = (X - self.mean) / self.std
        return X

    def fit(self, X, Y, X_val, Y_val, cfg: TrainConfig) -> dict:
        """Train with ``cfg`` (``self.lr``, a method's fixed published lr, overrides ``cfg.lr``).
        Returns the kept epoch, the curves and whether the kept epoch cleared the cap's window."""
        self.module.to(X.device)
        if self.standardize_inputs:
            self.mean, self.std = X.float().mean(0), X.float().std(0) + 1e-8
        if self.lr is not None:
            cfg = replace(cfg, lr=self.lr)
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
            self._reinit(cfg.seed)  # the same initialisation for the same seed
        self.module.to(X.device)
        hist = fit(self.module, self._prep(X), Y.float(), cfg,
                   None if X_val is None else self._prep(X_val),
                   None if Y_val is None else Y_val.float())
        return {"best_epoch": hist.best_epoch, "epochs_run": hist.epochs_run,
                "best_val_accuracy": hist.best_val_accuracy, "lr": cfg.lr,
                "params": sum(p.numel() for p in self.module.parameters()),
                "converged": converged(hist.best_epoch, cfg.epochs, cfg.patience),
                "history": hist}

    def _reinit(self, seed: int) -> None:
        torch.manual_seed(seed)
        for m in self.module.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()
        if isinstance(self.module, (MVProbe, ProbeX)):
            self.module.reset_probes()

    def predict_proba(self, X: torch.Tensor) -> np.ndarray:
        return predict_proba(self.module, self._prep(X))


# --- ProbeX, written independently of MVProbe (its one-branch special case is tested) ----------

class ProbeX(nn.Module):
    """ProbeX (Horwitz et al., CVPR'25): row responses X U, a shared points-axis projection + ReLU,
    a linear encoder and a linear head. No standardisation."""

    def __init__(self, shape, n_probes: int, proj_dim: int, rep_dim: int, n_outputs: int):
        super().__init__()
        d_H, d_W = shape
        self.U = nn.Parameter(torch.empty(d_W, n_probes))
        self.proj = nn.Linear(d_H, proj_dim, bias=False)
        self.encoder = nn.Linear(n_probes * proj_dim, rep_dim)
        self.head = nn.Linear(rep_dim, n_outputs)
        self.reset_probes()

    def reset_probes(self) -> None:
        bound = 1.0 / math.sqrt(self.U.shape[1])
        with torch.no_grad():
            self.U.uniform_(-bound, bound)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        responses = torch.matmul(X, self.U)  # [B, d_H, r]
        h = torch.relu(self.proj(responses.transpose(1, 2)))  # [B, r, proj_dim]
        return self.head(self.encoder(h.reshape(len(X), -1)))


class Flat(nn.Module):
    """Linear (``hidden=0``) or one-hidden-layer MLP on the flattened layer."""

    def __init__(self, shape, n_outputs: int, hidden: int = 0):
        super().__init__()
        d = int(np.prod(shape))
        self.net = (nn.Linear(d, n_outputs) if not hidden else
                    nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, n_outputs)))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.net(X.flatten(1))


def _mv(shape, k, probe: ProbeConfig, **over) -> MVProbe:
    p = replace(probe, **over)
    return MVProbe(shape, branches=p.branches, standardize=p.standardize, n_probes=p.n_probes,
                   proj_dim=p.proj_dim, rep_dim=p.rep_dim, n_outputs=k, eps=p.eps,
                   x_center=p.x_center, x_row_norm=p.x_row_norm)


@register("mvprobe", "MVProbe: four views (XU, XᵀV, X(XᵀW), Xᵀ(XZ)), each standardised", "[C]")
def _mvprobe(shape, k, probe):
    return TorchLearner("mvprobe", _mv(shape, k, probe))


@register("first_order", "ablation: MVProbe with the first-order views XU, XᵀV only", "[C]")
def _first(shape, k, probe):
    return TorchLearner("first_order", _mv(shape, k, probe, branches=FIRST_ORDER))


@register("xu_only", "ablation: MVProbe with the row view XU alone, standardised (what XᵀV adds)", "[C]")
def _xu(shape, k, probe):
    return TorchLearner("xu_only", _mv(shape, k, probe, branches=("xu",)))


@register("second_order", "ablation: MVProbe with the Gram views X(XᵀW), Xᵀ(XZ) only", "[C]")
def _second(shape, k, probe):
    return TorchLearner("second_order", _mv(shape, k, probe, branches=SECOND_ORDER))


@register("no_std", "ablation: MVProbe's four views without per-sample standardisation", "[C]")
def _nostd(shape, k, probe):
    return TorchLearner("no_std", _mv(shape, k, probe, standardize=False))


@register("probex", "ProbeX: XU only, no standardisation", "[P]")
def _probex(shape, k, probe):
    return TorchLearner("probex", ProbeX(shape, probe.n_probes, probe.proj_dim, probe.rep_dim, k))


@register("probex4", "ProbeX x4: four times the probes (parameter-matched to MVProbe)", "[P]")
def _probex4(shape, k, probe):
    return TorchLearner("probex4", ProbeX(shape, 4 * probe.n_probes, probe.proj_dim, probe.rep_dim, k))


#: ProbeX's published recipe [P]: lr 1e-3, 500 epochs, the best validation epoch kept
PROBEX_RECIPE = {"lr": 1e-3, "epochs": 500}


@register("probex_recipe", "ProbeX at its published recipe: lr 1e-3, 500 epochs, best val epoch", "[P]")
def _probex_recipe(shape, k, probe):
    return TorchLearner("probex_recipe", ProbeX(shape, probe.n_probes, probe.proj_dim, probe.rep_dim, k),
                        lr=PROBEX_RECIPE["lr"])


@register("flat", "logistic regression on the flattened, z-scored layer", "[R]")
def _flat(shape, k, probe):
    return TorchLearner("flat", Flat(shape, k), standardize_inputs=True)


@register("mlp", "MLP (one hidden layer of 256) on the flattened, z-scored layer", "[R]")
def _mlp(shape, k, probe):
    return TorchLearner("mlp", Flat(shape, k, hidden=256), standardize_inputs=True)


class Prior(Learner):
    """Anchor: every model gets each label's training frequency (per-label accuracy 0.5 on
    5-of-10 subsets); any trained probe must clear it."""

    method = "prior"

    def fit(self, X, Y, X_val, Y_val, cfg: TrainConfig) -> dict:
        self.p = Y.float().mean(0).cpu().numpy()
        return {}

    def predict_proba(self, X: torch.Tensor) -> np.ndarray:
        return np.tile(self.p, (len(X), 1))


@register("prior", "anchor: each label's training frequency for every model", "[R]")
def _prior(shape, k, probe):
    return Prior()


# --- StatNN ------------------------------------------------------------------------------------

def weight_statistics(X: torch.Tensor) -> np.ndarray:
    """StatNN's per-layer statistics (Unterthiner et al. 2020): mean, variance and the 0/25/50/75/100
    percentiles of the layer's entries, per model → ``[N, 7]``."""
    flat = X.flatten(1).double()
    q = torch.quantile(flat, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64), dim=1).T
    return torch.cat([flat.mean(1, keepdim=True), flat.var(1, keepdim=True), q], dim=1).cpu().numpy()


STATNN_GRID = ({"learning_rate": 0.05, "max_leaf_nodes": 7}, {"learning_rate": 0.1, "max_leaf_nodes": 15},
               {"learning_rate": 0.1, "max_leaf_nodes": 31})  # [R] chosen on val


class StatNN(Learner):
    """Weight statistics + one scikit-learn ``HistGradientBoostingClassifier`` per label; the tree
    settings are chosen on the validation models from ``STATNN_GRID``."""

    method = "statnn"

    def __init__(self, grid=STATNN_GRID, max_iter: int = 150):
        self.grid, self.max_iter = grid, max_iter
        self.models: list = []
        self.chosen: dict | None = None

    def _fit_with(self, F, Y, params, seed):
        from sklearn.ensemble import HistGradientBoostingClassifier

        return [HistGradientBoostingClassifier(max_iter=self.max_iter, random_state=seed, **params).fit(F, Y[:, k])
                if 0 < Y[:, k].sum() < len(Y) else float(Y[0, k]) for k in range(Y.shape[1])]

    @staticmethod
    def _proba(models, F) -> np.ndarray:
        return np.stack([m.predict_proba(F)[:, 1] if not isinstance(m, float) else np.full(len(F), m)
                         for m in models], axis=1)

    def fit(self, X, Y, X_val, Y_val, cfg: TrainConfig) -> dict:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):  # small tables: one OpenMP thread is faster than many
            return self._fit(X, Y, X_val, Y_val, cfg)

    def _fit(self, X, Y, X_val, Y_val, cfg: TrainConfig) -> dict:
        F, Yn = weight_statistics(X), Y.cpu().numpy()
        grid = self.grid if X_val is not None else self.grid[:1]
        best = (-1.0, None, None)
        for params in grid:
            models = self._fit_with(F, Yn, params, cfg.seed)
            acc = (per_label_accuracy(self._proba(models, weight_statistics(X_val)), Y_val.cpu().numpy())
                   if X_val is not None else 0.0)
            if acc > best[0]:
                best = (acc, params, models)
        self.models, self.chosen = best[2], best[1]
        return {"best_val_accuracy": best[0], "chosen": dict(best[1]), "features": F.shape[1]}

    def predict_proba(self, X: torch.Tensor) -> np.ndarray:
        return self._proba(self.models, weight_statistics(X))


@register("statnn", "StatNN: per-layer weight statistics + gradient-boosted trees", "[P]")
def _statnn(shape, k, probe):
    return StatNN()
