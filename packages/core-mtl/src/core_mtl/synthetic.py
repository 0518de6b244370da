"""ShadedShapes [R]: 1-3 analytic height-field objects (sphere, elongated ellipsoid, pyramid) on a
plane, with exact depth, normals and segmentation, rendered with the package's own SH physics
(``core.render``). Shifts: ``color`` (class <-> hue tied with probability ``tie``; test_ood
permutes the map), ``light`` (coloured, grazing light at test_ood), ``corrupt`` (noise, blur,
contrast, fog at test_ood). ``attributes=K`` adds K binary scene attributes (CelebA-like)."""

from __future__ import annotations

import colorsys

import numpy as np

from .core import C0, C1, render

N_CLASSES = 4  # background + sphere, ellipsoid, pyramid
HUES = (0.0, 1 / 3, 2 / 3)  # the class hues (red, green, blue) of the train-time map
PLANE_DEPTH = 2.0
SHIFTS = ("color", "light", "corrupt")


def _height(kind: int, u, v, cx, cy, r, theta):
    """Height field and its analytic gradient (h, dh/du, dh/dv) of one object."""
    c, s = np.cos(theta), np.sin(theta)
    a, b = c * (u - cx) + s * (v - cy), -s * (u - cx) + c * (v - cy)
    if kind == 1:  # sphere cap
        ra, rb, hz = r, r, r
    elif kind == 2:  # elongated ellipsoid
        ra, rb, hz = r, r / 2.2, 0.6 * r
    else:  # square pyramid, height r
        m = np.maximum(np.abs(a), np.abs(b))
        h = np.maximum(r - m, 0.0)
        inside = h > 0
        da = np.where(np.abs(a) >= np.abs(b), -np.sign(a), 0.0) * inside
        db = np.where(np.abs(a) < np.abs(b), -np.sign(b), 0.0) * inside
        return h, c * da - s * db, s * da + c * db
    q = 1 - (a / ra) ** 2 - (b / rb) ** 2
    inside = q > 1e-4
    h = hz * np.sqrt(np.where(inside, q, 1.0)) * inside
    hs = np.where(inside, h, 1.0)
    da = -hz * hz * a / (ra * ra * hs) * inside
    db = -hz * hz * b / (rb * rb * hs) * inside
    return h, c * da - s * db, s * da + c * db


def _light(rng, ood: bool, shift: str) -> np.ndarray:
    """27 SH coefficients: ambient + directional lobe (bands 0-1) + a little band-2 noise."""
    if ood and shift == "light":
        el = rng.uniform(0.15, 0.4)  # grazing light
        tint = rng.uniform(0.6, 1.4, size=3)
    else:
        el = rng.uniform(0.55, 1.0)
        tint = np.ones(3)
    az = rng.uniform(0, 2 * np.pi)
    d = np.array([np.sqrt(1 - el**2) * np.cos(az), np.sqrt(1 - el**2) * np.sin(az), el])
    amb, k = rng.uniform(0.35, 0.5), rng.uniform(0.45, 0.65)
    L = np.zeros(9)
    L[0] = amb / C0
    L[1], L[2], L[3] = k * d[1] / C1, k * d[2] / C1, k * d[0] / C1
    L[4:] = rng.normal(0, 0.04, size=5)
    return (tint[:, None] * L[None, :]).astype(np.float64)


def _corrupt(img: np.ndarray, rng) -> np.ndarray:
    kind = rng.integers(4)
    if kind == 0:
        img = img + rng.normal(0, 0.08, img.shape)
    elif kind == 1:  # 3x3 box blur
        p = np.pad(img, ((0, 0), (1, 1), (1, 1)), mode="edge")
        img = sum(p[:, i:i + img.shape[1], j:j + img.shape[2]] for i in range(3) for j in range(3)) / 9
    elif kind == 2:
        img = (img - img.mean()) * 0.45 + img.mean()
    else:
        img = 0.55 * img + 0.45 * 0.8
    return np.clip(img, 0, 1)


