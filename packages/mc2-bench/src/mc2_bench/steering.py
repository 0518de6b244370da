"""``SteeringHook``: add alpha * v_hat * ||h|| to chosen layers' outputs at chosen positions [R].

The hook knows image tokens: the adapter tells it, before every forward, which positions hold
image tokens and how long the prompt is (``adapter.position_info``), so ``positions`` can be
``all``, ``generated`` (positions at or after the prompt length: generated tokens only),
``image_tokens``, ``text_tokens`` or ``context`` (the tokens of the item's text context, from
``position_info["context_mask"]``; a text-only or image-only prompt without one is left alone). Every call records the layers and the number of positions it
touched in ``self.touched`` (the "show where a vector was applied" ask, steering-vectors #50).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .config import POSITIONS
from .core import steer_update


class SteeringHook:
    def __init__(self, layers: Sequence[int], vector, alpha: float, positions: str = "all",
                 adaptive: str | None = None, amps_stats: tuple[float, float] | None = None):
        if positions not in POSITIONS:
            raise ValueError(f"unknown positions {positions!r} (choose one of {', '.join(POSITIONS)})")
        if adaptive not in (None, "amps"):
            raise ValueError(f"unknown adaptive rule {adaptive!r} (None or 'amps')")
        if adaptive == "amps" and amps_stats is None:
            raise ValueError("adaptive='amps' needs amps_stats=(c_vision, c_text)")
        self.layers = tuple(int(x) for x in layers)
        vecs = vector if isinstance(vector, dict) else {x: vector for x in self.layers}
        missing = [x for x in self.layers if x not in vecs]
        if missing:
            raise ValueError(f"no steering vector for layer {missing[0]}")
        self.v_hats = {}
        for x in self.layers:  # one unit direction per layer (a dict), or one shared by all
            v = torch.as_tensor(np.asarray(vecs[x], np.float32))
            self.v_hats[x] = v / v.norm()
        self.v_hat = self.v_hats[self.layers[0]]
        self.alpha = float(alpha)
        self.positions = positions
        self.adaptive = adaptive
        self.amps_stats = amps_stats
        self.touched: dict[int, int] = {}
        self._handles: list = []
        self._adapter = None

    def _mask(self, h: torch.Tensor) -> torch.Tensor | None:
        info = self._adapter.position_info if self._adapter is not None else {}
        B, T, _ = h.shape
        if self.positions == "all":
            return None
        if self.positions == "generated":
            start = info.get("prompt_len", T) - info.get("offset", 0)
            m = torch.zeros(B, T, dtype=torch.bool)
            if start < T:
                m[:, max(start, 0):] = True
            return m
        key = "context_mask" if self.positions == "context" else "image_mask"
        m = info.get(key)
        if m is None or m.shape[1] != T:  # decoding steps after the prompt hold no image/context token
            m = torch.zeros(B, T, dtype=torch.bool)
        return ~m if self.positions == "text_tokens" else m

    def _hook(self, layer: int):
        def fn(module, args, output):
            h = output[0] if isinstance(output, tuple) else output
            mask = self._mask(h)
            amps = self.amps_stats if self.adaptive == "amps" else None
            if isinstance(amps, dict):  # one (c_vision, c_text) per layer
                amps = amps[layer]
            new = steer_update(h, self.v_hats[layer].to(h.device), self.alpha,
                               None if mask is None else mask.to(h.device), amps)
            att = (self._adapter.position_info if self._adapter is not None else {}).get("attention_mask")
            if att is None or tuple(att.shape) != tuple(h.shape[:2]):
                att = torch.ones(h.shape[:2], dtype=torch.bool)
            att = att.bool().cpu()
            n = int(att.sum()) if mask is None else int((mask.cpu() & att).sum())  # attended only
            self.touched[layer] = self.touched.get(layer, 0) + (n if self.alpha != 0.0 else 0)
            if isinstance(output, tuple):
                return (new, *output[1:])
            return new
        return fn

    def attach(self, adapter) -> SteeringHook:
        modules = adapter.layer_modules()
        bad = [x for x in self.layers if not 0 <= x < len(modules)]
        if bad:
            raise ValueError(f"layer {bad[0]} out of range (the model has {len(modules)} layers: 0-{len(modules) - 1})")
        self._adapter = adapter
        self._handles = [modules[x].register_forward_hook(self._hook(x)) for x in self.layers]
        return self

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> SteeringHook:
        if self._adapter is None:
            raise RuntimeError("attach(adapter) first, or use adapter.steer(hook)")
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def record(self) -> dict:
        return {"layers": list(self.layers), "positions": self.positions, "alpha": self.alpha,
                "adaptive": self.adaptive, "touched_positions": dict(self.touched)}
