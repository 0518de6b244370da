"""The evaluations: PSNR / SSIM / MSE of autoregressive rollouts (scikit-image metrics) beside
copying the previous frame, the Hungarian-matched factor-entity correspondence of logistic probes,
and rendering a (possibly edited) rollout."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from .core import WorldModel, chance


def frame_metrics(pred: np.ndarray, true: np.ndarray, ssim: bool = True) -> dict[str, float]:
    """Mean PSNR (dB), SSIM (NaN with ``ssim=False``) and MSE over frames ``[M, H, W, 3]`` in [0, 1]
    (scikit-image)."""
    from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity

    p, s, m = [], [], []
    for a, b in zip(pred.astype(np.float64), true.astype(np.float64), strict=True):
        mse = mean_squared_error(b, a)
        p.append(100.0 if mse < 1e-10 else peak_signal_noise_ratio(b, a, data_range=1.0))  # capped when exact
        s.append(structural_similarity(b, a, data_range=1.0, channel_axis=-1, win_size=7) if ssim else np.nan)
        m.append(mse)
    return {"psnr": float(np.mean(p)), "ssim": float(np.mean(s)), "mse": float(np.mean(m)), "psnr_each": p}


@torch.no_grad()
def rollout_metrics(model: WorldModel, video: np.ndarray, horizon: int, per_clip: bool = False,
                    z: torch.Tensor | None = None, ssim: bool = True) -> dict:
    """PSNR / SSIM / MSE at 1 and ``horizon`` autoregressive steps (latents inferred from the true
    frames, posterior means) beside the copy-previous-frame baseline (frame 0 held); keys
    ``psnr_1, psnr_h, ssim_1, …, copy_1, copy_h`` (copy = PSNR), ``copy_ssim_*`` and ``horizon``;
    with ``per_clip``, ``psnr_clips_*`` / ``copy_clips_*``: each clip's PSNR at that step (their mean is ``psnr_*``), the
    units of the clustered intervals (issue 57 item 6). ``z``: the clips' tokens when already encoded;
    ``ssim=False`` skips SSIM (NaN), cheap enough for a learning-curve point."""
    h = min(horizon, video.shape[1] - 1)
    z = model.tokenize(video[:, :h + 1]) if z is None else z[:, :h + 1]
    pred = model.detokenize(model.rollout(z)).numpy()
    true = video[:, 1:h + 1].astype(np.float32) / 255.0
    first = np.broadcast_to(video[:, :1].astype(np.float32) / 255.0, true.shape)
    out: dict[str, float] = {"horizon": h}
    for step in sorted({1, h}):
        m = frame_metrics(pred[:, step - 1], true[:, step - 1], ssim)
        c = frame_metrics(first[:, step - 1], true[:, step - 1], ssim)
        out.update({f"psnr_{step}": m["psnr"], f"ssim_{step}": m["ssim"], f"mse_{step}": m["mse"],
                    f"copy_{step}": c["psnr"], f"copy_ssim_{step}": c["ssim"], f"copy_mse_{step}": c["mse"]})
        if per_clip:
            out.update({f"psnr_clips_{step}": m["psnr_each"], f"copy_clips_{step}": c["psnr_each"]})
    return out


@torch.no_grad()
def latent_use_gap(model: WorldModel, z: torch.Tensor, seed: int = 0, relative: bool = False) -> float:
    """Does the FDM use the latents? The one-step prediction error over tokens ``z [B, T, N, C]`` (posterior
    means) with each latent slot's latents shuffled across the clips' transitions (one fixed permutation per
    slot, drawn from ``seed``) minus the error with its own latents: about 0 when the latents are ignored,
    > 0 when they carry the transition. ``relative``: that difference over the shuffled error (1 - own /
    shuffled), the share of the error the latents remove, comparable across models and data. Reads frames
    only (issue 57 items 5, 6) [R]."""
    s = model.slots(z)
    a = model.infer(s)[0]
    b, t, k, d = a.shape
    flat = a.reshape(b * t, k, d)
    g = torch.Generator().manual_seed(seed)
    shuf = torch.stack([flat[torch.randperm(b * t, generator=g), i] for i in range(k)], 1).reshape(a.shape)
    own = float(model.unrolled_errors(s, a, z, 1)[0])
    other = float(model.unrolled_errors(s, shuf, z, 1)[0])
    if relative:
        return 1.0 - own / other if other > 0 else 0.0
    return other - own


@torch.no_grad()
def slot_recon_error(model: WorldModel, video: np.ndarray) -> float:
    """How much of frame 0 the slots encode: ||z_0 - Agg(s_0)||^2 over the tokens' total variance
    (1.0: the slots / the monolithic latent carry nothing, the aggregator outputs the mean token;
    0.0: exact). The binding diagnostic of issue 21 [R]."""
    z = model.tokenize(video[:, :1])
    err = (z[:, 0] - model.agg(model.slots(z)[:, 0])).pow(2).sum(-1).mean()
    var = z[:, 0].reshape(-1, z.shape[-1]).var(0).sum().clamp_min(1e-12)
    return float(err / var)


@torch.no_grad()
def mask_ari(model: WorldModel, video: np.ndarray, labels: np.ndarray) -> float:
    """Do the slots segment the entities? The foreground adjusted Rand index (scikit-learn) between
    Slot Attention's assignment (each token's most-attending slot) and the true entity ``labels
    [N, T, tokens]`` (-1 = background, not scored), averaged over frames with two or more visible
    entities: 1 = every entity in its own slot, 0 = no better than chance (e.g. one slot holds them
    all). Needs one token per sprite cell (``sprites.entity_labels``) [R]."""
    from sklearn.metrics import adjusted_rand_score

    z = model.tokenize(video)
    assign = model.factorizer.encode(z)[1].argmax(-1).reshape(-1, z.shape[-2]).numpy()
    lab = labels.reshape(-1, labels.shape[-1])
    if lab.shape[-1] != assign.shape[-1]:
        raise ValueError(f"{lab.shape[-1]} labelled cells for {assign.shape[-1]} tokens")
    scores = [adjusted_rand_score(lab[i][lab[i] >= 0], assign[i][lab[i] >= 0]) for i in range(len(lab))
              if len(np.unique(lab[i][lab[i] >= 0])) >= 2]
    return float(np.mean(scores)) if scores else float("nan")


@torch.no_grad()
def latents(model: WorldModel, video: np.ndarray) -> np.ndarray:
    """Posterior means ``[N*(T-1), K, d/K]`` of every transition of ``video``."""
    z = model.tokenize(video)
    mu, _ = model.infer(model.slots(z))
    return mu.reshape(-1, *mu.shape[2:]).numpy()


def _probe_hits(x_fit: np.ndarray, y_fit: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray, c: float) -> np.ndarray:
    """Per held-out sample, whether one standardised logistic-regression probe ``x -> y`` (scikit-learn)
    fit on ``*_fit`` predicts ``y_eval`` (bool ``[M]``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    if len(np.unique(y_fit)) < 2:
        return y_eval == y_fit[0]
    scaler = StandardScaler().fit(x_fit)
    clf = LogisticRegression(C=c, max_iter=200, tol=1e-3).fit(scaler.transform(x_fit), y_fit)
    return clf.predict(scaler.transform(x_eval)) == y_eval


def _probe(x_fit: np.ndarray, y_fit: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray, c: float) -> float:
    """Held-out accuracy of one standardised logistic-regression probe ``x -> y``."""
    return float(np.mean(_probe_hits(x_fit, y_fit, x_eval, y_eval, c)))


def probe_matrix(lat_fit: np.ndarray, act_fit: np.ndarray, lat_eval: np.ndarray, act_eval: np.ndarray,
                 c: float = 1.0) -> np.ndarray:
    """``A[k, e]``: held-out accuracy of a logistic-regression probe from factor k's latent
    ``[M, K, d]`` to entity e's action ``[M, E]`` (fit on ``*_fit``, scored on ``*_eval``)."""
    k, e = lat_fit.shape[1], act_fit.shape[1]
    out = np.zeros((k, e))
    for i in range(k):
        for j in range(e):
            out[i, j] = _probe(lat_fit[:, i], act_fit[:, j], lat_eval[:, i], act_eval[:, j], c)
    return out


@torch.no_grad()
def slot_masks(model: WorldModel, video: np.ndarray) -> np.ndarray:
    """Slot Attention's assignment ``[N, T, tokens, K]`` of every frame of ``video`` (softmax over the
    slots); the monolithic models' one 'slot' holds every token."""
    z = model.tokenize(video)
    if model.cfg.latent_slots == 1:  # lam / flam-one-latent: one latent, which every entity reads
        return np.ones((*z.shape[:3], 1), np.float32)
    return model.factorizer.encode(z)[1].numpy()


@torch.no_grad()
def slot_positions(model: WorldModel, video: np.ndarray) -> np.ndarray | None:
    """Each slot's position at the first frame of every transition, ``[N*(T-1), K, 2]`` (token units; the
    same rows as ``latents``), or None for a model whose slots carry no position (the monolithic models,
    flam-one-latent's one latent, ``slot_pos=False``)."""
    if model.cfg.model != "flam" or not model.cfg.slot_pos or model.cfg.latent_slots == 1:
        return None
    s = model.slots(model.tokenize(video))[:, :-1, :, -2:]
    return s.reshape(-1, *s.shape[2:]).numpy()


def slot_owners(masks: np.ndarray, labels: np.ndarray, entities: int) -> np.ndarray:
    """Which slot holds each entity, per clip: ``[N, E]`` slot indices. ``masks [N, T, tokens, K]``
    (``slot_masks``), ``labels [N, T, tokens]`` (entity per token, -1 = none; ``sprites.entity_labels``).
    Per clip, the overlap O[k, e] = the mass slot k's mask puts on entity e's cells over the clip's frames,
    and entities are Hungarian-matched to slots maximising it (scipy), one slot per entity; with fewer
    slots than entities (the monolithic models' one latent) each entity takes its largest-overlap slot [R]."""
    if masks.shape[:3] != labels.shape:
        raise ValueError(f"masks {masks.shape[:3]} and labels {labels.shape} cover different tokens")
    onehot = labels[..., None] == np.arange(entities)                          # [N, T, tokens, E]
    overlap = np.einsum("ntsk,ntse->nke", masks.astype(np.float64), onehot)    # [N, K, E]
    k = masks.shape[-1]
    if k < entities:
        return overlap.argmax(1)
    owners = np.zeros((len(masks), entities), np.int64)
    for i, o in enumerate(overlap):
        rows, cols = linear_sum_assignment(-o)
        owners[i, cols] = rows
    return owners


def matched_latents(lat: np.ndarray, owners: np.ndarray) -> np.ndarray:
    """``lat [N, T-1, K, d]`` -> ``[N*(T-1), E, d]``: entity e's column is its clip's owning slot's latent."""
    n, t = lat.shape[:2]
    idx = np.broadcast_to(owners[:, None, :, None], (n, t, owners.shape[1], lat.shape[-1]))
    return np.take_along_axis(lat, idx, 2).reshape(n * t, owners.shape[1], lat.shape[-1])


def matched_hits(lat_fit: np.ndarray, act_fit: np.ndarray, lat_eval: np.ndarray, act_eval: np.ndarray,
                 c: float = 1.0) -> np.ndarray:
    """``[M, E]`` bool: whether entity e's probe, reading its matched slot (``matched_latents``: ``[M, E, d]``),
    gets its action ``[M, E]`` right on each held-out transition."""
    return np.stack([_probe_hits(lat_fit[:, j], act_fit[:, j], lat_eval[:, j], act_eval[:, j], c)
                     for j in range(act_fit.shape[1])], 1)


def matched_accuracy(lat_fit: np.ndarray, act_fit: np.ndarray, lat_eval: np.ndarray, act_eval: np.ndarray,
                     c: float = 1.0) -> np.ndarray:
    """``[E]``: held-out accuracy of entity e's probe reading its matched slot; the mean is the matched
    correspondence (issue 57) [R]."""
    return matched_hits(lat_fit, act_fit, lat_eval, act_eval, c).mean(0)


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
    z = model.tokenize(clip[None])
    mu, _ = model.infer(model.slots(z))
    if edit_slot is not None:
        mu[:, :, edit_slot] = torch.as_tensor(action, dtype=mu.dtype)
    pred = model.detokenize(model.rollout(z, mu))[0]
    frames = (pred.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return np.concatenate([clip[:1], frames])
