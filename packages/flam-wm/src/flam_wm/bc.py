"""Pseudo-label behaviour cloning [P §policy learning; protocol R]: a latent -> action decoder
(scikit-learn LogisticRegression) is fit on a small labelled fraction of the training transitions,
pseudo-labels every training transition, and a policy is cloned from the frames and those labels;
success is reaching the target in SpriteWorld's reach-target task (``--controlled`` data), beside
the same policy cloned from the true actions."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .sprites import MOVES, identifiable_step, render, step_positions

DECODER_C = (0.1, 1.0, 10.0)
RESTARTS = 3  # BC policy initialisations, the best fit kept [R]
MAX_RESTARTS = 10  # more starts, only while every start so far sits on the keypoint plateau [R]
PLATEAU = 0.8  # a start has left the plateau when its fit cross-entropy is below PLATEAU x the labels' entropy [R]


CV_FOLDS = 5  # folds of the labelled transitions that choose the decoder's input and C [R]


def fit_decoder(lat_fit: np.ndarray, act_fit: np.ndarray, grid=DECODER_C, folds: int = CV_FOLDS):
    """LogisticRegression from the standardised latent ``[M, K, d/K]`` to the controlled sprite's action,
    fit on the labelled transitions only; its input -- every factor's latent concatenated or, when K > 1,
    one factor's alone -- and its C are chosen together by ``folds``-fold cross-validation inside those
    same labelled transitions (scikit-learn; shuffled folds, seed 0; a fold whose training part holds one
    action scores 0 for every candidate; ties keep the earlier candidate: all factors, then the smaller C)
    [R: one slot's d/K values need few labels; no other label is read]. Returns ``(predict(latents) -> actions, C, CV accuracy, factor used: -1 = all)``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labels = np.unique(act_fit)
    if len(labels) < 2:  # a single labelled action: the decoder can only say that one
        return (lambda lat: np.full(len(lat), labels[0])), grid[0], 1.0, -1
    views = [-1] + (list(range(lat_fit.shape[1])) if lat_fit.ndim == 3 and lat_fit.shape[1] > 1 else [])

    def x(lat, k):
        return (lat if k < 0 else lat[:, k:k + 1]).reshape(len(lat), -1)

    def make(c):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=500))

    cv = KFold(min(folds, len(act_fit)), shuffle=True, random_state=0)
    best = None
    for k in views:
        for c in grid:
            acc = float(np.mean(cross_val_score(make(c), x(lat_fit, k), act_fit, cv=cv, error_score=0.0)))
            if best is None or acc > best[1]:
                best = (c, acc, k)
    c, acc, k = best
    clf = make(c).fit(x(lat_fit, k), act_fit)
    return (lambda lat: clf.predict(x(lat, k))), c, acc, k


class Policy(nn.Module):
    """The cloned policy [R]: 4x4 average pooling of the frame (one value per sprite cell and
    channel), 1x1 convolutions to a few keypoint maps, a spatial soft-argmax to their (row, col)
    (the visuomotor-policy keypoint layer of Levine et al. 2016), then an MLP to the five actions.
    ``temperature`` scales the keypoint logits before the softmax (Levine et al. learn it) [R: 4,
    chosen on dev -- at 1 the soft-argmax starts near-uniform over the 64 cells, every
    keypoint near the centre, and cloning from noisy labels often never leaves that plateau]."""

    def __init__(self, size: int, keypoints: int = 4, hidden: int = 64, temperature: float = 4.0):
        super().__init__()
        self.temperature = temperature
        self.features = nn.Sequential(nn.AvgPool2d(4), nn.Conv2d(3, 16, 1), nn.ReLU(), nn.Conv2d(16, keypoints, 1))
        g = torch.arange(size // 4, dtype=torch.float32) / max(size // 4 - 1, 1)
        self.register_buffer("coords", torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2))
        self.head = nn.Sequential(nn.Linear(2 * keypoints, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, len(MOVES)))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:  # [B, H, W, 3] uint8 -> logits [B, 5]
        return self.from_pooled(self.pool(frames))

    @staticmethod
    def pool(frames: torch.Tensor) -> torch.Tensor:
        """The parameter-free first layer (``features[0]``): ``[B, H, W, 3]`` uint8 -> 4x4-pooled
        ``[B, 3, H/4, W/4]`` floats; needs no policy, so ``clone`` pools every frame once."""
        return nn.functional.avg_pool2d(frames.permute(0, 3, 1, 2).float() / 255.0, 4)

    def from_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """The trained layers on ``pool``'s output: logits ``[B, 5]``."""
        maps = self.features[1:](pooled).flatten(2) * self.temperature                # [B, kp, cells]
        xy = torch.softmax(maps, -1) @ self.coords                                   # [B, keypoints, 2]
        return self.head(xy.flatten(1))

    @torch.no_grad()
    def act(self, frames: np.ndarray) -> np.ndarray:
        return self(torch.from_numpy(frames)).argmax(-1).numpy()


