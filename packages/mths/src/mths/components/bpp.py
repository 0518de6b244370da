"""Bin packing components: FFD / BFD / FF, item moves that empty the emptiest bin, pairwise
swaps that fill bins, and repacking of the emptiest bins. The search minimises bins minus
Falkenauer's fill term (a tie-breaker < 1); the reported cost is the number of bins [R]."""

from __future__ import annotations

import numpy as np


class BPP:
    CONSTRUCTS = ("ffd", "bfd", "ff")
    OPS = ("move", "swap")
    PERTURBS = ("repack",)
    KEYS = ("weight_desc", "best_fit")

    def __init__(self, weights, capacity):
        self.w = np.asarray(weights, dtype=float)
        self.C = float(capacity)
        self.n = self.size = len(self.w)

    def cost(self, bins) -> float:
        loads = np.array([self.w[b].sum() for b in bins if b])
        return float(len(loads) - np.mean((loads / self.C) ** 2))

    def export(self, bins) -> list[list[int]]:
        return [[int(i) for i in b] for b in bins if b]

    def pack(self, bins, items, best_fit: bool):
        bins = [list(b) for b in bins]
        loads = [float(self.w[b].sum()) for b in bins]
        for i in items:
            wi = self.w[i]
            fits = [k for k, ld in enumerate(loads) if ld + wi <= self.C + 1e-9]
            if fits:
                k = max(fits, key=lambda k: loads[k]) if best_fit else fits[0]
                bins[k].append(int(i))
                loads[k] += wi
            else:
                bins.append([int(i)])
                loads.append(wi)
        return bins

    def construct(self, kind: str, key: str, rng, randomized: bool):
        if kind == "ff":
            order = rng.permutation(self.n) if randomized else np.arange(self.n)
        else:
            noise = rng.uniform(0, 1e-6, self.n) if randomized else np.zeros(self.n)
            order = np.argsort(-(self.w + noise), kind="stable")
        return self.pack([], [int(i) for i in order], kind == "bfd" or key == "best_fit")

    def local_search(self, bins, ops, improve: str, clock, max_moves: int | None = None):
        ops = [o for o in ops if o in self.OPS]
        if not ops:
            return bins
        bins = [list(b) for b in bins if b]
        moves = max_moves or 2 * self.n
        while moves > 0 and not clock.out():
            improved = False
            loads = [float(self.w[b].sum()) for b in bins]
            if "move" in ops and len(bins) > 1:
                e = int(np.argmin(loads))
                others = [k for k in np.argsort(loads)[::-1] if k != e]
                trial = [list(b) for b in bins]
                tl = loads[:]
                ok = True
                for i in sorted(trial[e], key=lambda i: -self.w[i]):
                    dest = next((k for k in others if tl[k] + self.w[i] <= self.C + 1e-9), None)
                    if dest is None:
                        ok = False
                        break
                    trial[dest].append(i)
                    tl[dest] += self.w[i]
                if ok:
                    trial[e] = []
                    bins = [b for b in trial if b]
                    improved = True
                    moves -= 1
            if "swap" in ops and not improved:
                improved = self._swap(bins, loads)
                moves -= 1
            if not improved:
                break
        return bins

    def _swap(self, bins, loads) -> bool:
        """Move weight from a lighter bin to a heavier one by exchanging two items."""
        order = np.argsort(loads)
        for a in order:  # light bin
            for b in order[::-1]:  # heavy bin
                if loads[b] <= loads[a] or a == b:
                    continue
                room = self.C - loads[b]
                for i in bins[a]:
                    for j in bins[b]:
                        d = self.w[i] - self.w[j]
                        if 1e-9 < d <= room + 1e-9:
                            bins[a].remove(i)
                            bins[b].remove(j)
                            bins[a].append(j)
                            bins[b].append(i)
                            return True
        return False

    def perturb(self, bins, kind: str, strength: int, key: str, rng):
        bins = [list(b) for b in bins if b]
        loads = np.array([self.w[b].sum() for b in bins])
        k = max(2, min(len(bins), strength + 1))
        light = list(np.argsort(loads)[: k // 2 + 1])
        extra = [int(x) for x in rng.choice(len(bins), min(len(bins), k - len(light) + 1), replace=False)]
        drop = set(light) | set(extra)
        items = [i for d in drop for i in bins[d]]
        kept = [b for t, b in enumerate(bins) if t not in drop]
        items.sort(key=lambda i: -self.w[i])
        return self.pack(kept, items, key == "best_fit")
