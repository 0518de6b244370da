"""The two-stream network [C: models/causal_model.py, scaled down R]: encoder -> F; semantic map
z_s = 1x1 conv(F); residual vector z_p = GAP(1x1 conv(F)); task heads read z_s (and proj(F) with
``heads_read_shared``); geometric decoder D_g(z_s) -> depth; appearance decoder D_a(z_s, z_p) with
z_p injected as style (FiLM) -> RGB; physics heads: albedo from z_p (FiLM on z_s for layout),
normals from z_s, 27 SH lighting coefficients from pooled F. ``MTAN`` is the attention baseline."""

from __future__ import annotations

import torch
import torch.nn.functional as Fn
from torch import nn

from .config import ModelConfig, TaskSpec
from .core import render


def _block(cin: int, cout: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, padding=dilation, dilation=dilation, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Encoder(nn.Module):
    """A small dilated CNN; the three scales are resized to stride 2 and concatenated into F (the
    ResNet-50 version concatenates 4 scales at stride 8 [C])."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.b1 = _block(3, width)
        self.b2 = _block(width, 2 * width, stride=2)
        self.b3 = _block(2 * width, 2 * width, dilation=2)
        self.out_channels = 5 * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f1 = self.b1(x)
        f2 = self.b2(f1)
        f3 = self.b3(f2)
        return torch.cat([Fn.avg_pool2d(f1, 2), f2, f3], 1)


class Head(nn.Module):
    """conv3x3 -> ReLU -> 1x1, upsampled to any H x W; ``pooled`` heads (attributes) use GAP."""

    def __init__(self, cin: int, cout: int, width: int, pooled: bool = False):
        super().__init__()
        self.pooled = pooled
        self.net = nn.Sequential(nn.Conv2d(cin, width, 3, padding=1), nn.ReLU(inplace=True),
                                 nn.Conv2d(width, cout, 1))

    def forward(self, z: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        y = self.net(z)
        if self.pooled:
            return y.mean((2, 3))
        return Fn.interpolate(y, size=size, mode="bilinear", align_corners=False)


def encoder_channels(encoder: nn.Module) -> int:
    """C of a user encoder's F ``[B, C, h, w]``: its ``out_channels`` attribute, else one dry
    forward of two 64x64 images without gradients (train/eval flags and buffers restored)."""
    c = getattr(encoder, "out_channels", None)
    if isinstance(c, int) and c > 0:
        return c
    modes = [(m, m.training) for m in encoder.modules()]
    buffers = [b.clone() for b in encoder.buffers()]
    p = next(encoder.parameters(), None)
    x = torch.zeros(2, 3, 64, 64, device=p.device if p is not None else None)
    encoder.eval()
    try:
        with torch.no_grad():
            f = encoder(x)
    except Exception as exc:  # noqa: BLE001 (the user's module; one clear line)
        raise ValueError(f"the encoder failed on a [2, 3, 64, 64] input: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    finally:
        for m, mode in modes:
            m.train(mode)
        for b, old in zip(encoder.buffers(), buffers):
            b.copy_(old)
    if not (isinstance(f, torch.Tensor) and f.ndim == 4):
        raise ValueError("the encoder must map [B, 3, H, W] to a feature map [B, C, h, w], got "
                         + (f"shape {tuple(f.shape)}" if isinstance(f, torch.Tensor) else type(f).__name__))
    return int(f.shape[1])


def make_encoder(cfg: ModelConfig, encoder: nn.Module | None) -> tuple[nn.Module, int]:
    enc = Encoder(cfg.width) if encoder is None else encoder
    if not isinstance(enc, nn.Module):
        raise ValueError(f"encoder must be a torch.nn.Module, got {type(enc).__name__}")
    return enc, encoder_channels(enc)


def out_channels(spec: TaskSpec) -> int:
    return {"segmentation": spec.classes, "depth": 1, "normal": 3, "attributes": spec.classes}[spec.kind]


def finish(spec: TaskSpec, y: torch.Tensor) -> torch.Tensor:
    """Task-specific output maps: normals L2-normalised [C], depth positive."""
    if spec.kind == "normal":
        return Fn.normalize(y, dim=1)
    if spec.kind == "depth":
        return Fn.softplus(y[:, 0])
    return y


class FiLMDecoder(nn.Module):
    """Decode a ``cout``-channel image from z_s with z_p injected as style: the z_s features are
    instance-normalised, then scaled and shifted per channel by z_p (AdaIN-like; the code's
    style-conditioned decoders [C], sizes [R]), so global appearance has to come from z_p."""

    def __init__(self, dim_s: int, dim_p: int, width: int, cout: int):
        super().__init__()
        self.inp = nn.Conv2d(dim_s, width, 3, padding=1)
        self.film = nn.Linear(dim_p, 2 * width)
        self.out = nn.Conv2d(width, cout, 3, padding=1)

    def forward(self, z_s, z_p, size):
        g, b = self.film(z_p).chunk(2, dim=1)
        h = Fn.instance_norm(self.inp(z_s))
        h = Fn.relu(h * (1 + g[:, :, None, None]) + b[:, :, None, None])
        return torch.sigmoid(Fn.interpolate(self.out(h), size=size, mode="bilinear", align_corners=False))


class CoreMTL(nn.Module):
    """The two streams on an encoder: the package's small CNN, or ``encoder=`` any module mapping
    ``[B, 3, H, W]`` to F ``[B, C, h, w]`` (C from its ``out_channels`` or one dry forward); the
    heads upsample to the input size."""

    def __init__(self, tasks: tuple[TaskSpec, ...], cfg: ModelConfig | None = None,
                 encoder: nn.Module | None = None):
        super().__init__()
        cfg = cfg or ModelConfig()
        self.tasks = {t.name: t for t in tasks}
        self.cfg = cfg
        self.encoder, cf = make_encoder(cfg, encoder)
        self.to_s = nn.Conv2d(cf, cfg.dim_s, 1)
        self.to_p = nn.Conv2d(cf, cfg.dim_p, 1)
        cin = cfg.dim_s
        if cfg.heads_read_shared:
            self.proj_f = nn.Conv2d(cf, cfg.dim_s, 1)
            cin = 2 * cfg.dim_s
        self.heads = nn.ModuleDict({t.name: Head(cin, out_channels(t), cfg.head_width,
                                                 pooled=t.kind == "attributes") for t in tasks})
        w = cfg.head_width
        self.geom = Head(cfg.dim_s, 1, w)  # D_g(z_s) -> depth [C]
        self.app = FiLMDecoder(cfg.dim_s, cfg.dim_p, w, 3)  # D_a(z_s, z_p) -> RGB [C]
        self.albedo = FiLMDecoder(cfg.dim_s, cfg.dim_p, w, 3)  # A from z_p [C]
        self.normal_phys = Head(cfg.dim_s, 3, w)  # N from z_s [C]
        self.light = nn.Linear(cf, 27)  # L from pooled F [C]

    def shared_parameters(self) -> list[nn.Parameter]:
        """The parameters every task's gradient flows through (for conflict and aggregation)."""
        mods = [self.encoder, self.to_s] + ([self.proj_f] if self.cfg.heads_read_shared else [])
        return [p for m in mods for p in m.parameters()]

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.heads.parameters())

    def encode(self, x):
        f = self.encoder(x)
        z_s = self.to_s(f)
        z_p = self.to_p(f).mean((2, 3))
        return f, z_s, z_p

    def task_outputs(self, f, z_s, size):
        z = torch.cat([self.proj_f(f), z_s], 1) if self.cfg.heads_read_shared else z_s
        return {n: finish(self.tasks[n], h(z, size)) for n, h in self.heads.items()}

    def forward(self, x, *, decode: bool = False, physics: bool = False) -> dict:
        size = x.shape[-2:]
        f, z_s, z_p = self.encode(x)
        out = {"f": f, "z_s": z_s, "z_p": z_p, "tasks": self.task_outputs(f, z_s, size)}
        if decode:
            out["depth_recon"] = Fn.softplus(self.geom(z_s, size)[:, 0])
            out["app_recon"] = self.app(z_s, z_p, size)
        if physics:
            out["albedo"] = self.albedo(z_s, z_p, size)
            out["normal_phys"] = Fn.normalize(self.normal_phys(z_s, size), dim=1)
            out["light"] = self.light(f.mean((2, 3))).view(-1, 3, 9)
            out["render"] = render(out["albedo"], out["normal_phys"], out["light"])
        return out

    def counterfactual(self, z_s, z_p, perm, size):
        """I_cf = D_a(z_s, z_p[perm]): the same semantics with another image's residual [C]."""
        return self.app(z_s, z_p[perm], size)


