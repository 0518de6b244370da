"""TSP components: constructors, 2-opt / Or-opt (NumPy-vectorised), perturbations [R]."""

from __future__ import annotations

import numpy as np

EPS = 1e-9


class TSP:
    CONSTRUCTS = ("nn", "insertion", "random")
    OPS = ("2opt", "oropt")
    PERTURBS = ("double_bridge", "segment_reverse", "ruin_recreate")
    KEYS = ("cheapest", "farthest", "nearest")

    def __init__(self, distance_matrix, coordinates=None):
        self.D = np.asarray(distance_matrix, dtype=float)
        self.n = self.size = len(self.D)

    # -- objective
    def cost(self, t: np.ndarray) -> float:
        return float(self.D[t, np.roll(t, -1)].sum())

    def export(self, t: np.ndarray) -> list[int]:
        return [int(x) for x in t]

    # -- construction
    def construct(self, kind: str, key: str, rng, randomized: bool) -> np.ndarray:
        n = self.n
        start = int(rng.integers(n)) if randomized else 0
        if kind == "random":
            return rng.permutation(n)
        if kind == "nn":
            left = np.ones(n, bool)
            left[start] = False
            tour = [start]
            for _ in range(n - 1):
                d = np.where(left, self.D[tour[-1]], np.inf)
                nxt = int(np.argmin(d))
                tour.append(nxt)
                left[nxt] = False
            return np.array(tour)
        order = [i for i in range(n) if i != start]
        if randomized:
            order = list(rng.permutation(order))
        return self.insert(np.array([start]), order, key)

    def insert(self, tour: np.ndarray, nodes, key: str) -> np.ndarray:
        """Insert ``nodes`` into ``tour``; the key function picks which node goes next and where:
        cheapest (min insertion cost), farthest (max distance to the tour), nearest."""
        tour = list(tour)
        left = list(nodes)
        while left:
            if key == "cheapest" or len(tour) < 2:
                j = left.pop(0)
            else:
                dmin = self.D[np.ix_(left, tour)].min(1)
                j = left.pop(int(np.argmax(dmin) if key == "farthest" else np.argmin(dmin)))
            t = np.array(tour)
            nx = np.roll(t, -1)
            inc = self.D[t, j] + self.D[j, nx] - self.D[t, nx]
            pos = int(np.argmin(inc))
            tour.insert(pos + 1, j)
        return np.array(tour)

    # -- improvement
    def two_opt(self, t: np.ndarray, first: bool) -> tuple[np.ndarray, bool]:
        n = self.n
        a, b = t, np.roll(t, -1)
        dab = self.D[a, b]
        delta = self.D[np.ix_(a, a)] + self.D[np.ix_(b, b)] - dab[:, None] - dab[None, :]
        mask = np.triu(np.ones((n, n), bool), 2)
        mask[0, n - 1] = False
        delta = np.where(mask, delta, 0.0)
        if first:
            cand = np.flatnonzero(delta < -EPS)
            if not len(cand):
                return t, False
            i, j = divmod(int(cand[0]), n)
        else:
            k = int(np.argmin(delta))
            i, j = divmod(k, n)
            if delta[i, j] >= -EPS:
                return t, False
        t = t.copy()
        t[i + 1:j + 1] = t[i + 1:j + 1][::-1]
        return t, True

    def or_opt(self, t: np.ndarray, first: bool) -> tuple[np.ndarray, bool]:
        """Move a segment of 1-3 cities (either orientation) to its best edge: one n x n delta
        matrix per segment length (rows: segment start, columns: the edge it goes into)."""
        n = self.n
        D = self.D
        nxt = np.roll(t, -1)
        edge = D[t, nxt]
        best = (-EPS, None)
        ks = np.arange(n)
        for L in (1, 2, 3):
            i = np.arange(n - L + 1)
            s0, sl = t[i], t[i + L - 1]
            prev, after = t[i - 1], t[(i + L) % n]
            gain = D[prev, s0] + D[sl, after] - D[prev, after]
            fwd = D[np.ix_(s0, t)] + D[np.ix_(sl, nxt)] - edge[None, :]
            rev = D[np.ix_(sl, t)] + D[np.ix_(s0, nxt)] - edge[None, :]
            bad = ((ks[None, :] - i[:, None]) % n >= n - 1) | ((ks[None, :] - i[:, None]) % n < L)
            for arr, flip in ((fwd, False), (rev, True)):
                d = np.where(bad, np.inf, arr - gain[:, None])
                if first:
                    cand = np.flatnonzero(d < -EPS)
                    if len(cand):
                        r, k = divmod(int(cand[0]), n)
                        return self._move(t, int(i[r]), L, k, flip), True
                    continue
                r, k = divmod(int(np.argmin(d)), n)
                if d[r, k] < best[0]:
                    best = (float(d[r, k]), (int(i[r]), L, k, flip))
        if best[1] is None:
            return t, False
        return self._move(t, *best[1]), True

    @staticmethod
    def _move(t: np.ndarray, i: int, L: int, k: int, flip: bool) -> np.ndarray:
        seg = t[i:i + L][::-1] if flip else t[i:i + L]
        rest = np.concatenate([t[:i], t[i + L:]])
        pos = k if k < i else k - L
        return np.concatenate([rest[:pos + 1], seg, rest[pos + 1:]])

    def local_search(self, t, ops, improve: str, clock, max_moves: int | None = None):
        ops = [o for o in ops if o in self.OPS]
        if not ops:
            return t
        first = improve == "first"
        moves = max_moves or 20 * self.n
        while moves > 0 and not clock.out():
            improved = False
            for op in ops:
                fn = self.two_opt if op == "2opt" else self.or_opt
                t, ok = fn(t, first)
                while ok and moves > 0:
                    moves -= 1
                    improved = True
                    t, ok = fn(t, first)
            if not improved:
                break
        return t

    # -- perturbation
    def perturb(self, t, kind: str, strength: int, key: str, rng) -> np.ndarray:
        n = self.n
        if kind == "double_bridge" and n >= 8:
            out = t
            for _ in range(max(1, strength // 2)):
                a, b, c = sorted(rng.choice(np.arange(1, n), 3, replace=False))
                out = np.concatenate([out[:a], out[b:c], out[a:b], out[c:]])
            return out
        if kind == "segment_reverse":
            L = max(2, min(n - 1, strength * max(2, n // 20)))
            i = int(rng.integers(0, n - L))
            out = t.copy()
            out[i:i + L] = out[i:i + L][::-1]
            return out
        k = max(2, min(n - 3, 2 * strength + 1))
        centre = int(rng.integers(n))
        removed = list(np.argsort(self.D[centre])[:k])
        rem = {int(x) for x in removed}
        keep = np.array([x for x in t if int(x) not in rem])
        return self.insert(keep, list(rng.permutation(removed)), key)
