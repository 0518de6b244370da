"""The maths: the multi-index teacher, the two-stage learner, alignment, principal angles, memory
accounting and log–log slope fits. Pure functions and small classes: no I/O, no logging, no global
state (every random draw takes its own seed).

Teacher [P: multi-index task; R: the link] — x ~ N(0, I_d), z = Uᵀx, U ∈ R^{d×r} orthonormal,
y = g(z) + noise·ε with g(z) = Σ_k He2(z_k)/√r (He2(t) = t² − 1). By Stein's lemma
H = E[y(xxᵀ − I)] = E[∇²g] = (2/√r)·UUᵀ; the "he2+cross" link adds Σ_{k<l} z_k z_l /√r, which adds
(u_k u_lᵀ + u_l u_kᵀ)/√r per pair [R: the 1/√r keeps rank(H) = r for every r — with coefficient 1
the core (2/√r)I + (J − I) is singular at r = 4].

Learner [R, the standard two-stage feature-learning analysis (Damian, Lee & Soltanolkotabi 2022;
Ba et al. 2022)] — f(x) = Σ_j a_j relu(w_jᵀx + b_j). Stage 1: from a small symmetric init
(w_{2k} = w_{2k+1} ~ init_scale·N(0, I/d), a_j = ±1 alternating, b = 0, so f₀ ≈ 0) one large step
W₁ = W₀ − η₁ ∇_W ½·mean (f(x) − y)². At b = 0 the ReLU kink makes the population gradient of row j
−a_j·(Hŵ_j − ‖Uᵀŵ_j‖²ŵ_j/√r)/√(2π): rows move into span(U). Stage 2: fresh biases b ~ N(0, 1) and
ridge on a with features relu(W₁x + b).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import LearnerConfig, TeacherConfig

DTYPE = torch.float32


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed) % (2**63))


def _randn(*shape: int, generator: torch.Generator, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """Seeded normals drawn on the CPU (same numbers on every device), then moved to the current
    default device (``with torch.device("cuda"):`` runs a cell on the GPU)."""
    out = torch.randn(*shape, generator=generator, dtype=dtype, device="cpu")
    return out.to(torch.get_default_device())


class MultiIndexTeacher:
    """y = g(Uᵀx) + noise·ε on x ~ N(0, I_d); ``U`` depends only on ``seed``."""

    def __init__(self, d: int, r: int, link: str = "he2", noise: float = 0.1, seed: int = 0):
        self.config = TeacherConfig(d, r, link, noise, seed)
        self.d, self.r, self.link, self.noise, self.seed = d, r, link, noise, seed
        Q, R = torch.linalg.qr(_randn(d, r, generator=_gen(seed), dtype=torch.float64))
        self.U = (Q * torch.sign(torch.diagonal(R))).to(DTYPE)  # orthonormal columns, sign-fixed

    def g(self, X: torch.Tensor) -> torch.Tensor:
        z = X @ self.U
        y = (z**2 - 1).sum(1)
        if self.link == "he2+cross":
            s = z.sum(1)
            y = y + 0.5 * (s**2 - (z**2).sum(1))  # Σ_{k<l} z_k z_l
        return y / math.sqrt(self.r)

    def sample(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` labelled points, deterministic in ``seed``: X (n, d), y (n,)."""
        g = _gen(seed)
        X = _randn(n, self.d, generator=g)
        eps = _randn(n, generator=g)
        return X, self.g(X) + self.noise * eps

    def H_exact(self) -> torch.Tensor:
        """E[y(xxᵀ − I)] in closed form: U A Uᵀ with A = (2I [+ J − I]) / √r."""
        A = 2.0 * torch.eye(self.r, dtype=torch.float64)
        if self.link == "he2+cross":
            A = A + (torch.ones(self.r, self.r, dtype=torch.float64) - torch.eye(self.r, dtype=torch.float64))
        U = self.U.double()
        return U @ (A / math.sqrt(self.r)) @ U.T


def monte_carlo_H(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/n) Σ y_i (x_i x_iᵀ − I), float64."""
    X, y = X.double(), y.double()
    return (X.T * y) @ X / len(y) - y.mean() * torch.eye(X.shape[1], dtype=torch.float64)


# --- activations (a registry: a user's activation is one ``register_activation`` call) --------

@dataclass(frozen=True)
class Activation:
    """σ, its derivative σ' (the closed-form gradient uses it; tested equal to autograd's) and the
    unit of the stage-1 step: η₁ = c·``eta_unit(d, init_scale)`` for c on the dev grid ``ETA1_GRID``."""

    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    grad: Callable[[torch.Tensor], torch.Tensor]
    eta_unit: Callable[[int, float], float]


ACTIVATIONS: dict[str, Activation] = {}


def register_activation(name: str, fn: Callable[[torch.Tensor], torch.Tensor],
                        grad: Callable[[torch.Tensor], torch.Tensor],
                        eta_unit: Callable[[int, float], float] | None = None) -> Activation:
    """Make ``TwoStageLearner(..., activation=name)`` (and ``sweep --activation name``) use σ = ``fn``
    with derivative ``grad`` (elementwise, differentiable torch functions). ``eta_unit(d, init_scale)``
    scales the dev grid of η₁ (default √d, the ReLU's: its first-step gradient rows are ~1/√d)."""
    act = Activation(name, fn, grad, eta_unit or (lambda d, init_scale: math.sqrt(d)))
    ACTIVATIONS[name] = act
    return act


register_activation("relu", torch.relu, lambda t: (t > 0).to(t.dtype))
# [R] the kink-free control (issue 54 item 4): σ(t) = t². From the symmetric init f₀ = 0, so the
# first-step gradient of row j is −2a_j·Ĥ_S w_j with Ĥ_S = mean ỹ x̃x̃ᵀ: linear in w, no kink; its rows
# scale with ‖w₀‖ = init_scale, hence the step unit √d / init_scale.
register_activation("quadratic", torch.square, lambda t: 2 * t,
                    lambda d, init_scale: math.sqrt(d) / init_scale)


def get_activation(name: str) -> Activation:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r} (choose one of {', '.join(sorted(ACTIVATIONS))}, or "
                         "register one with dd_multiindex.core.register_activation)")
    return ACTIVATIONS[name]


