"""The shared trainer: a masked multi-coalition MLP classifier and the three weightings
(uniform, Nash bargaining, Nash-MTL), so every arm sees the same data, model and budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from icml26_shared.train import EarlyStopping

from .baselines import LOSSES, Arm
from .config import NBCGConfig
from .core import NashBargaining, nash_mtl_alpha


def hidden_masks(coalitions: list[list[int]], hidden: int, shared_fraction: float = 0.5) -> torch.Tensor:
    """K×hidden binary masks [R]: every coalition reads the first ⌊shared_fraction·hidden⌋ units
    (the shared block) and its own private units of the rest (private unit u belongs to coalition
    u mod K), so no coalition reads another's private units. One coalition reads everything."""
    K = len(coalitions)
    M = torch.zeros(K, hidden)
    n_shared = int(shared_fraction * hidden) if K > 1 else hidden
    M[:, :n_shared] = 1.0
    for u in range(n_shared, hidden):
        M[(u - n_shared) % K, u] = 1.0
    return M


class CoalitionMLP(torch.nn.Module):
    """Shared encoder h = ReLU(Wx + b); coalition k's labels read h only through its binary
    communication mask M_k (a shared block plus the coalition's private hidden units, see
    ``hidden_masks``) [R]. ``masked=False`` is the no-mask ablation (every label reads all of h)."""

    def __init__(self, d_in: int, hidden: int, coalitions: list[list[int]], n_labels: int,
                 masked: bool = True, shared_fraction: float = 0.5):
        super().__init__()
        self.enc = torch.nn.Linear(d_in, hidden)
        self.head = torch.nn.Linear(hidden, n_labels)
        owner = torch.zeros(n_labels, dtype=torch.long)
        for k, c in enumerate(coalitions):
            owner[c] = k
        self.register_buffer("owner", owner)
        mask = hidden_masks(coalitions, hidden, shared_fraction) if masked else torch.ones(len(coalitions), hidden)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.enc(x))
        W = self.head.weight * self.mask[self.owner]  # L×hidden: label j reads its coalition's units only
        return h @ W.T + self.head.bias

    def shared_params(self) -> list[torch.nn.Parameter]:
        return [self.enc.weight, self.enc.bias]


@dataclass
class TrainLog:
    weights: list[np.ndarray] = field(default_factory=list)   # per-step coalition coefficients
    nash: list[np.ndarray] = field(default_factory=list)      # per-step raw Nash weights (mean 1)
    mtl_norm: list[float] = field(default_factory=list)       # Nash-MTL: ‖Gα‖ of the shared update at each solve
    mtl_clipped: list[float] = field(default_factory=list)    # ... and the shared gradient norm after the clip
    curve: dict = field(default_factory=dict)   # per epoch: train_loss, dev_macro_f1; best_epoch, stopped_at
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
    return torch.cat([(t if t is not None else torch.zeros(K, *p.shape, device=p.device)).reshape(K, -1)
                      for t, p in zip(g, params, strict=True)], 1).cpu()


NASH_MTL_MAX_NORM = 1.0   # Nash-MTL's max_norm (its code and LibMTL) [C]


