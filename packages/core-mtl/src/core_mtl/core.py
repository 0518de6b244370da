"""The paper's maths as pure functions (NumPy or torch in, same kind out): second-order
spherical-harmonics shading, the albedo x shading renderer, linear CKA, normals from depth and
the gradient-conflict statistics. No I/O, no logging, no global state."""

from __future__ import annotations

import math

import numpy as np

#: real SH normalisation constants, bands 0-2 (Ramamoorthi & Hanrahan) [C: layers/shading.py]
C0, C1, C2, C3, C4 = 0.282095, 0.488603, 1.092548, 0.315392, 0.546274


def _is_np(x) -> bool:
    return isinstance(x, np.ndarray)


def sh_basis(normals):
    """The 9 real SH basis functions Y_k(N) of unit normals ``[..., 3, H, W]`` -> ``[..., 9, H, W]``.

    Order: Y00, Y1-1 (y), Y10 (z), Y11 (x), Y2-2 (xy), Y2-1 (yz), Y20, Y21 (xz), Y22 (x^2 - y^2).
    """
    x, y, z = normals[..., 0, :, :], normals[..., 1, :, :], normals[..., 2, :, :]
    ys = [C0 * (x * 0 + 1), C1 * y, C1 * z, C1 * x, C2 * x * y, C2 * y * z,
          C3 * (3 * z * z - 1), C2 * x * z, C4 * (x * x - y * y)]
    if _is_np(normals):
        return np.stack(ys, axis=-3)
    import torch

    return torch.stack(ys, dim=-3)


def sh_shading(normals, light):
    """S_c = max(0, sum_k L_{c,k} Y_k(N)): normals ``[..., 3, H, W]``, light ``[..., 3, 9]`` (RGB x
    9 coefficients, 27 in all) -> shading ``[..., 3, H, W]`` [C]."""
    basis = sh_basis(normals)
    if _is_np(normals):
        s = np.einsum("...ck,...khw->...chw", light, basis)
        return np.maximum(s, 0.0)
    import torch

    s = torch.einsum("...ck,...khw->...chw", light, basis)
    return torch.clamp(s, min=0.0)


def render(albedo, normals, light):
    """I_hat = clamp(A * S, 0, 1) in linear RGB [C]: albedo ``[..., 3, H, W]``."""
    out = albedo * sh_shading(normals, light)
    return np.clip(out, 0.0, 1.0) if _is_np(out) else out.clamp(0.0, 1.0)


def linear_cka(X, Y, eps: float = 1e-12):
    """Linear CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on column-centred ``[n, p]`` and
    ``[n, q]`` matrices (Kornblith et al., 2019) [C: losses/cka.py]. NumPy in -> float; torch in ->
    a differentiable 0-d tensor. Inputs with no variance give 0."""
    if _is_np(X) or _is_np(Y):
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        X = X - X.mean(0, keepdims=True)
        Y = Y - Y.mean(0, keepdims=True)
        num = np.linalg.norm(Y.T @ X) ** 2
        den = np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y)
        return float(num / den) if den > eps else 0.0
    X = X - X.mean(0, keepdim=True)
    Y = Y - Y.mean(0, keepdim=True)
    num = (Y.T @ X).pow(2).sum()
    den = (X.T @ X).norm() * (Y.T @ Y).norm()
    return num / den.clamp_min(eps)


def normals_from_depth(depth, spacing: float):
    """Unit normals (camera looks down -z; +z towards the camera) of a depth map ``[H, W]`` with
    pixel ``spacing`` in scene units: N = normalize(dd/dx, dd/dy, 1) by central differences."""
    depth = np.asarray(depth, dtype=np.float64)
    dy, dx = np.gradient(depth, spacing)
    n = np.stack([dx, dy, np.ones_like(depth)], axis=0)
    return n / np.linalg.norm(n, axis=0, keepdims=True)


def gradient_conflict(G) -> tuple[float, float]:
    """Mean pairwise cosine of task gradients ``G [T, P]`` and the fraction of negative pairs."""
    G = np.asarray(G, dtype=np.float64)
    T = G.shape[0]
    if T < 2:
        return math.nan, math.nan
    norms = np.linalg.norm(G, axis=1)
    cos = []
    for i in range(T):
        for j in range(i + 1, T):
            den = norms[i] * norms[j]
            cos.append(float(G[i] @ G[j] / den) if den > 0 else 0.0)
    cos = np.asarray(cos)
    return float(cos.mean()), float((cos < 0).mean())


def angle_degrees(pred, target):
    """Per-pixel angle between (not necessarily unit) normals ``[..., 3, H, W]``, in degrees."""
    p = pred / np.linalg.norm(pred, axis=-3, keepdims=True).clip(1e-12)
    t = target / np.linalg.norm(target, axis=-3, keepdims=True).clip(1e-12)
    return np.degrees(np.arccos(np.clip((p * t).sum(-3), -1.0, 1.0)))


def delta_m(metrics: dict[str, float], reference: dict[str, float], lower_better: set[str]) -> float:
    """Delta_m% = mean_k (-1)^{l_k} (M_k - M_ref,k) / M_ref,k x 100 (Maninis et al.; LibMTL)."""
    terms = []
    for k, ref in reference.items():
        if k not in metrics or not math.isfinite(ref) or ref == 0:
            continue
        sign = -1.0 if k in lower_better else 1.0
        terms.append(sign * (metrics[k] - ref) / abs(ref))
    return 100.0 * float(np.mean(terms)) if terms else math.nan
