"""The synthetic long-tailed multi-label text generator (research notes §6.1) [R].

A planted label DAG (parent → child Bernoulli SEM), power-law frequencies, indicative words per
label (weaker for tail labels), and a *spurious* co-occurrence: every tail label is tied to a head
"partner" label in the training/IID distribution (P(partner | tail) = ``spurious``) and never
co-occurs with it in the shifted distribution (``shift=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import SynthConfig


@dataclass(frozen=True)
class World:
    cfg: SynthConfig
    parent: np.ndarray      # parent[j] = planted parent of label j, or -1 for a root
    rate: np.ndarray        # root rate / P(child | parent on)
    partner: np.ndarray     # partner[j] = the head label tied to tail label j, or -1
    words: tuple[tuple[str, ...], ...]

    @property
    def dag(self) -> np.ndarray:
        L = len(self.parent)
        B = np.zeros((L, L), bool)
        for j, p in enumerate(self.parent):
            if p >= 0:
                B[p, j] = True
        return B

    @property
    def names(self) -> list[str]:
        return [f"label{j:02d}" for j in range(len(self.parent))]


def make_world(cfg: SynthConfig | None = None, seed: int = 0) -> World:
    cfg = cfg or SynthConfig()
    rng = np.random.default_rng(seed)
    L = cfg.n_labels
    freq = cfg.head_rate * (cfg.tail_rate / cfg.head_rate) ** (np.arange(L) / max(L - 1, 1))
    parent = -np.ones(L, int)
    rate = freq.copy()
    for j in range(3, L):  # labels 0..2 are head roots; later labels may hang below a more frequent one
        if rng.random() < 0.6:
            cands = [p for p in range(j) if freq[p] >= 1.5 * freq[j]]
            if cands:
                p = int(rng.choice(cands))
                parent[j] = p
                rate[j] = min(0.9, freq[j] / freq[p])
    n_tail = max(1, int(round(0.3 * L)))
    partner = -np.ones(L, int)
    for j in range(L - n_tail, L):
        anc = set()
        a = parent[j]
        while a >= 0:
            anc.add(int(a))
            a = parent[a]
        cands = [h for h in range(3) if h not in anc]
        partner[j] = int(rng.choice(cands)) if cands else -1
    words = []
    for j in range(L):
        n = cfg.words_per_label if partner[j] < 0 else max(1, cfg.words_per_label // 2)
        words.append(tuple(f"w{j}x{m}" for m in range(n)))
    return World(cfg, parent, rate, partner, tuple(words))


def sample(world: World, n: int, seed: int, shift: bool = False) -> tuple[list[str], np.ndarray]:
    """``n`` documents (texts, n×L binary labels) from the world; ``shift`` flips the spurious tie."""
    cfg, L = world.cfg, len(world.parent)
    rng = np.random.default_rng(seed)
    Y = np.zeros((n, L), np.int8)
    for j in range(L):  # parents precede children by construction
        p = world.parent[j]
        prob = np.full(n, world.rate[j]) if p < 0 else np.where(Y[:, p] == 1, world.rate[j], 0.002)
        Y[:, j] = rng.random(n) < prob
    for j in np.flatnonzero(world.partner >= 0):
        h, on = world.partner[j], Y[:, j] == 1
        if shift:
            Y[on, h] = 0
        else:
            Y[on & (rng.random(n) < cfg.spurious), h] = 1
    texts = []
    for i in range(n):
        toks = [f"n{t}" for t in rng.integers(0, 400, cfg.doc_len)]
        for j in np.flatnonzero(Y[i]):
            strength = 0.6 if world.partner[j] < 0 else 0.45
            toks += [w for w in world.words[j] if rng.random() < strength]
        rng.shuffle(toks)
        texts.append(" ".join(toks))
    return texts, Y


def splits(world: World, n_train: int, n_eval: int, seed: int) -> dict[str, tuple[list[str], np.ndarray]]:
    """train / dev (IID, for thresholds) / test (IID) / test_shift (flipped spurious tie)."""
    return {
        "train": sample(world, n_train, seed * 10 + 1),
        "dev": sample(world, n_eval, seed * 10 + 2),
        "test": sample(world, n_eval, seed * 10 + 3),
        "test_shift": sample(world, n_eval, seed * 10 + 4, shift=True),
    }