def train(X: np.ndarray, Y: np.ndarray, coalitions: list[list[int]], arm: Arm,
          cfg: NBCGConfig, seed: int, *, model: torch.nn.Module | None = None,
          forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
          group: Local | None = None, params: list | None = None, device: str = "cpu",
          dev: tuple[np.ndarray, np.ndarray] | None = None, patience: int = 2
          ) -> tuple[torch.nn.Module, TrainLog]:
    """Train one arm; the coalition coefficients actually used are logged after warm-up.

    ``model``/``forward(idx) -> logits`` replace the default MLP on ``X`` (fine-tuning a text
    encoder); ``group`` shards every batch over processes: the coalition loss sums (and the
    gradients) are all-reduced *before* the bargaining weights, so every process computes the same
    weights and the run equals the one-process run on the same batches. ``device`` holds the
    default MLP and its inputs; the losses and the bargaining stay on the CPU. With ``dev`` =
    (X_dev, Y_dev), dev macro-F1 (at its best decision threshold) is measured after every epoch,
    training stops after ``patience`` epochs without improvement (``icml26_shared.train.
    EarlyStopping``) and the best-dev epoch's weights are returned; the curves go to ``log.curve``."""
    group = group or Local()
    torch.manual_seed(seed)
    Yt = torch.as_tensor(Y, dtype=torch.float32)
    if model is None:
        Xt = torch.as_tensor(X, dtype=torch.float32).to(device)
        model = CoalitionMLP(Xt.shape[1], cfg.hidden, coalitions, Yt.shape[1], masked=arm.masks).to(device)
        forward = lambda idx: model(Xt[idx.to(device)]).cpu()  # noqa: E731
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
    if arm.loss not in LOSSES:
        raise ValueError(f"arm loss {arm.loss!r} is not a registered loss (choose it first: nbcg.tuning)")
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
    stopper = EarlyStopping(patience=patience, mode="max") if dev is not None else None
    best_state = None
    curve: dict = {"epoch": [], "train_loss": [], "dev_macro_f1": []}
    for epoch in range(cfg.epochs):
        loss_sum, n_batches = 0.0, 0
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
            else:  # nash-mtl: the published step (Navon et al. 2022; LibMTL): unnormalised α from
                # (GᵀG)α = 1/α over the coalition gradients of the shared encoder, so ‖Gα‖ = √K,
                # then the shared gradient is clipped at max-norm 1 (below)
                solved = step % cfg.nash_mtl_every == 0
                if solved:
                    G = group.sum(coalition_grads(Lk, shared)).numpy()   # K×P, all-reduced
                    alpha = nash_mtl_alpha(G.T.astype(np.float64))
                coef = torch.as_tensor(alpha, dtype=torch.float32)
            loss = (coef * Lk).sum()
            opt.zero_grad()
            loss.backward()
            if group.world > 1:
                for p in flat:
                    if p.grad is not None:
                        p.grad = group.sum(p.grad)
            if arm.weighting == "nash-mtl" and not warm:
                norm = float(torch.nn.utils.clip_grad_norm_(shared, NASH_MTL_MAX_NORM))
                if solved:
                    log.mtl_norm.append(norm)
                    log.mtl_clipped.append(float(torch.linalg.vector_norm(
                        torch.cat([p.grad.reshape(-1) for p in shared if p.grad is not None]))))
            opt.step()
            loss_sum, n_batches = loss_sum + float(loss.detach()) / float(coef.sum()), n_batches + 1
            if not warm:
                log.weights.append((coef / coef.sum()).numpy().copy())
            step += 1
        if warm and epoch == cfg.warmup_epochs - 1 and arm.weighting == "nash":
            bargain.set_reference((warm_sum / max(warm_n, 1)).numpy())
        curve["epoch"].append(epoch + 1)
        curve["train_loss"].append(loss_sum / max(n_batches, 1))
        if stopper is not None:
            f = float(macro_f1_at(predict_scores(model, dev[0]), dev[1], THRESHOLD_GRID).max())
            curve["dev_macro_f1"].append(f)
            stop = stopper.step(f, at=epoch + 1)
            if stopper.improved:
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if stop:
                break
    if stopper is not None and best_state is not None:
        model.load_state_dict(best_state)        # the best-dev epoch, not the last
        curve["best_epoch"], curve["stopped_at"] = int(stopper.best_at), stopper.stopped_at
    log.curve = curve
    log.final_coef = (log.weights[-1] if log.weights else (sizes / L).numpy())
    return model, log


