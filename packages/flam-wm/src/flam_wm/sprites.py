"""SpriteWorld: E coloured square sprites, each with its own action per step; walls clamp [R]."""

from __future__ import annotations

import numpy as np

ACTIONS = ("stay", "up", "down", "left", "right")
MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])  # (row, col) per action
COLOURS = np.array([[230, 40, 40], [40, 200, 60], [50, 90, 240], [240, 210, 30], [200, 60, 220],
                    [40, 220, 220], [250, 140, 20], [140, 140, 140]], dtype=np.uint8)


def step_positions(pos: np.ndarray, actions: np.ndarray, grid: int) -> np.ndarray:
    """Move each sprite one cell by its action; walls clamp (``up`` at the top stays in place)."""
    return np.clip(pos + MOVES[actions], 0, grid - 1)


def render(pos: np.ndarray, size: int, cell: int, background: np.ndarray | None = None) -> np.ndarray:
    """Frame ``[size, size, 3]`` uint8: sprite e is a ``cell``-sized square of colour e at pos[e]."""
    frame = np.zeros((size, size, 3), np.uint8) if background is None else background.copy()
    for e, (r, c) in enumerate(pos):
        frame[r * cell:(r + 1) * cell, c * cell:(c + 1) * cell] = COLOURS[e % len(COLOURS)]
    return frame


def generate(entities: int, clips: int, frames: int, size: int = 32, seed: int = 0,
             cell: int = 4, distractor: str = "none") -> tuple[np.ndarray, np.ndarray]:
    """``(video [N, T, size, size, 3] uint8, actions [N, T-1, E] int)``; deterministic for a seed.

    Each sprite takes an independent uniform action from ACTIONS each step (stay included).
    ``distractor="jitter"`` adds a one-pixel random camera shift per frame (the LAPA #38 failure
    mode: motion no sprite caused)."""
    if entities < 1 or clips < 1 or frames < 2 or size < cell or size % cell:
        raise ValueError("need entities >= 1, clips >= 1, frames >= 2 and size a multiple of cell")
    if distractor not in ("none", "jitter"):
        raise ValueError(f"unknown distractor {distractor!r} (choose none or jitter)")
    rng = np.random.default_rng(seed)
    grid = size // cell
    video = np.zeros((clips, frames, size, size, 3), np.uint8)
    acts = rng.integers(0, len(ACTIONS), size=(clips, frames - 1, entities))
    for n in range(clips):
        pos = rng.integers(0, grid, size=(entities, 2))
        for t in range(frames):
            img = render(pos, size, cell)
            if distractor == "jitter":
                img = np.roll(img, tuple(rng.integers(-1, 2, size=2)), axis=(0, 1))
            video[n, t] = img
            if t < frames - 1:
                pos = step_positions(pos, acts[n, t], grid)
    return video, acts
