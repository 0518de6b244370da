"""The frozen tokenizer z_t = E(o_t) [P: frozen, pretrained; architecture R]: either the exact
patch tokenizer (``PatchTokenizer``, invertible) or a small learned convolutional autoencoder
(``ConvTokenizer``: stride-2 convolutions down to a ``grid x grid`` map of ``channels`` values per
token, transposed convolutions back; the CPU stand-in for the paper's VQ-VAE), fit once per data set
on its training frames (``fit_tokenizer``) and frozen while the world model trains. Its latents are
standardised per channel with the training frames' statistics, so the loss's scale does not depend
on the autoencoder's. Saved / loaded as one safetensors file (``save_tokenizer`` / ``load_tokenizer``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from icml26_shared import UserError

FORMAT = "flam-wm-conv-tokenizer/1"


class PatchTokenizer(nn.Module):
    """``[..., H, W, 3]`` uint8 -> ``[..., (H/p)(W/p), p*p*3]`` in [0, 1]; exactly invertible."""

    def __init__(self, size: int, patch: int):
        super().__init__()
        self.size, self.patch = size, patch
        self.n_tokens, self.token_dim = (size // patch) ** 2, patch * patch * 3

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        from .core import tokenize

        return tokenize(frames, self.patch)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        from .core import detokenize

        return detokenize(z, self.size, self.patch)


class ConvTokenizer(nn.Module):
    """A small convolutional autoencoder [R]: log2(size/grid) stride-2 4x4 convolutions (GELU
    between) to ``[channels, grid, grid]``, the mirror image with transposed convolutions back to
    pixels (linear output; ``decode`` clamps to [0, 1] only outside training). Tokens are the ``grid*grid`` positions, standardised per channel."""

    def __init__(self, size: int = 32, grid: int = 4, channels: int = 16, hidden: int = 32):
        super().__init__()
        layers = int(round(math.log2(size / grid))) if size >= grid else -1
        if layers < 1 or grid * 2 ** layers != size:
            raise ValueError(f"tokenizer grid {grid} must be size {size} / 2^n with n >= 1")
        self.size, self.grid, self.channels, self.hidden = size, grid, channels, hidden
        self.n_tokens, self.token_dim = grid * grid, channels
        widths = [3] + [hidden * 2 ** min(i, 1) for i in range(layers)]
        enc, dec = [], []
        for i in range(layers):
            out = channels if i == layers - 1 else widths[i + 1]
            enc += [nn.Conv2d(widths[i], out, 4, 2, 1)] + ([nn.GELU()] if i < layers - 1 else [])
        for i in reversed(range(layers)):
            inp = channels if i == layers - 1 else widths[i + 1]
            dec += [nn.ConvTranspose2d(inp, widths[i], 4, 2, 1)] + ([nn.GELU()] if i > 0 else [])
        self.enc, self.dec = nn.Sequential(*enc), nn.Sequential(*dec)
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("std", torch.ones(channels))

    def _raw(self, frames: torch.Tensor) -> torch.Tensor:
        *lead, h, w, _ = frames.shape
        x = frames.reshape(-1, h, w, 3).permute(0, 3, 1, 2).float().div(255.0)
        return self.enc(x).reshape(*lead, self.channels, -1).transpose(-1, -2)  # [..., N, C]

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """``[..., H, W, 3]`` uint8 -> standardised tokens ``[..., grid*grid, channels]``."""
        return (self._raw(frames) - self.mean) / self.std

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Tokens ``[..., N, C]`` -> frames ``[..., H, W, 3]`` floats in [0, 1]."""
        *lead, n, c = z.shape
        x = (z * self.std + self.mean).transpose(-1, -2).reshape(-1, c, self.grid, self.grid)
        out = self.dec(x).permute(0, 2, 3, 1)
        return out.reshape(*lead, self.size, self.size, 3)

    def meta(self) -> dict:
        return {"format": FORMAT, "size": self.size, "grid": self.grid, "channels": self.channels,
                "hidden": self.hidden}


def encode_batched(tok: nn.Module, frames: np.ndarray | torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """``tok.encode`` over ``[N, T, H, W, 3]`` frames in chunks of clips, without gradients."""
    frames = torch.as_tensor(frames)
    with torch.no_grad():
        return torch.cat([tok.encode(frames[i:i + chunk]) for i in range(0, len(frames), chunk)])


def fit_tokenizer(video: np.ndarray, grid: int = 4, channels: int = 16, hidden: int = 32, steps: int = 300,
                  batch: int = 64, lr: float = 3e-3, seed: int = 0) -> ConvTokenizer:
    """Fit a ``ConvTokenizer`` on the frames of ``video [N, T, H, W, 3]`` uint8 (pixel MSE, Adam),
    then set its per-channel standardisation from those frames' latents and freeze it."""
    torch.manual_seed(seed)
    frames = torch.from_numpy(np.ascontiguousarray(video.reshape(-1, *video.shape[-3:])))
    tok = ConvTokenizer(int(video.shape[-2]), grid, channels, hidden)
    opt = torch.optim.Adam(tok.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = frames[torch.as_tensor(rng.integers(0, len(frames), batch))]
        loss = (tok.decode(tok._raw(x)) - x.float() / 255.0).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        raw = torch.cat([tok._raw(frames[i:i + 1024]) for i in range(0, len(frames), 1024)]).reshape(-1, channels)
        tok.mean.copy_(raw.mean(0))
        tok.std.copy_(raw.std(0).clamp_min(1e-3))
    return freeze(tok)


def freeze(tok: nn.Module) -> nn.Module:
    for p in tok.parameters():
        p.requires_grad_(False)
    return tok.eval()


def save_tokenizer(tok: ConvTokenizer, path: Path) -> Path:
    """One safetensors file, the architecture in its metadata; written atomically."""
    from safetensors.torch import save

    from icml26_shared.io import atomic_write_bytes

    state = {k: v.detach().cpu().contiguous() for k, v in tok.state_dict().items()}
    return atomic_write_bytes(Path(path), save(state, metadata={k: str(v) for k, v in tok.meta().items()}))


def load_tokenizer(path: Path, size: int | None = None) -> ConvTokenizer:
    """Read a tokenizer written by ``save_tokenizer`` (frozen). A missing / foreign file, or one made
    for frames of another size than ``size`` -> ``UserError`` (one line)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--tokenizer {path}: no such file")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iterator)
    except Exception as exc:  # safetensors raises several types for a foreign / truncated file
        raise UserError(f"--tokenizer {path}: not a safetensors file ({type(exc).__name__})") from None
    if meta.get("format") != FORMAT:
        raise UserError(f"--tokenizer {path}: not a flam-wm tokenizer (metadata format {meta.get('format')!r})")
    try:
        arch = {k: int(meta[k]) for k in ("size", "grid", "channels", "hidden")}
    except (KeyError, ValueError):
        raise UserError(f"--tokenizer {path}: corrupt metadata {json.dumps(meta)}") from None
    if size is not None and arch["size"] != size:
        raise UserError(f"--tokenizer {path} was fit on {arch['size']}x{arch['size']} frames, "
                        f"not --size {size}")
    try:
        tok = ConvTokenizer(**arch)
        tok.load_state_dict(state)
    except (ValueError, RuntimeError) as exc:
        raise UserError(f"--tokenizer {path}: weights do not match its metadata ({type(exc).__name__})") from None
    return freeze(tok)