def scene(rng, size: int, *, hue_map=(0, 1, 2), tie: float = 0.9, ood: bool = False,
          shift: str = "color", attributes: int = 0) -> dict:
    """One scene: image / albedo / normal ``[3, S, S]``, depth ``[S, S]``, label ``[S, S]`` (class
    ids), light ``[3, 9]``, hue (hue index of the largest object) and attributes ``[K]``."""
    t = np.linspace(-1, 1, size)
    u, v = np.meshgrid(t, t)  # u along columns (x), v along rows (y)
    H = np.zeros((size, size))
    du, dv = np.zeros_like(H), np.zeros_like(H)
    label = np.zeros((size, size), dtype=np.int64)
    grey = rng.uniform(0.45, 0.7)
    albedo = np.full((3, size, size), grey)
    n_obj = int(rng.integers(1, 4))
    areas, hues, kinds, centres, radii = [], [], [], [], []
    for _ in range(n_obj):
        kind = int(rng.integers(1, N_CLASSES))
        cx, cy = rng.uniform(-0.55, 0.55, size=2)
        r = rng.uniform(0.28, 0.48)
        h, hu, hv = _height(kind, u, v, cx, cy, r, rng.uniform(0, np.pi))
        hue = hue_map[kind - 1] if rng.random() < tie else int(rng.integers(len(HUES)))
        win = h > H
        H, du, dv = np.where(win, h, H), np.where(win, hu, du), np.where(win, hv, dv)
        label[win] = kind
        rgb = np.array(colorsys.hsv_to_rgb(HUES[hue], rng.uniform(0.65, 0.85), rng.uniform(0.8, 0.95)))
        albedo[:, win] = rgb[:, None]
        kinds.append(kind)
        hues.append(hue)
        centres.append((cx, cy))
        radii.append(r)
    albedo = np.clip(albedo + rng.normal(0, 0.02, albedo.shape), 0.02, 1.0)  # faint texture
    for k in kinds:
        areas.append(int((label == k).sum()))
    depth = PLANE_DEPTH - H
    n = np.stack([-du, -dv, np.ones_like(H)])  # N = normalize(-dh/du, -dh/dv, 1) = (dd/du, dd/dv, 1)
    n /= np.linalg.norm(n, axis=0, keepdims=True)
    light = _light(rng, ood, shift)
    img = render(albedo, n, light)
    if ood and shift == "corrupt":
        img = _corrupt(img, rng)
    out = dict(image=img.astype(np.float32), albedo=albedo.astype(np.float32),
               normal=n.astype(np.float32), depth=depth.astype(np.float32), label=label,
               light=light.astype(np.float32), hue=int(hues[int(np.argmax(areas))]))
    if attributes:
        present = [int(c in kinds) for c in range(1, N_CLASSES)]
        feats = present + [int(n_obj >= 2), int(n_obj == 3), int(max(radii) > 0.4),
                           int(np.mean([c[0] for c in centres]) > 0), int(np.mean([c[1] for c in centres]) > 0),
                           int(min(radii) < 0.33), int((label > 0).mean() > 0.3)]
        out["attributes"] = np.asarray((feats * ((attributes // len(feats)) + 1))[:attributes], np.float32)
    return out


def make_split(n: int, size: int, seed: int, *, split: str = "train", shift: str = "color",
               tie: float = 0.9, attributes: int = 0) -> dict:
    """Stacked scenes of one split: ``train`` / ``test`` (hue map 0,1,2 tied with ``tie``),
    ``test_ood`` (shifted: colour map permuted, or light / corruption), ``probe`` (hue independent
    of class, for the nuisance probe)."""
    if shift not in SHIFTS:
        raise ValueError(f"unknown shift {shift!r} (choose from {', '.join(SHIFTS)})")
    offset = {"train": 0, "test": 1, "test_ood": 2, "probe": 3}[split]
    rng = np.random.default_rng([seed, offset])
    ood = split == "test_ood"
    hue_map = (1, 2, 0) if ood and shift == "color" else (0, 1, 2)
    t = 0.0 if split == "probe" else tie
    scenes = [scene(rng, size, hue_map=hue_map, tie=t, ood=ood, shift=shift, attributes=attributes)
              for _ in range(n)]
    return {k: np.stack([s[k] for s in scenes]) if k != "hue" else np.asarray([s[k] for s in scenes])
            for k in scenes[0]}