class MTAN(nn.Module):
    """Multi-task attention network (Liu et al., 2019), scaled down [R]: a shared encoder and one
    soft attention mask per task over the shared features, then the task head."""

    def __init__(self, tasks: tuple[TaskSpec, ...], cfg: ModelConfig | None = None,
                 encoder: nn.Module | None = None):
        super().__init__()
        cfg = cfg or ModelConfig()
        self.tasks = {t.name: t for t in tasks}
        self.cfg = cfg
        self.encoder, cf = make_encoder(cfg, encoder)
        self.to_s = nn.Conv2d(cf, cfg.dim_s, 1)
        self.att = nn.ModuleDict({t.name: nn.Sequential(nn.Conv2d(cf, cfg.dim_s, 1), nn.Sigmoid())
                                  for t in tasks})
        self.heads = nn.ModuleDict({t.name: Head(cfg.dim_s, out_channels(t), cfg.head_width,
                                                 pooled=t.kind == "attributes") for t in tasks})

    def shared_parameters(self):
        return list(self.encoder.parameters()) + list(self.to_s.parameters())

    def head_parameters(self):
        return list(self.heads.parameters()) + list(self.att.parameters())

    def encode(self, x):
        f = self.encoder(x)
        return f, self.to_s(f), None

    def forward(self, x, **_) -> dict:
        size = x.shape[-2:]
        f, z_s, _ = self.encode(x)
        tasks = {n: finish(self.tasks[n], h(z_s * self.att[n](f), size)) for n, h in self.heads.items()}
        return {"f": f, "z_s": z_s, "z_p": None, "tasks": tasks}


def build_model(method: str, tasks: tuple[TaskSpec, ...], cfg: ModelConfig,
                encoder: nn.Module | None = None) -> nn.Module:
    """CORE's network (every baseline but MTAN trains it too) or MTAN, on ``encoder`` if given."""
    return MTAN(tasks, cfg, encoder) if method == "mtan" else CoreMTL(tasks, cfg, encoder)
