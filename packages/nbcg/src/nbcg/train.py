"""The shared trainer: a masked multi-coalition MLP classifier and the three weightings
(uniform, Nash bargaining, Nash-MTL), so every arm sees the same data, model and budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from .baselines import LOSSES, Arm
from .config import NBCGConfig
from .core import NashBargaining, nash_mtl_alpha


class CoalitionMLP(torch.nn.Module):
    """Shared encoder h = ReLU(Wx + b); coalition k reads h through its learned gate
    (communication mask) M_k = σ(g_k) and scores its own labels [R]."""

    def __init__(self, d_in: int, hidden: int, coalitions: list[list[int]], n_labels: int):
        super().__init__()
        self.enc = torch.nn.Linear(d_in, hidden)
        self.gates = torch.nn.Parameter(torch.full((len(coalitions), hidden), 2.0))
        self.head = torch.nn.Linear(hidden, n_labels)
        owner = torch.zeros(n_labels, dtype=torch.long)
        for k, c in enumerate(coalitions):
            owner[c] = k
        self.register_buffer("owner", owner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.enc(x))
        W = self.head.weight * torch.sigmoid(self.gates)[self.owner]  # L×hidden, masked per coalition
        return h @ W.T + self.head.bias

    def shared_params(self) -> list[torch.nn.Parameter]:
        return [self.enc.weight, self.enc.bias]


@dataclass
class TrainLog:
    weights: list[np.ndarray] = field(default_factory=list)   # per-step coalition coefficients
    nash: list[np.ndarray] = field(default_factory=list)      # per-step raw Nash weights (mean 1)
    final_coef: np.ndarray | None = None


class Local:
    """One process: the identity all-reduce. ``nbcg.scale.AccelerateGroup`` is the multi-process
    one (every rank trains on its shard of each batch, sums are all-reduced)."""

    rank, world = 0, 1

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        return t


def coalition_losses(elem: torch.Tensor, coalitions: list[list[int]]) -> torch.Tensor:
    return torch.stack([elem[:, c].mean() for c in coalitions])


def coalition_sums(elem: torch.Tensor, coalitions: list[list[int]],
                   owner: torch.Tensor | None = None) -> torch.Tensor:
    """Σ over a coalition's elements, one scatter-add over labels (``owner[j]`` = j's coalition;
    coalitions partition the labels, so this equals K separate slice sums)."""
    if owner is None:
        owner = owner_index(coalitions, elem.shape[1])
    return torch.zeros(len(coalitions), dtype=elem.dtype).index_add(0, owner, elem.sum(0))


def owner_index(coalitions: list[list[int]], n_labels: int) -> torch.Tensor:
    owner = torch.full((n_labels,), -1, dtype=torch.long)
    for k, c in enumerate(coalitions):
        owner[c] = k
    if bool((owner < 0).any()):
        raise ValueError("the coalitions must partition the labels")
    return owner


def coalition_grads(Lk: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    """K×P: row k = ∇_params L_k, all K rows from one batched (vmapped) backward pass."""
    K = Lk.shape[0]
    g = torch.autograd.grad(Lk, params, grad_outputs=torch.eye(K, dtype=Lk.dtype),
                            retain_graph=True, allow_unused=True, is_grads_batched=True)
    return torch.cat([(t if t is not None else torch.zeros(K, *p.shape)).reshape(K, -1)
                      for t, p in zip(g, params, strict=True)], 1)


def train(X: np.ndarray, Y: np.ndarray, coalitions: list[list[int]], arm: Arm,
          cfg: NBCGConfig, seed: int, *, model: torch.nn.Module | None = None,
          forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
          group: Local | None = None, params: list | None = None
          ) -> tuple[torch.nn.Module, TrainLog]:
    """Train one arm; the coalition coefficients actually used are logged after warm-up.

    ``model``/``forward(idx) -> logits`` replace the default MLP on ``X`` (fine-tuning a text
    encoder); ``group`` shards every batch over processes: the coalition loss sums (and the
    gradients) are all-reduced *before* the bargaining weights, so every process computes the same
    weights and the run equals the one-process run on the same batches."""
    group = group or Local()
    torch.manual_seed(seed)
    Yt = torch.as_tensor(Y, dtype=torch.float32)
    if model is None:
        Xt = torch.as_tensor(X, dtype=torch.float32)
        model = CoalitionMLP(Xt.shape[1], cfg.hidden, coalitions, Yt.shape[1])
        forward = lambda idx: model(Xt[idx])  # noqa: E731
    assert forward is not None
    counts = Yt.sum(0)
    n, L = Yt.shape
    K = len(coalitions)
    sizes = torch.tensor([len(c) for c in coalitions], dtype=torch.float32)
    owner = owner_index(coalitions, L)
    groups = list(model.parameters()) if params is None else params
    flat = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]
    # the fused kernel: the same Adam update in one op per tensor (per-step Python overhead dominates here)
    opt = torch.optim.Adam(groups, lr=cfg.lr, fused=all(p.dtype == torch.float32 for p in flat))
    shared = model.shared_params()
    loss_fn = LOSSES[arm.loss]
    bargain = NashBargaining(cfg)
    gen = torch.Generator().manual_seed(seed)
    smooth = None            # EMA of batch coalition losses (the utilities read this) [R]
    warm_sum, warm_n = torch.zeros(K), 0
    alpha = np.ones(K)
    log = TrainLog()
    step = 0
    if arm.sampling == "label-aware":
        from .baselines import label_aware_weights

        probs = torch.as_tensor(label_aware_weights(Y), dtype=torch.float64)
    for epoch in range(cfg.epochs):
        if arm.sampling == "label-aware":   # n draws with replacement: the same steps per epoch
            perm = torch.multinomial(probs, n, replacement=True, generator=gen)
        else:
            perm = torch.randperm(n, generator=gen)
        warm = epoch < cfg.warmup_epochs
        for s in range(0, n, cfg.batch_size):
            batch = perm[s:s + cfg.batch_size]
            idx = batch[group.rank::group.world]            # this process's shard
            elem = loss_fn(forward(idx), Yt[idx], counts)
            # global per-coalition mean = all-reduced sums / (batch size · coalition size)
            denom = float(len(batch)) * sizes
            Lk = coalition_sums(elem, coalitions, owner) / denom    # this shard's share
            det = group.sum(Lk.detach().clone())                    # the batch's coalition losses
            smooth = det.clone() if smooth is None else 0.9 * smooth + 0.1 * det
            if arm.weighting == "uniform" or warm:
                coef = sizes / L                       # = the plain label-mean loss
                if warm:
                    warm_sum, warm_n = warm_sum + det, warm_n + 1
            elif arm.weighting == "nash":
                w, _ = bargain.step(smooth.numpy())
                log.nash.append(w)
                ref = torch.as_tensor(bargain.ref, dtype=torch.float32)
                # ∇(−Σ log(u_k − d_k)) = Σ_k w_k ∇L_k / L_k⁰ (up to a constant); rescaled to loss units
                coef = torch.as_tensor(w, dtype=torch.float32) / ref * ref.mean() / K
            else:  # nash-mtl: α from (GᵀG)α = 1/α over coalition gradients of the shared encoder
                if step % cfg.nash_mtl_every == 0:
                    G = group.sum(coalition_grads(Lk, shared)).numpy()   # K×P, all-reduced
                    alpha = nash_mtl_alpha(G.T.astype(np.float64))
                    alpha = alpha / alpha.sum()
                coef = torch.as_tensor(alpha, dtype=torch.float32)
            loss = (coef * Lk).sum()
            opt.zero_grad()
            loss.backward()
            if group.world > 1:
                for p in flat:
                    if p.grad is not None:
                        p.grad = group.sum(p.grad)
            opt.step()
            if not warm:
                log.weights.append((coef / coef.sum()).numpy().copy())
            step += 1
        if warm and epoch == cfg.warmup_epochs - 1 and arm.weighting == "nash":
            bargain.set_reference((warm_sum / max(warm_n, 1)).numpy())
    log.final_coef = (log.weights[-1] if log.weights else (sizes / L).numpy())
    return model, log


def predict_scores(model: CoalitionMLP, X: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return torch.sigmoid(model(torch.as_tensor(X, dtype=torch.float32))).numpy()


def gradient_shares(model: CoalitionMLP, X: np.ndarray, Y: np.ndarray, coalitions: list[list[int]],
                    coef: np.ndarray) -> np.ndarray:
    """Each coalition's share of the shared-encoder gradient norm under the arm's coefficients."""
    from .baselines import bce

    Xt, Yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(Y, dtype=torch.float32)
    Lk = coalition_losses(bce(model(Xt), Yt, Yt.sum(0)), coalitions)
    G = coalition_grads(Lk * torch.as_tensor(np.asarray(coef), dtype=Lk.dtype), model.shared_params())
    norms = torch.linalg.vector_norm(G, dim=1).detach().numpy().astype(np.float64)
    return norms / max(norms.sum(), 1e-12)


THRESHOLD_GRID = np.linspace(0.05, 0.7, 14)


def macro_f1_at(S: np.ndarray, Y: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Macro-F1 of ``S >= t`` for every t at once (sklearn's ``f1_score(average="macro",
    zero_division=0)``: a label with no true and no predicted positive scores 0)."""
    Yb = np.asarray(Y) > 0
    P = np.asarray(S)[None] >= np.asarray(thresholds, dtype=np.float64)[:, None, None]   # T×n×L
    tp = (P & Yb[None]).sum(1)
    denom = P.sum(1) + Yb.sum(0)[None]                     # 2tp + fp + fn = predicted + true
    f1 = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)
    return f1.mean(1)


def choose_threshold(S: np.ndarray, Y: np.ndarray) -> float:
    """One global threshold maximising macro-F1 on the split given (always dev) [R]."""
    return float(THRESHOLD_GRID[int(np.argmax(macro_f1_at(S, Y, THRESHOLD_GRID)))])
