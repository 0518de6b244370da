"""Adapters: one interface over the models the protocol runs on.

An adapter answers ``answer(items, mode, order, answer_mode, follow)`` -> one dict per item
(``letter``, ``text``, ``prompt``), returns hidden states ``hidden(items, mode, order, follow)``
-> (n, n_layers, d) at the last prompt position (``at="last"``) or averaged over a position set
(``at="image_tokens" | "text_tokens" | "context"``), lists its decoder layers for hooks
(``layer_modules``) and exposes ``position_info`` (image-token mask, prompt length) to them.
"""

from __future__ import annotations

import torch

from .config import STATE_AT


def pool_states(h: torch.Tensor, info: dict, at: str = "last") -> torch.Tensor:
    """(B, T, d) layer states -> (B, d): the last position, or the mean over the positions a
    steering hook with ``positions=at`` would touch (``info`` = the adapter's ``position_info``)."""
    if at == "last":
        return h[:, -1]
    if at not in STATE_AT:
        raise ValueError(f"unknown state position {at!r} (choose one of {', '.join(STATE_AT)})")
    img = info.get("image_mask")
    img = torch.zeros(h.shape[:2], dtype=torch.bool) if img is None else img.to(h.device)
    if at == "context":
        m = info.get("context_mask")
        m = torch.zeros(h.shape[:2], dtype=torch.bool) if m is None else m.to(h.device)
    else:
        m = img if at == "image_tokens" else ~img & info.get("attention_mask", torch.ones_like(img)).bool()
    if not bool(m.any(1).all()):
        raise ValueError(f"a prompt has no {at} positions to average")
    w = m.to(h.dtype).unsqueeze(-1)
    return (h * w).sum(1) / w.sum(1)