def predict_scores(model: CoalitionMLP, X: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    dev = next(model.parameters()).device
    X = np.asarray(X, dtype=np.float32)
    with torch.no_grad():
        out = [torch.sigmoid(model(torch.as_tensor(X[s:s + batch_size]).to(dev))).cpu().numpy()
               for s in range(0, len(X), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, model.head.out_features), np.float32)


def gradient_shares(model: CoalitionMLP, X: np.ndarray, Y: np.ndarray, coalitions: list[list[int]],
                    coef: np.ndarray) -> np.ndarray:
    """Each coalition's share of the shared-encoder gradient norm under the arm's coefficients."""
    from .baselines import bce

    Xt, Yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(Y, dtype=torch.float32)
    Lk = coalition_losses(bce(model(Xt), Yt, Yt.sum(0)), coalitions)
    G = coalition_grads(Lk * torch.as_tensor(np.asarray(coef), dtype=Lk.dtype), model.shared_params())
    norms = torch.linalg.vector_norm(G, dim=1).detach().numpy().astype(np.float64)
    return norms / max(norms.sum(), 1e-12)


THRESHOLD_GRID = np.round(np.concatenate([[0.01, 0.02, 0.03], np.linspace(0.05, 0.7, 14), [0.8, 0.9]]), 3)


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


THRESHOLD_MODES = ("global", "per-label", "top-k")
TOP_K_MAX = 10


def fit_decision(S: np.ndarray, Y: np.ndarray, mode: str) -> dict:
    """The decision rule of ``mode``, fitted on (dev scores, dev labels) by macro-F1 [R]:
    ``global`` one threshold of ``THRESHOLD_GRID``; ``per-label`` each label's own threshold of the
    grid by its F1 (a label without a dev positive keeps the global one); ``top-k`` the k in
    1…``TOP_K_MAX`` (or L) of the best macro-F1."""
    S, Y = np.asarray(S, np.float64), np.asarray(Y) > 0
    t = choose_threshold(S, Y)
    if mode == "global":
        return {"mode": "global", "threshold": t}
    if mode == "per-label":
        P = S[None] >= THRESHOLD_GRID[:, None, None]                    # T×n×L
        tp = (P & Y[None]).sum(1)
        denom = P.sum(1) + Y.sum(0)[None]
        f1 = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)   # T×L
        ts = THRESHOLD_GRID[np.argmax(f1, 0)].astype(float)
        ts[Y.sum(0) == 0] = t
        return {"mode": "per-label", "thresholds": [float(x) for x in ts], "threshold": t}
    if mode == "top-k":
        ks = range(1, min(TOP_K_MAX, S.shape[1]) + 1)
        f = [_macro_f1(apply_decision(S, {"mode": "top-k", "k": k}), Y) for k in ks]
        return {"mode": "top-k", "k": int(list(ks)[int(np.argmax(f))]), "threshold": t}
    raise ValueError(f"unknown threshold mode {mode!r} (known: {', '.join(THRESHOLD_MODES)}, auto)")


def apply_decision(S: np.ndarray, decision: dict) -> np.ndarray:
    """0/1 predictions of the rule ``fit_decision`` returned."""
    S = np.asarray(S)
    if decision["mode"] == "top-k":
        k = min(int(decision["k"]), S.shape[1])
        P = np.zeros(S.shape, dtype=int)
        if k > 0 and len(S):
            np.put_along_axis(P, np.argsort(-S, axis=1, kind="stable")[:, :k], 1, axis=1)
        return P
    t = np.asarray(decision["thresholds"]) if decision["mode"] == "per-label" else decision["threshold"]
    return (S >= t).astype(int)


def _macro_f1(P: np.ndarray, Y: np.ndarray) -> float:
    Yb, Pb = np.asarray(Y) > 0, np.asarray(P) > 0
    tp = (Pb & Yb).sum(0)
    denom = Pb.sum(0) + Yb.sum(0)
    return float(np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0).mean())


def choose_decision(S: np.ndarray, Y: np.ndarray, mode: str = "auto", seed: int = 0) -> dict:
    """``mode`` in ``THRESHOLD_MODES``: that rule fitted on all of dev. ``auto``: the rule whose
    dev macro-F1 is best under 2-fold cross-fitting on dev (fit on one half, score on the other,
    both ways; ties: the simpler rule, global < top-k < per-label), so per-label thresholds are
    not preferred merely for fitting dev; then refitted on all of dev. ``cv`` (the cross-fitted
    scores) and ``chosen_by`` are recorded."""
    if mode != "auto":
        out = fit_decision(S, Y, mode)
        out["chosen_by"] = "given"
        return out
    S, Y = np.asarray(S), np.asarray(Y)
    n = len(S)
    if n < 4:
        out = fit_decision(S, Y, "global")
        out["chosen_by"] = "default (dev too small to cross-fit)"
        return out
    perm = np.random.default_rng(seed).permutation(n)
    halves = (perm[: n // 2], perm[n // 2:])
    cv = {}
    for m in ("global", "top-k", "per-label"):
        cv[m] = float(np.mean([_macro_f1(apply_decision(S[b], fit_decision(S[a], Y[a], m)), Y[b])
                               for a, b in (halves, halves[::-1])]))
    best = max(cv, key=lambda m: cv[m])     # first maximum: the simpler rule on ties
    out = fit_decision(S, Y, best)
    out["chosen_by"] = "2-fold cross-fitted dev macro-F1"
    out["cv"] = {m: round(v, 4) for m, v in cv.items()}
    return out