def clone(frames: np.ndarray, actions: np.ndarray, size: int, steps: int = 400, batch: int = 64,
          seed: int = 0, restarts: int = RESTARTS, max_restarts: int = MAX_RESTARTS) -> Policy:
    """Behaviour cloning: cross-entropy of ``Policy(frames [M, H, W, 3])`` against ``actions [M]``,
    Adam from ``restarts`` initialisations; the policy with the lowest cross-entropy on its own
    training labels is kept [R]. (A start can sit on the keypoints' plateau -- near-uniform soft-argmax,
    the policy fits its labels at chance --, so success would measure the optimiser's luck rather than
    the labels: docs/experiments.md.) While the best fit cross-entropy is not below ``PLATEAU`` x the
    labels' entropy (the plateau's fit is the entropy itself), further starts are made, up to
    ``max_restarts``; the lowest cross-entropy is kept."""
    x, y = torch.from_numpy(np.ascontiguousarray(frames)), torch.as_tensor(actions, dtype=torch.long)
    with torch.no_grad():  # the pooling has no parameters: every frame pooled once, not at every step
        x = torch.cat([Policy.pool(x[i:i + 4096]) for i in range(0, len(x), 4096)])
    entropy = label_entropy(actions)
    best, r = None, 0
    while keep_starting(r, None if best is None else best[0], entropy, restarts, max_restarts):
        pol = fit_start(x, y, size, seed + 7919 * r, steps, batch)
        fit = _fit_loss(pol, x, y)
        if best is None or fit < best[0]:
            best = (fit, pol)
        r += 1
    return best[1]


def keep_starting(made: int, best_fit: float | None, entropy: float, restarts: int = RESTARTS,
                  max_restarts: int = MAX_RESTARTS) -> bool:
    """``clone``'s rule: after ``made`` starts whose lowest fit cross-entropy is ``best_fit``,
    make another one? Always below ``restarts``; then, up to ``max_restarts``, while that fit is not
    below ``PLATEAU`` x the labels' ``entropy`` (every start so far on the keypoint plateau)."""
    return made < restarts or (made < max_restarts and best_fit >= PLATEAU * entropy and entropy > 0)


def label_entropy(actions: np.ndarray) -> float:
    """Entropy (nats) of the labels' frequencies: the fit cross-entropy of a policy that ignores the frame."""
    p = np.bincount(np.asarray(actions, dtype=np.int64)) / max(len(actions), 1)
    return float(-(p[p > 0] * np.log(p[p > 0])).sum())


