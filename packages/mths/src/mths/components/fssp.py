"""Permutation flow shop components: NEH with Taillard's acceleration (vectorised over
insertion positions), insertion / adjacent-swap search, iterated-greedy destruction [R]."""

from __future__ import annotations

import numpy as np


def _chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x_i = max(x_{i-1}, a_i) + b_i with x_{-1} = 0, as a cumulative max (a >= 0)."""
    s = np.cumsum(b)
    prev = np.concatenate([[0.0], s[:-1]])
    return s + np.maximum.accumulate(a - prev)


class FSSP:
    CONSTRUCTS = ("neh", "spt", "random")
    OPS = ("insert", "swap")
    PERTURBS = ("destruct", "swap_random")
    KEYS = ("sum_desc", "sum_desc_last", "dev_desc")

    def __init__(self, processing_times, num_jobs=None, num_machines=None):
        self.p = np.asarray(processing_times, dtype=float)  # jobs x machines
        self.n, self.m = self.p.shape
        self.size = self.n

    def heads(self, seq) -> np.ndarray:
        e = np.zeros((len(seq), self.m))
        if not len(seq):
            return e
        ps = self.p[list(seq)]
        e[:, 0] = np.cumsum(ps[:, 0])
        for j in range(1, self.m):
            e[:, j] = _chain(e[:, j - 1], ps[:, j])
        return e

    def cost(self, seq) -> float:
        return float(self.heads(seq)[-1, -1]) if len(seq) else 0.0

    def export(self, seq) -> list[int]:
        return [int(x) for x in seq]

    def insertion_makespans(self, seq, job) -> np.ndarray:
        """Makespan of inserting ``job`` at every position 0..len(seq) (Taillard 1990)."""
        k = len(seq)
        e = np.vstack([np.zeros((1, self.m)), self.heads(seq)])  # e[i] = heads before position i
        ps = self.p[list(seq)][::-1] if k else np.zeros((0, self.m))
        q = np.zeros((k + 1, self.m))
        if k:
            rq = np.zeros((k, self.m))
            rq[:, -1] = np.cumsum(ps[:, -1])
            for j in range(self.m - 2, -1, -1):
                rq[:, j] = _chain(rq[:, j + 1], ps[:, j])
            q[:k] = rq[::-1]
        f = np.zeros((k + 1, self.m))
        pj = self.p[job]
        f[:, 0] = e[:, 0] + pj[0]
        for j in range(1, self.m):
            f[:, j] = np.maximum(f[:, j - 1], e[:, j]) + pj[j]
        return (f + q).max(1)

    def best_insert(self, seq, job, last: bool):
        ms = self.insertion_makespans(seq, job)
        if last:
            pos = int(len(ms) - 1 - np.argmin(ms[::-1]))
        else:
            pos = int(np.argmin(ms))
        return [*seq[:pos], job, *seq[pos:]], float(ms[pos])

    def neh(self, order, key: str):
        seq: list[int] = []
        for job in order:
            seq, _ = self.best_insert(seq, int(job), key == "sum_desc_last")
        return seq

    def priority(self, key: str) -> np.ndarray:
        if key == "dev_desc":
            return np.argsort(-(self.p.mean(1) + self.p.std(1)), kind="stable")
        return np.argsort(-self.p.sum(1), kind="stable")

    def construct(self, kind: str, key: str, rng, randomized: bool):
        if kind == "random":
            return [int(x) for x in rng.permutation(self.n)]
        if kind == "spt":
            order = np.argsort(self.p.sum(1), kind="stable")
            return [int(x) for x in order]
        order = list(self.priority(key))
        if randomized and self.n > 2:
            i, j = rng.choice(self.n, 2, replace=False)
            order[i], order[j] = order[j], order[i]
        return self.neh(order, key)

    def local_search(self, seq, ops, improve: str, clock, max_moves: int | None = None):
        ops = [o for o in ops if o in self.OPS]
        if not ops:
            return list(seq)
        seq = list(seq)
        cur = self.cost(seq)
        moves = max_moves or 5 * self.n
        while moves > 0 and not clock.out():
            improved = False
            if "insert" in ops:
                for job in list(seq):
                    rest = [x for x in seq if x != job]
                    cand, c = self.best_insert(rest, job, False)
                    if c < cur - 1e-9:
                        seq, cur, improved = cand, c, True
                        moves -= 1
                        if improve == "first":
                            break
            if "swap" in ops and not (improved and improve == "first"):
                for i in range(self.n - 1):
                    cand = seq[:]
                    cand[i], cand[i + 1] = cand[i + 1], cand[i]
                    c = self.cost(cand)
                    if c < cur - 1e-9:
                        seq, cur, improved = cand, c, True
                        moves -= 1
            if not improved:
                break
        return seq

    def perturb(self, seq, kind: str, strength: int, key: str, rng):
        seq = list(seq)
        if kind == "swap_random":
            for _ in range(max(1, strength)):
                i, j = rng.choice(self.n, 2, replace=False)
                seq[i], seq[j] = seq[j], seq[i]
            return seq
        d = max(1, min(self.n - 1, strength + 1))
        removed = [int(x) for x in rng.choice(seq, d, replace=False)]
        rest = [x for x in seq if x not in set(removed)]
        for job in removed:
            rest, _ = self.best_insert(rest, job, key == "sum_desc_last")
        return rest