@dataclass
class FittedModel:
    W: torch.Tensor  # (L, d) first layer after stage 1
    b: torch.Tensor  # (L,) stage-2 biases
    a: torch.Tensor  # (L,) ridge second layer
    activation: str = "relu"

    def features(self, X: torch.Tensor) -> torch.Tensor:
        return get_activation(self.activation).fn(X @ self.W.T + self.b)

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        return self.features(X) @ self.a


class TwoStageLearner:
    """One large gradient step on W from a small symmetric init, then ridge on a."""

    def __init__(self, L: int, eta1: float, ridge: float = 1e-2, activation: str = "relu",
                 init_scale: float = 1e-3, seed: int = 0):
        self.config = LearnerConfig(L, eta1, ridge, activation, init_scale, seed)
        self.L, self.eta1, self.ridge, self.seed = L, eta1, ridge, seed
        self.activation = activation
        self.act = get_activation(activation)

    def eta_unit(self, d: int) -> float:
        """The unit of η₁ for this activation (η₁ = c × unit, c on the dev grid)."""
        return self.act.eta_unit(d, self.config.init_scale)

    def init(self, d: int, seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Symmetric init (W₀ (L, d), a (L,)): neurons 2k and 2k+1 share w and have a = ±1."""
        g = _gen(self.seed if seed is None else seed)
        half = _randn((self.L + 1) // 2, d, generator=g)
        W0 = (self.config.init_scale / math.sqrt(d)) * half.repeat_interleave(2, 0)[: self.L]
        a = torch.tensor([1.0 if j % 2 == 0 else -1.0 for j in range(self.L)], dtype=DTYPE)
        return W0, a

    def biases(self) -> torch.Tensor:
        return _randn(self.L, generator=_gen(self.seed + 7919))

    def loss(self, W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """½·mean (f(x) − y)² at b = 0; W may carry leading batch dims (K, L, d) → (K,)."""
        f = self.act.fn(torch.einsum("nd,...ld->...nl", X, W)) @ a
        return 0.5 * ((f - y) ** 2).mean(-1)

    def grad_autograd(self, W0: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
                      create_graph: bool = False) -> torch.Tensor:
        """∇_W of ``loss`` by autograd (batched over leading dims of W0); differentiable in X, y."""
        W = W0.detach().requires_grad_(True)
        (G,) = torch.autograd.grad(self.loss(W, a, X, y).sum(), W, create_graph=create_graph)
        return G

    def grad_sum(self, W0: torch.Tensor, a: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """n·∇_W loss in closed form (chunk-additive, differentiable in X and y; W0 may be batched
        (K, L, d)): Σ_i (f(x_i) − y_i)·a_j·σ'(w_jᵀx_i)·x_i (ReLU: σ' = 1[w_jᵀx_i > 0])."""
        pre = torch.einsum("nd,...ld->...nl", X, W0)
        R = self.act.fn(pre) @ a - y
        return a[:, None] * torch.einsum("...nl,nd->...ld", self.act.grad(pre) * R[..., None], X)

    def step(self, W0: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        return W0 - self.eta1 * G

    def first_step(self, X: torch.Tensor, y: torch.Tensor, W0: torch.Tensor | None = None) -> torch.Tensor:
        if W0 is None:
            W0, a = self.init(X.shape[1])
        else:
            a = self.init(X.shape[1])[1]
        return self.step(W0, self.grad_sum(W0, a, X, y) / len(y))

    def fit_stage2(self, W1: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> FittedModel:
        b = self.biases()
        Phi = self.act.fn(X @ W1.T + b).double()
        A = Phi.T @ Phi / len(y) + self.ridge * torch.eye(self.L, dtype=torch.float64)
        a = torch.linalg.solve(A, Phi.T @ y.double() / len(y))
        return FittedModel(W1, b, a.to(DTYPE), self.activation)

    def fit(self, stage1: tuple[torch.Tensor, torch.Tensor], stage2: tuple[torch.Tensor, torch.Tensor]) -> FittedModel:
        return self.fit_stage2(self.first_step(*stage1), *stage2)


def mse(model: FittedModel, X: torch.Tensor, y: torch.Tensor) -> float:
    return float(((model.predict(X) - y) ** 2).mean())


def alignment(W: torch.Tensor, U: torch.Tensor) -> float:
    """‖P_U W‖_F / ‖W‖_F for rows of W (L, d) and orthonormal U (d, r)."""
    W, U = W.double(), U.double()
    return float(torch.linalg.norm(W @ U) / torch.linalg.norm(W))


def principal_angles(U, V) -> np.ndarray:
    """Principal angles (radians, largest first) between span(U) and span(V)."""
    from scipy.linalg import subspace_angles

    U, V = (x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x for x in (U, V))
    return subspace_angles(np.asarray(U, dtype=float), np.asarray(V, dtype=float))


def distilled_directions(X: torch.Tensor, y: torch.Tensor, r: int) -> torch.Tensor:
    """Top-r eigenvectors (by |eigenvalue|) of Σ_i ỹ_i (x̃_i x̃_iᵀ − I): what the set encodes."""
    M = monte_carlo_H(X, y)
    vals, vecs = torch.linalg.eigh(M)
    return vecs[:, torch.argsort(vals.abs(), descending=True)[:r]]


# --- distilled sets and their memory ---------------------------------------------------------

@dataclass
class DistilledSet:
    """Stage 1: m₁ labelled points (x̃, ỹ); stage 2: m₂ labels on inputs drawn from ``seed2``."""

    x1: torch.Tensor  # (m1, d)
    y1: torch.Tensor  # (m1,)
    y2: torch.Tensor | None = None  # (m2,) labels on stage2_inputs(seed2, m2, d)
    seed2: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def memory_stage1(self) -> int:
        return memory_of((self.x1, self.y1))

    @property
    def memory_stage2(self) -> int:
        return 0 if self.y2 is None else memory_of(self.y2) + memory_of(self.seed2)

    @property
    def memory(self) -> int:
        return self.memory_stage1 + self.memory_stage2


def stage2_inputs(seed: int, m: int, d: int) -> torch.Tensor:
    """The seeded stage-2 inputs of label distillation: regenerated, never stored."""
    return _randn(m, d, generator=_gen(seed))


def memory_of(x) -> int:
    """Numbers stored exactly: a tensor/array counts its entries, a seed (int) counts 1, a tuple
    or list the sum of its parts, a ``DistilledSet`` its two stages."""
    if isinstance(x, DistilledSet):
        return x.memory
    if isinstance(x, bool):
        raise TypeError("a bool is not a stored number")
    if isinstance(x, int):
        return 1
    if isinstance(x, (tuple, list)):
        return sum(memory_of(v) for v in x)
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return int(np.prod(x.shape))
    raise TypeError(f"cannot count the memory of {type(x).__name__}")


# --- log–log slope fits ------------------------------------------------------------------------

@dataclass(frozen=True)
class Slope:
    exponent: float
    ci_low: float
    ci_high: float


def _design(rows: list[dict], target: str, over: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    keep = [r for r in rows if r.get(target) is not None and np.isfinite(r[target]) and r[target] > 0]
    X = np.array([[1.0] + [math.log(float(r[a])) for a in over] for r in keep]).reshape(len(keep), 1 + len(over))
    y = np.array([math.log(float(r[target])) for r in keep])
    return X, y


def fit_slopes(rows: list[dict], target: str, over: tuple[str, ...] | list[str] = ("r", "d"),
               *, confidence: float = 0.90, n_resamples: int = 999, seed: int = 0) -> dict[str, Slope]:
    """Joint log–log fit log target = c + Σ_axis p_axis·log axis over rows with a positive target,
    with a bootstrap (resampling rows, ``scipy.stats.bootstrap``) CI per exponent.

    Raises ``ValueError`` when an axis has fewer than 2 distinct values."""
    over = tuple(over)
    X, y = _design(rows, target, over)
    for i, axis in enumerate(over):
        if len(y) == 0 or len(np.unique(X[:, 1 + i])) < 2:
            raise ValueError(f"cannot fit {target} over {axis}: fewer than 2 distinct values of {axis} "
                             "among rows with a positive value")
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    resid = y - X @ coef
    if float(np.abs(resid).max()) < 1e-12:  # a noiseless law: every resample gives the same fit
        return {a: Slope(float(coef[1 + i]), float(coef[1 + i]), float(coef[1 + i]))
                for i, a in enumerate(over)}
    import warnings

    from scipy.stats import bootstrap

    def stat(idx, axis=-1):
        idx = np.asarray(idx, dtype=int)
        return np.linalg.lstsq(X[idx], y[idx], rcond=None)[0][1:]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = bootstrap((np.arange(len(y)),), stat, vectorized=False, paired=False, method="percentile",
                       confidence_level=confidence, n_resamples=n_resamples,
                       random_state=np.random.default_rng(seed)).confidence_interval
    return {a: Slope(float(coef[1 + i]), float(np.atleast_1d(ci.low)[i]), float(np.atleast_1d(ci.high)[i]))
            for i, a in enumerate(over)}