def fit_start(x: torch.Tensor, y: torch.Tensor, size: int, seed: int, steps: int = 400,
              batch: int = 64) -> Policy:
    """One Adam start of ``clone`` on pooled frames ``x`` and labels ``y``; the policy in eval mode."""
    torch.manual_seed(seed)
    pol = Policy(size)
    opt = torch.optim.Adam(pol.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        idx = torch.as_tensor(rng.integers(0, len(x), batch))
        loss = nn.functional.cross_entropy(pol.from_pooled(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return pol.eval()


@torch.no_grad()
def _fit_loss(pol: Policy, x: torch.Tensor, y: torch.Tensor, chunk: int = 4096) -> float:
    """Mean cross-entropy of ``pol`` on all its training frames (pooled) / labels."""
    total = sum(nn.functional.cross_entropy(pol.from_pooled(x[i:i + chunk]), y[i:i + chunk], reduction="sum").item()
                for i in range(0, len(x), chunk))
    return total / max(len(x), 1)


def reach_target_success(policy, entities: int, size: int = 32, episodes: int = 200, horizon: int | None = None,
                         seed: int = 12345, cell: int = 4, identifiable: bool = False, per_episode: bool = False):
    """Fraction of episodes in which sprite 0, driven by ``policy(frames [B, H, W, 3]) -> actions``,
    reaches its target (the white dot) within ``horizon`` steps (default 2 x grid); the other
    sprites act at random, as in ``generate(..., controlled=True)`` (``identifiable``: its
    ``identifiable=True`` dynamics, sprites starting on distinct cells). ``per_episode``: each episode's
    success (0 / 1) instead of their mean -- the units of the clustered intervals (issue 57 item 6)."""
    grid = size // cell
    horizon = 2 * grid if horizon is None else horizon
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, grid, size=(episodes, entities, 2))
    if identifiable:
        cells = np.stack([rng.choice(grid * grid, entities, replace=False) for _ in range(episodes)])
        pos = np.stack([cells // grid, cells % grid], -1)
    target = rng.integers(0, grid, size=(episodes, 2))
    same = np.all(target == pos[:, 0], -1)
    target[same] = (target[same] + np.array([1, 0])) % grid   # never start on the target
    done = np.zeros(episodes, bool)
    for _ in range(horizon):
        frames = np.stack([render(p, size, cell, _target_bg(t, size, cell)) for p, t in zip(pos, target, strict=True)])
        acts = rng.integers(0, len(MOVES), size=(episodes, entities))
        acts[:, 0] = np.asarray(policy(frames))
        if identifiable:
            pos = np.stack([identifiable_step(p, a, grid, rng, fixed=1)[0] for p, a in zip(pos, acts, strict=True)])
        else:
            pos = np.stack([step_positions(p, a, grid) for p, a in zip(pos, acts, strict=True)])
        done |= np.all(pos[:, 0] == target, -1)
    return done.astype(float) if per_episode else float(done.mean())


def _target_bg(target: np.ndarray, size: int, cell: int) -> np.ndarray:
    bg = np.zeros((size, size, 3), np.uint8)
    r, c = np.asarray(target) * cell + cell // 2
    bg[r - 1:r + 1, c - 1:c + 1] = 255
    return bg


def pseudo_label_bc(lat: dict, act: dict, frames: dict, labels: float, entities: int, size: int,
                    seed: int = 0, bc_steps: int = 400, episodes: int = 200, decoder_c=DECODER_C,
                    identifiable: bool = False) -> dict:
    """The whole protocol on one model's latents. ``lat / act / frames``: dicts over
    ``train / test`` (dev is not read) of transition latents ``[M, K, d/K]``, the controlled sprite's
    true actions ``[M]`` and the frames the actions were taken in ``[M, H, W, 3]``. A fraction ``labels``
    of the train transitions (at least 5) is labelled; the decoder's input and C are chosen by
    cross-validation inside them (``fit_decoder``); test's actions only score the pseudo-labels."""
    rng = np.random.default_rng(seed)
    m = len(act["train"])
    n_lab = min(m, max(5, int(round(labels * m))))
    lab = rng.choice(m, n_lab, replace=False)
    decode, c, cv_acc, view = fit_decoder(lat["train"][lab], act["train"][lab], decoder_c)
    pseudo = decode(lat["train"])
    pol = clone(frames["train"], pseudo, size, steps=bc_steps, seed=seed)
    eps = reach_target_success(pol.act, entities, size, episodes=episodes, seed=10_000 + seed,
                               identifiable=identifiable, per_episode=True)
    return {"labelled": int(n_lab), "decoder_c": c, "decoder_factor": view, "decoder_cv_acc": cv_acc,
            "pseudo_test_acc": float(np.mean(decode(lat["test"]) == act["test"])),
            "success": float(eps.mean()), "success_episodes": eps.tolist()}


def true_action_bc(act: dict, frames: dict, entities: int, size: int, seed: int = 0, bc_steps: int = 400,
                   episodes: int = 200, identifiable: bool = False, per_episode: bool = False):
    """Reach-target success of the policy cloned from every training transition's true action (the same
    episodes as ``pseudo_label_bc``'s at the same seed; ``per_episode``: each episode's 0 / 1)."""
    pol = clone(frames["train"], act["train"], size, steps=bc_steps, seed=seed)
    return reach_target_success(pol.act, entities, size, episodes=episodes, seed=10_000 + seed,
                                identifiable=identifiable, per_episode=per_episode)


def random_policy_success(entities: int, size: int, seed: int = 0, episodes: int = 200,
                          identifiable: bool = False) -> float:
    rng = np.random.default_rng(seed)
    return reach_target_success(lambda f: rng.integers(0, len(MOVES), len(f)), entities, size,
                                episodes=episodes, seed=10_000 + seed, identifiable=identifiable)
