"""One training loop for every model (Adam on the FLAM loss), and the evaluations: PSNR of
autoregressive rollouts beside copying the previous frame, and factor-entity correspondence."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from .config import ModelConfig, TrainConfig
from .core import WorldModel, chance, detokenize, psnr, tokenize


def train(model_cfg: ModelConfig, train_cfg: TrainConfig, video: np.ndarray,
          model: WorldModel | None = None, start: int = 0, on_step=None, device: str = "cpu") -> WorldModel:
    """Train on random ``window``-frame crops of ``video [N, T, H, W, 3]`` uint8 for ``steps``."""
    torch.manual_seed(train_cfg.seed)
    model = (model or WorldModel(model_cfg)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=train_cfg.lr)
    gen = torch.Generator(device=device).manual_seed(train_cfg.seed + 1)
    rng = np.random.default_rng(train_cfg.seed)
    z_all = tokenize(torch.from_numpy(video), model_cfg.patch).to(device)
    n, t = z_all.shape[:2]
    w = min(train_cfg.window, t)
    model.train()
    for step in range(start, train_cfg.steps):
        idx = rng.integers(0, n, train_cfg.batch_size)
        off = rng.integers(0, t - w + 1)
        loss, info = model.loss(z_all[torch.as_tensor(idx, device=device), off:off + w], gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if on_step is not None:
            on_step(step + 1, model, info)
    model.eval()
    return model.cpu()


@torch.no_grad()
def rollout_psnr(model: WorldModel, video: np.ndarray, horizon: int) -> dict[str, float]:
    """Mean PSNR (dB) at 1 and ``horizon`` autoregressive steps, latents inferred from the true
    frames, beside the copy-previous-frame baseline (frame 0 held)."""
    cfg = model.cfg
    h = min(horizon, video.shape[1] - 1)
    z = tokenize(torch.from_numpy(video[:, :h + 1]), cfg.patch)
    pred = detokenize(model.rollout(z), cfg.size, cfg.patch)
    true = torch.from_numpy(video[:, 1:h + 1]).float() / 255.0
    first = torch.from_numpy(video[:, :1]).float() / 255.0
    p, c = psnr(pred, true), psnr(first.expand_as(true), true)
    return {"psnr_1": float(p[:, 0].mean()), f"psnr_{h}": float(p[:, h - 1].mean()),
            "copy_1": float(c[:, 0].mean()), f"copy_{h}": float(c[:, h - 1].mean()),
            "horizon": h}


@torch.no_grad()
def latents(model: WorldModel, video: np.ndarray) -> np.ndarray:
    """Posterior means ``[N*(T-1), K, d/K]`` of every transition of ``video``."""
    z = tokenize(torch.from_numpy(video), model.cfg.patch)
    mu, _ = model.infer(model.slots(z))
    return mu.reshape(-1, *mu.shape[2:]).numpy()


def probe_matrix(lat_fit: np.ndarray, act_fit: np.ndarray, lat_eval: np.ndarray, act_eval: np.ndarray,
                 c: float = 1.0) -> np.ndarray:
    """``A[k, e]``: held-out accuracy of a logistic-regression probe from factor k's latent
    ``[M, K, d]`` to entity e's action ``[M, E]`` (fit on ``*_fit``, scored on ``*_eval``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    k, e = lat_fit.shape[1], act_fit.shape[1]
    out = np.zeros((k, e))
    for i in range(k):
        scaler = StandardScaler().fit(lat_fit[:, i])
        xf, xe = scaler.transform(lat_fit[:, i]), scaler.transform(lat_eval[:, i])
        for j in range(e):
            if len(np.unique(act_fit[:, j])) < 2:
                out[i, j] = float(np.mean(act_eval[:, j] == act_fit[0, j]))
                continue
            clf = LogisticRegression(C=c, max_iter=200, tol=1e-3).fit(xf, act_fit[:, j])
            out[i, j] = clf.score(xe, act_eval[:, j])
    return out


def correspondence(acc: np.ndarray, chance_acc: np.ndarray | None = None) -> tuple[float, list[int]]:
    """Factor-entity correspondence [R]: Hungarian matching of factors to entities (each factor
    explains at most one entity) maximising probe accuracy; the mean matched accuracy over
    entities, an entity left unmatched (fewer factors than entities) scoring chance.
    Returns (score, factor index per entity, -1 when unmatched)."""
    k, e = acc.shape
    rows, cols = linear_sum_assignment(-acc)
    match = [-1] * e
    for r, cl in zip(rows, cols, strict=True):
        match[cl] = int(r)
    base = np.zeros(e) if chance_acc is None else np.asarray(chance_acc, float)
    scores = [acc[match[j], j] if match[j] >= 0 else base[j] for j in range(e)]
    return float(np.mean(scores)), match


def chance_per_entity(actions: np.ndarray) -> np.ndarray:
    return np.array([chance(actions[:, j]) for j in range(actions.shape[1])])


@torch.no_grad()
def render_rollout(model: WorldModel, clip: np.ndarray, edit_slot: int | None = None,
                   action: np.ndarray | None = None) -> np.ndarray:
    """``[T, size, size, 3]`` uint8: frame 0 of ``clip`` then the model's autoregressive rollout
    with the latent actions inferred from the true frames (posterior means); with ``edit_slot``,
    that slot's latent action is replaced by ``action`` (size d/K) at every step, the others kept."""
    cfg = model.cfg
    z = tokenize(torch.from_numpy(clip[None]), cfg.patch)
    mu, _ = model.infer(model.slots(z))
    if edit_slot is not None:
        mu[:, :, edit_slot] = torch.as_tensor(action, dtype=mu.dtype)
    pred = detokenize(model.rollout(z, mu), cfg.size, cfg.patch)[0]
    frames = (pred.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return np.concatenate([clip[:1], frames])
