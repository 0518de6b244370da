"""CVRP components: savings / sweep / nearest neighbour, relocate / swap / intra-route 2-opt,
ruin-and-recreate with cheapest or regret-2 reinsertion (the key function) [R]."""

from __future__ import annotations

import numpy as np

EPS = 1e-9


class CVRP:
    CONSTRUCTS = ("savings", "sweep", "nn")
    OPS = ("relocate", "swap", "2opt")
    PERTURBS = ("ruin_random", "ruin_cluster")
    KEYS = ("cheapest", "regret2")

    def __init__(self, distance_matrix, demands, vehicle_capacity, coordinates=None):
        self.D = np.asarray(distance_matrix, dtype=float)
        self.q = np.asarray(demands, dtype=float)
        self.Q = float(vehicle_capacity)
        self.xy = None if coordinates is None else np.asarray(coordinates, dtype=float)
        self.n = len(self.D)
        self.size = self.n - 1

    def route_cost(self, r) -> float:
        if not r:
            return 0.0
        p = [0, *r, 0]
        return float(self.D[p[:-1], p[1:]].sum())

    def cost(self, routes) -> float:
        return sum(self.route_cost(r) for r in routes)

    def export(self, routes) -> list[list[int]]:
        return [[int(c) for c in r] for r in routes if r]

    def load(self, r) -> float:
        return float(self.q[r].sum()) if r else 0.0

    # -- construction
    def construct(self, kind: str, key: str, rng, randomized: bool):
        cust = list(range(1, self.n))
        if kind == "savings":
            return self.savings(rng if randomized else None)
        if kind == "sweep" and self.xy is not None:
            ang = np.arctan2(*(self.xy[1:] - self.xy[0]).T[::-1])
            off = float(rng.uniform(-np.pi, np.pi)) if randomized else 0.0
            order = [cust[i] for i in np.argsort((ang - off) % (2 * np.pi))]
            routes, cur = [], []
            for c in order:
                if self.load(cur) + self.q[c] > self.Q:
                    routes.append(cur)
                    cur = []
                cur.append(c)
            return [*routes, cur]
        left = set(cust)
        routes = []
        while left:
            r, load, last = [], 0.0, 0
            while True:
                cand = [c for c in left if load + self.q[c] <= self.Q]
                if not cand:
                    break
                d = self.D[last, cand]
                if randomized:
                    d = d * rng.uniform(1.0, 1.3, len(cand))
                c = cand[int(np.argmin(d))]
                r.append(c)
                load += self.q[c]
                last = c
                left.discard(c)
            routes.append(r)
        return routes

    def savings(self, rng=None):
        n = self.n
        routes = {i: [i] for i in range(1, n)}
        where = {i: i for i in range(1, n)}
        s = self.D[0, 1:, None] + self.D[0, None, 1:] - self.D[1:, 1:]
        if rng is not None:
            s = s * rng.uniform(0.9, 1.1, s.shape)
        iu = np.triu_indices(n - 1, 1)
        order = np.argsort(-s[iu], kind="stable")
        for k in order:
            i, j = int(iu[0][k]) + 1, int(iu[1][k]) + 1
            ri, rj = where[i], where[j]
            if ri == rj or self.load(routes[ri]) + self.load(routes[rj]) > self.Q:
                continue
            a, b = routes[ri], routes[rj]
            if a[-1] == i and b[0] == j:
                new = a + b
            elif a[0] == i and b[-1] == j:
                new = b + a
            elif a[0] == i and b[0] == j:
                new = a[::-1] + b
            elif a[-1] == i and b[-1] == j:
                new = a + b[::-1]
            else:
                continue
            routes[ri] = new
            del routes[rj]
            for c in b:
                where[c] = ri
        return [r for _, r in sorted(routes.items())]

    # -- insertion (the key function)
    def insertion_costs(self, routes, c):
        """Per route, (best delta, position) for inserting customer c, inf when it does not fit."""
        out = []
        for r in routes:
            if self.load(r) + self.q[c] > self.Q:
                out.append((np.inf, 0))
                continue
            p = np.array([0, *r, 0])
            inc = self.D[p[:-1], c] + self.D[c, p[1:]] - self.D[p[:-1], p[1:]]
            k = int(np.argmin(inc))
            out.append((float(inc[k]), k))
        out.append((float(2 * self.D[0, c]), 0))  # a new route
        return out

    def recreate(self, routes, removed, key: str):
        routes = [list(r) for r in routes]
        left = list(removed)
        while left:
            if key == "regret2":
                best = None
                for c in left:
                    ic = sorted(self.insertion_costs(routes, c), key=lambda x: x[0])
                    regret = (ic[1][0] if len(ic) > 1 else 0.0) - ic[0][0]
                    if best is None or regret > best[0] + EPS:
                        best = (regret, c)
                c = best[1]
            else:
                c = left[0]
            left.remove(c)
            ic = self.insertion_costs(routes, c)
            k = int(np.argmin([x[0] for x in ic]))
            if k == len(routes):
                routes.append([c])
            else:
                routes[k].insert(ic[k][1], c)
        return routes

    # -- improvement
    def relocate(self, routes, first: bool):
        best = (-EPS, None)
        for a, ra in enumerate(routes):
            for i, c in enumerate(ra):
                prev = ra[i - 1] if i else 0
                nxt = ra[i + 1] if i + 1 < len(ra) else 0
                gain = self.D[prev, c] + self.D[c, nxt] - self.D[prev, nxt]
                for b, rb in enumerate(routes):
                    if b == a:
                        rest = ra[:i] + ra[i + 1:]
                        p = np.array([0, *rest, 0])
                    elif self.load(rb) + self.q[c] > self.Q:
                        continue
                    else:
                        p = np.array([0, *rb, 0])
                    inc = self.D[p[:-1], c] + self.D[c, p[1:]] - self.D[p[:-1], p[1:]]
                    k = int(np.argmin(inc))
                    d = inc[k] - gain
                    if d < best[0]:
                        best = (d, (a, i, b, k))
                if first and best[1] is not None:
                    break
            if first and best[1] is not None:
                break
        if best[1] is None:
            return routes, False
        a, i, b, k = best[1]
        routes = [list(r) for r in routes]
        c = routes[a].pop(i)
        routes[b].insert(k, c)
        return [r for r in routes if r], True

    def swap(self, routes, first: bool):
        best = (-EPS, None)
        loads = [self.load(r) for r in routes]
        for a in range(len(routes)):
            for b in range(a + 1, len(routes)):
                ra, rb = routes[a], routes[b]
                for i, c in enumerate(ra):
                    for j, e in enumerate(rb):
                        if loads[a] - self.q[c] + self.q[e] > self.Q or loads[b] - self.q[e] + self.q[c] > self.Q:
                            continue
                        pa, na = (ra[i - 1] if i else 0), (ra[i + 1] if i + 1 < len(ra) else 0)
                        pb, nb = (rb[j - 1] if j else 0), (rb[j + 1] if j + 1 < len(rb) else 0)
                        d = (self.D[pa, e] + self.D[e, na] - self.D[pa, c] - self.D[c, na]
                             + self.D[pb, c] + self.D[c, nb] - self.D[pb, e] - self.D[e, nb])
                        if d < best[0]:
                            best = (d, (a, i, b, j))
                            if first:
                                break
                    if first and best[1] is not None:
                        break
        if best[1] is None:
            return routes, False
        a, i, b, j = best[1]
        routes = [list(r) for r in routes]
        routes[a][i], routes[b][j] = routes[b][j], routes[a][i]
        return routes, True

    def two_opt(self, routes, first: bool):
        for a, r in enumerate(routes):
            if len(r) < 3:
                continue
            p = np.array([0, *r, 0])
            m = len(p) - 1
            x, y = p[:-1], p[1:]
            dxy = self.D[x, y]
            delta = self.D[np.ix_(x, x)] + self.D[np.ix_(y, y)] - dxy[:, None] - dxy[None, :]
            delta = np.where(np.triu(np.ones((m, m), bool), 2), delta, 0.0)
            k = int(np.argmin(delta))
            i, j = divmod(k, m)
            if delta[i, j] < -EPS:
                p[i + 1:j + 1] = p[i + 1:j + 1][::-1]
                routes = [list(rr) for rr in routes]
                routes[a] = [int(c) for c in p[1:-1]]
                return routes, True
        return routes, False

    def local_search(self, routes, ops, improve: str, clock, max_moves: int | None = None):
        ops = [o for o in ops if o in self.OPS]
        if not ops:
            return routes
        fns = {"relocate": self.relocate, "swap": self.swap, "2opt": self.two_opt}
        first = improve == "first"
        moves = max_moves or 10 * self.n
        while moves > 0 and not clock.out():
            improved = False
            for op in ops:
                routes, ok = fns[op](routes, first)
                if ok:
                    improved = True
                    moves -= 1
                    break
            if not improved:
                break
        return routes

    # -- perturbation
    def perturb(self, routes, kind: str, strength: int, key: str, rng):
        k = max(2, min(self.n - 2, 2 * strength + 1))
        if kind == "ruin_cluster":
            centre = int(rng.integers(1, self.n))
            removed = [int(c) for c in np.argsort(self.D[centre]) if c != 0][:k]
        else:
            removed = [int(c) for c in rng.choice(np.arange(1, self.n), k, replace=False)]
        rem = set(removed)
        kept = [[c for c in r if c not in rem] for r in routes]
        return self.recreate([r for r in kept if r], list(rng.permutation(removed)), key)
