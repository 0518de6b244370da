"""SpriteWorld: E coloured square sprites, each with its own action per step; walls clamp [R]."""

from __future__ import annotations

import numpy as np

ACTIONS = ("stay", "up", "down", "left", "right")
MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])  # (row, col) per action
COLOURS = np.array([[230, 40, 40], [40, 200, 60], [50, 90, 240], [240, 210, 30], [200, 60, 220],
                    [40, 220, 220], [250, 140, 20], [140, 140, 140]], dtype=np.uint8)
DISTRACTORS = ("none", "texture", "jitter")
TEXTURE_MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])  # the background scrolls one pixel per step


def step_positions(pos: np.ndarray, actions: np.ndarray, grid: int) -> np.ndarray:
    """Move each sprite one cell by its action; walls clamp (``up`` at the top stays in place)."""
    return np.clip(pos + MOVES[actions], 0, grid - 1)


def identifiable_step(pos: np.ndarray, want: np.ndarray, grid: int, rng: np.random.Generator | None = None,
                      fixed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One step of the identifiable dynamics [R]: sprites move in index order, each only into a cell
    inside the grid that no other sprite holds (earlier sprites at their new cells); stay is always legal, so
    every action shows as its move and sprites never overlap. The first ``fixed`` sprites take their wanted
    action ``want[e]`` if legal, else stay; the others draw uniformly among their legal actions (``rng``).
    Returns (new positions, actions taken)."""
    pos, acts = pos.copy(), np.zeros(len(pos), np.int64)
    for e in range(len(pos)):
        others = {tuple(p) for j, p in enumerate(pos) if j != e}
        legal = [a for a in range(len(ACTIONS)) if a == 0 or (
            np.all((pos[e] + MOVES[a] >= 0) & (pos[e] + MOVES[a] < grid)) and tuple(pos[e] + MOVES[a]) not in others)]
        a = (int(want[e]) if int(want[e]) in legal else 0) if e < fixed else int(rng.choice(legal))
        pos[e], acts[e] = pos[e] + MOVES[a], a
    return pos, acts


def render(pos: np.ndarray, size: int, cell: int, background: np.ndarray | None = None) -> np.ndarray:
    """Frame ``[size, size, 3]`` uint8: sprite e is a ``cell``-sized square of colour e at pos[e]."""
    frame = np.zeros((size, size, 3), np.uint8) if background is None else background.copy()
    for e, (r, c) in enumerate(pos):
        frame[r * cell:(r + 1) * cell, c * cell:(c + 1) * cell] = COLOURS[e % len(COLOURS)]
    return frame


def generate(entities: int, clips: int, frames: int, size: int = 32, seed: int = 0,
             cell: int = 4, distractor: str = "none", controlled: bool = False,
             identifiable: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(video [N, T, size, size, 3] uint8, actions [N, T-1, E] int)``; deterministic for a seed.

    Each sprite takes an independent uniform action from ACTIONS each step (stay included).
    ``distractor="jitter"`` adds a one-pixel random camera shift per frame (the LAPA #38 failure
    mode: motion no sprite caused); ``distractor="texture"`` draws the sprites over a dim random
    texture that scrolls one pixel per step in a per-clip direction (a moving background) [R].
    ``controlled=True`` makes sprite 0 head for a target (a white dot in the middle of its cell,
    under the sprites) along the axis with the larger gap, a new target once reached [R]; the
    other sprites keep their random actions, and ``actions[..., 0]`` records sprite 0's moves.
    ``identifiable=True`` [R]: sprites start on distinct cells and act by ``identifiable_step`` (each
    draws among its moves that hit no wall and no other sprite; the controlled sprite stays when its move
    is blocked), so every action is visible in the frames: the visible-move ceiling is 1 at the same size
    and token cost (issue 57: chosen over 2-px cells, ceiling ~0.95 at 4x the tokens, before any model ran)."""
    if entities < 1 or clips < 1 or frames < 2 or size < cell or size % cell:
        raise ValueError("need entities >= 1, clips >= 1, frames >= 2 and size a multiple of cell")
    if distractor not in DISTRACTORS:
        raise ValueError(f"unknown distractor {distractor!r} (choose from {', '.join(DISTRACTORS)})")
    rng = np.random.default_rng(seed)
    grid = size // cell
    video = np.zeros((clips, frames, size, size, 3), np.uint8)
    acts = rng.integers(0, len(ACTIONS), size=(clips, frames - 1, entities))
    if identifiable and entities > grid * grid:
        raise ValueError(f"{entities} sprites do not fit on distinct cells of a {grid}x{grid} grid")
    for n in range(clips):
        pos = rng.integers(0, grid, size=(entities, 2))
        if identifiable:  # distinct cells (drawn only when identifiable, so other data stay as before for a seed)
            cells = rng.choice(grid * grid, entities, replace=False)
            pos = np.stack([cells // grid, cells % grid], -1)
        if distractor == "texture":  # drawn only for texture, so none / jitter stay as before for a seed
            texture = rng.integers(0, 90, size=(size, size, 3)).astype(np.uint8)
            velocity = TEXTURE_MOVES[rng.integers(0, len(TEXTURE_MOVES))]
        if controlled:  # drawn only when controlled, so other data stay as before for a seed
            target = _new_target(rng, grid, pos[0])
        for t in range(frames):
            bg = np.roll(texture, tuple(t * velocity), axis=(0, 1)) if distractor == "texture" else None
            if controlled:
                if np.array_equal(pos[0], target):
                    target = _new_target(rng, grid, pos[0])
                bg = (np.zeros((size, size, 3), np.uint8) if bg is None else bg.copy())
                r, c = target * cell + cell // 2
                bg[r - 1:r + 1, c - 1:c + 1] = 255
                if t < frames - 1:
                    acts[n, t, 0] = toward(pos[0], target)
            img = render(pos, size, cell, bg)
            if distractor == "jitter":
                img = np.roll(img, tuple(rng.integers(-1, 2, size=2)), axis=(0, 1))
            video[n, t] = img
            if t < frames - 1 and identifiable:
                pos, acts[n, t] = identifiable_step(pos, acts[n, t], grid, rng, fixed=int(controlled))
            elif t < frames - 1:
                pos = step_positions(pos, acts[n, t], grid)
    return video, acts


def toward(pos: np.ndarray, target: np.ndarray) -> int:
    """The action moving ``pos`` one cell toward ``target`` (the axis with the larger gap, rows on
    a tie); ``stay`` (0) on the target."""
    dr, dc = (np.asarray(target) - np.asarray(pos)).tolist()
    if dr == dc == 0:
        return 0
    if abs(dr) >= abs(dc):
        return 2 if dr > 0 else 1
    return 4 if dc > 0 else 3


def _new_target(rng: np.random.Generator, grid: int, avoid: np.ndarray) -> np.ndarray:
    if grid == 1:
        return np.asarray(avoid).copy()
    while True:
        t = rng.integers(0, grid, size=2)
        if not np.array_equal(t, avoid):
            return t


def entity_labels(video: np.ndarray, entities: int, cell: int = 4) -> np.ndarray:
    """``[N, T, (size/cell)^2]``: which sprite covers each cell (row-major), -1 where none, read from
    the frames by colour (a cell's top-left pixel; the target dot sits in a cell's middle). Exact for
    ``distractor="none"`` data; the evaluation's ground truth for slot masks [R]."""
    px = np.asarray(video)[..., ::cell, ::cell, :].astype(np.int16)
    lab = -np.ones(px.shape[:-1], np.int64)
    for e in range(entities):
        lab[(px == COLOURS[e % len(COLOURS)]).all(-1)] = e
    return lab.reshape(*lab.shape[:-2], -1)


def visible_actions(video: np.ndarray, actions: np.ndarray, cell: int = 4) -> np.ndarray:
    """``[N, T-1, E]``: each sprite's action as the frames show it -- its visible one-cell displacement,
    else ``stay`` (a move into a wall, or a sprite hidden under another in either frame, leaves
    nothing to see) [R]. ``actions`` gives only E."""
    e_n = actions.shape[-1]
    lab = entity_labels(video, e_n, cell)
    g = video.shape[-2] // cell
    out = np.zeros((*video.shape[:1], video.shape[1] - 1, e_n), np.int64)
    for e in range(e_n):
        here = lab == e                                                  # [N, T, cells]
        seen = here.sum(-1) == 1                                         # visible, one cell
        idx = here.argmax(-1)
        r, c = idx // g, idx % g
        dr, dc = r[:, 1:] - r[:, :-1], c[:, 1:] - c[:, :-1]
        for a, (mr, mc) in enumerate(MOVES):
            if a:
                out[..., e][(dr == mr) & (dc == mc)] = a
        out[..., e][~(seen[:, 1:] & seen[:, :-1])] = 0
    return out


def visible_action_accuracy(video: np.ndarray, actions: np.ndarray, cell: int = 4) -> np.ndarray:
    """Per-entity accuracy ``[E]`` of the best reading of each action from the frames alone
    (``visible_actions``). The ceiling of any probe of latents inferred from frames, hence of the
    factor-entity correspondence on these data [R]."""
    return (visible_actions(video, actions, cell) == actions).reshape(-1, actions.shape[-1]).mean(0)
