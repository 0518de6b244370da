"""Losses of the composite objective [C: losses/]: masked task losses, reconstruction, the
physics regularisers, linear CKA, and the offline perceptual fallback (1 - SSIM) [R]."""

from __future__ import annotations

import torch
import torch.nn.functional as Fn

from .config import LossWeights, TaskSpec
from .core import linear_cka as _cka

__all__ = ["linear_cka", "task_loss", "task_losses", "task_weight_vector", "perceptual", "physics_priors", "edge_consistency"]


def linear_cka(X, Y):
    """Linear CKA of ``[n, p]`` and ``[n, q]`` (NumPy -> float, torch -> differentiable tensor)."""
    return _cka(X, Y)


def task_loss(spec: TaskSpec, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Segmentation CE (label -1 ignored), depth L1 masked to depth > 0, normal 1 - cos masked to
    non-zero normals, attribute BCE [C]."""
    if spec.kind == "segmentation":
        return Fn.cross_entropy(pred, target.long(), ignore_index=-1)
    if spec.kind == "depth":
        mask = target > 0
        return (pred - target).abs()[mask].mean() if mask.any() else pred.sum() * 0
    if spec.kind == "normal":
        mask = target.abs().sum(1) > 0
        cos = (pred * Fn.normalize(target, dim=1)).sum(1)
        return (1 - cos)[mask].mean() if mask.any() else pred.sum() * 0
    return Fn.binary_cross_entropy_with_logits(pred, target.float())


def task_losses(tasks: dict[str, TaskSpec], outputs: dict, targets: dict) -> dict[str, torch.Tensor]:
    return {n: task_loss(tasks[n], outputs[n], targets[n]) for n in outputs}


def task_weight(spec: TaskSpec, w: LossWeights) -> float:
    """The weight of one task's loss by its kind (NYUv2: seg 20, depth 10, normal 10) [C]."""
    return {"segmentation": w.seg, "depth": w.depth, "normal": w.normal, "attributes": w.attributes}[spec.kind]


def task_weight_vector(tasks, w: LossWeights) -> torch.Tensor:
    """``[T]``: the one task-weight vector every arm applies to its task losses before any
    aggregation (CORE's 20:10:10 on NYUv2 [C]; the same for every baseline [R, issue 49])."""
    return torch.tensor([task_weight(t, w) for t in tasks], dtype=torch.float32)


def weighted_task_sum(tasks: dict[str, TaskSpec], losses: dict, w: LossWeights) -> torch.Tensor:
    return sum(task_weight(tasks[n], w) * v for n, v in losses.items())


def ssim(pred: torch.Tensor, target: torch.Tensor, window: int = 7, sigma: float = 1.5) -> torch.Tensor:
    """Mean SSIM (Wang et al. 2004; Gaussian window, C1 = 0.01^2, C2 = 0.03^2, data range 1)."""
    window = min(window, *pred.shape[-2:])
    x = torch.arange(window, dtype=pred.dtype) - (window - 1) / 2
    g = torch.exp(-x**2 / (2 * sigma**2))
    g = (g / g.sum())
    k = (g[:, None] * g[None, :]).expand(pred.shape[1], 1, window, window)
    f = lambda t: Fn.conv2d(t, k, groups=pred.shape[1])  # noqa: E731  (valid padding)
    mx, my = f(pred), f(target)
    sxx, syy, sxy = f(pred * pred) - mx**2, f(target * target) - my**2, f(pred * target) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return s.mean()


def perceptual(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The code's LPIPS-VGG + 2 L1; without VGG weights offline: (1 - SSIM) + 2 L1 [R]. (SSIM is
    written here: importing torchmetrics pulls in transformers and costs tens of seconds.)"""
    return (1 - ssim(pred, target)) + 2 * (pred - target).abs().mean()


def total_variation(a: torch.Tensor) -> torch.Tensor:
    return (a[..., 1:, :] - a[..., :-1, :]).abs().mean() + (a[..., :, 1:] - a[..., :, :-1]).abs().mean()


def cross_covariance(a: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Mean |cross-covariance| between albedo and normal channels over the batch's pixels [C]."""
    A = a.permute(0, 2, 3, 1).reshape(-1, a.shape[1])
    N = n.permute(0, 2, 3, 1).reshape(-1, n.shape[1])
    A, N = A - A.mean(0), N - N.mean(0)
    return (A.T @ N / A.shape[0]).abs().mean()


def physics_priors(out: dict, image: torch.Tensor, w: LossWeights) -> torch.Tensor:
    """2 * L1(A*S, I) + 0.1 TV(A) + 0.001 grey shading + 0.5 |cov(A, N)| [C]."""
    recon = (out["render"] - image).abs().mean()
    light = out["light"]  # grey shading: RGB coefficients close to their mean
    grey = (light - light.mean(1, keepdim=True)).pow(2).mean()
    return (w.decomp_recon * recon + w.tv_albedo * total_variation(out["albedo"])
            + w.grey_shading * grey + w.cross_cov * cross_covariance(out["albedo"], out["normal_phys"]))


def edge_consistency(depth: torch.Tensor, seg_logits: torch.Tensor) -> torch.Tensor:
    """Depth edges should fall on segmentation edges [C: 0.1 weight]: |grad d| * (1 - |grad p|)."""
    p = seg_logits.softmax(1)
    gd = (depth[:, 1:, :] - depth[:, :-1, :]).abs()
    gp = (p[:, :, 1:, :] - p[:, :, :-1, :]).abs().sum(1).clamp(max=1)
    return (gd * (1 - gp)).mean()


def pooled_cka(z_s: torch.Tensor, z_p: torch.Tensor) -> torch.Tensor:
    """CKA between spatially pooled z_s ``[B, C, h, w]`` and z_p ``[B, d]`` over the batch [C]."""
    return linear_cka(z_s.mean((2, 3)), z_p)
