"""The paper's maths as pure functions: token trees, the 4-D tree mask, greedy and
distribution-preserving verification. No I/O, no logging, no global state.

A call's *items* for one sequence are laid out as ``[chain..., root, nodes..., probes...]``:

- ``chain``: committed tokens not yet in the KV cache (the prompt at prefill), causal;
- ``root``: the last committed token (the prompt's last token, then each step's bonus token);
- ``nodes``: the draft tree under the root, each with a parent (``-1`` = the root);
- ``probes``: items hung off a host (the root, a node or an earlier probe) — ESP's mask tokens, or
  LADE's 2-D lookahead window: each sees the prefix, what its host sees, its host and (masks only)
  the host's earlier masks.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Tree:
    """A draft tree under the root: ``tokens[i]`` with parent ``parents[i]`` (``-1`` = root, else an
    earlier index), ``scores[i]`` its path score. Siblings never repeat a token (``add`` merges)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def child(self, parent: int, token: int) -> int | None:
        for i, (t, p) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if p == parent and t == token:
                return i
        return None

    def add(self, parent: int, token: int, score: float = 0.0) -> int:
        """Index of ``token`` under ``parent``, appended unless that sibling exists (no duplicates)."""
        hit = self.child(parent, token)
        if hit is not None:
            self.scores[hit] = max(self.scores[hit], score)
            return hit
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.scores.append(float(score))
        return len(self.tokens) - 1

    def add_path(self, tokens, score: float = 0.0, max_nodes: int | None = None) -> None:
        parent = -1
        for tok in tokens:
            if max_nodes is not None and self.child(parent, tok) is None and len(self) >= max_nodes:
                return
            parent = self.add(parent, tok, score)

    def depth(self, i: int) -> int:
        d = 0
        while i >= 0:
            i, d = self.parents[i], d + 1
        return d

    def ancestors(self, i: int) -> list[int]:
        """Node indices from ``i``'s parent up to the root's child (root excluded)."""
        out = []
        i = self.parents[i]
        while i >= 0:
            out.append(i)
            i = self.parents[i]
        return out

    def path(self, i: int) -> list[int]:
        """Tokens from the root's child down to node ``i``."""
        return [self.tokens[j] for j in reversed([i, *self.ancestors(i)])] if i >= 0 else []

    def children(self, i: int) -> list[int]:
        return [j for j, p in enumerate(self.parents) if p == i]


def build_tree(probs: torch.Tensor, topk: tuple[int, ...], max_nodes: int, max_depth: int | None = None) -> Tree:
    """ESP's tree from per-level distributions ``probs`` [levels, V]: level j keeps its top-K_j
    tokens, a path's score is the product of its levels' probabilities (independence [R]), and the
    ``max_nodes`` best-scoring nodes are kept (ancestor-closed: a child never outscores its parent)."""
    levels = min(probs.shape[0], len(topk), max_depth if max_depth is not None else 10**9)
    tree = Tree()
    if levels <= 0 or max_nodes <= 0:
        return tree
    cands = []
    for j in range(levels):
        p, ids = torch.topk(probs[j].float(), min(int(topk[j]), probs.shape[-1]))
        cands.append(list(zip(ids.tolist(), p.tolist(), strict=True)))
    # best-first expansion over the product of the levels (a frontier of partial paths)
    frontier = [(-cands[0][i][1], 0, -1, i) for i in range(len(cands[0]))]  # (-score, level, parent, rank)
    heapq.heapify(frontier)
    while frontier and len(tree) < max_nodes:
        neg, level, parent, rank = heapq.heappop(frontier)
        node = tree.add(parent, cands[level][rank][0], -neg)
        if level + 1 < levels:
            for r, (_, p) in enumerate(cands[level + 1]):
                heapq.heappush(frontier, (neg * p, level + 1, node, r))
    return tree


def chain_tree(probs: torch.Tensor, max_depth: int | None = None) -> Tree:
    """The mechanism ablation: a top-1 chain instead of the tree."""
    levels = probs.shape[0] if max_depth is None else min(probs.shape[0], max_depth)
    tree = Tree()
    parent, score = -1, 1.0
    for j in range(levels):
        p, tok = probs[j].float().max(-1)
        score *= float(p)
        parent = tree.add(parent, int(tok), score)
    return tree


def item_visibility(n_chain: int, tree: Tree, probe_hosts: list[int],
                    chained: list[bool] | None = None) -> torch.Tensor:
    """Boolean [n, n] in-call visibility (row = query item, column = key item) for the layout
    ``[chain, root, nodes, probes]``. ``probe_hosts[k]`` is probe k's host: ``-1`` the root, ``i >= 0``
    node i, ``-2 - j`` an earlier probe j. A *chained* probe (``chained[k]``, default: all; ESP's
    masks) on a root or node host sees what the host's previous chained probe sees (or the host),
    and itself; any other probe sees what its host sees, and itself (LADE's 2-D window: a level-0
    chain and one column per probe-hosted chain)."""
    n_nodes, n_probes = len(tree), len(probe_hosts)
    chained = [True] * n_probes if chained is None else list(chained)
    n = n_chain + 1 + n_nodes + n_probes
    vis = np.zeros((n, n), dtype=bool)
    root = n_chain
    vis[: root + 1, : root + 1] = np.tri(root + 1, dtype=bool)
    for i, par in enumerate(tree.parents):  # parents come first: a node sees what its parent sees
        q = root + 1 + i
        vis[q] = vis[root if par < 0 else root + 1 + par]
        vis[q, q] = True
    first = root + 1 + n_nodes
    last: dict[int, int] = {}
    for k, host in enumerate(probe_hosts):
        q = first + k
        if host <= -2:
            if -2 - host >= k:
                raise ValueError(f"probe {k} is hosted by a later probe {-2 - host}")
            vis[q] = vis[first - 2 - host]
        else:
            prev = last.get(host) if chained[k] else None
            vis[q] = vis[root if host < 0 else root + 1 + host] if prev is None else vis[prev]
            if chained[k]:
                last[host] = q
        vis[q, q] = True
    return torch.from_numpy(vis)


def item_positions(start: int, n_chain: int, tree: Tree, probe_hosts: list[int],
                   chained: list[bool] | None = None) -> list[int]:
    """Position ids: the chain and root continue the prefix; a node sits at root + depth; chained
    probe k of host h sits at h + (its rank among h's chained probes) + 1; any other probe one past
    its host (a probe host: that probe's position)."""
    root = start + n_chain
    pos = list(range(start, root + 1)) + [root + tree.depth(i) for i in range(len(tree))]
    chained = [True] * len(probe_hosts) if chained is None else list(chained)
    first = len(pos)
    count: dict[int, int] = {}
    for k, host in enumerate(probe_hosts):
        if host <= -2:
            pos.append(pos[first - 2 - host] + 1)
            continue
        rank = 1
        if chained[k]:
            count[host] = count.get(host, 0) + 1
            rank = count[host]
        base = root if host < 0 else root + tree.depth(host)
        pos.append(base + rank)
    return pos


def tree_attention_mask(vis_rows: list[torch.Tensor], cache_valid: list[int], cache_len: int,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive 4-D mask [B, 1, n, cache_len + n]: row b sees its first ``cache_valid[b]`` cache slots
    and, within the call, what ``vis_rows[b]`` allows. Padded query items see only themselves
    (a fully masked row would turn SDPA's output into NaN)."""
    n = max(v.shape[0] for v in vis_rows)
    allow = torch.zeros(len(vis_rows), 1, n, cache_len + n, dtype=torch.bool)
    for b, vis in enumerate(vis_rows):
        m = vis.shape[0]
        allow[b, 0, :m, : cache_valid[b]] = True
        allow[b, 0, :m, cache_len: cache_len + m] = vis
        for q in range(m, n):
            allow[b, 0, q, cache_len + q] = True
    mask = torch.zeros(allow.shape, dtype=dtype)
    return mask.masked_fill_(~allow, torch.finfo(dtype).min)


def verify_greedy(tree: Tree, argmax: list[int]) -> tuple[list[int], int]:
    """Longest path whose tokens equal the target's argmax at each parent. ``argmax[0]`` is the
    root's, ``argmax[1 + i]`` node i's. Returns (accepted node indices, bonus token)."""
    accepted, cur = [], -1
    while True:
        want = argmax[cur + 1]
        nxt = tree.child(cur, want)
        if nxt is None:
            return accepted, want
        accepted.append(nxt)
        cur = nxt


def verify_sampling(tree: Tree, probs: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
    """Distribution-preserving tree verification with deterministic drafts (``probs`` [1 + nodes, V]
    target distributions, row 0 the root's): at each accepted node, try its children in order,
    accepting child c with probability r(c) under the current residual r (then r(c) := 0,
    renormalised); when none is accepted the bonus is drawn from the residual. The emitted token
    is then distributed exactly as the target's."""
    accepted, cur = [], -1
    while True:
        r = probs[cur + 1].double().clone()
        moved = False
        for c in tree.children(cur):
            tok = tree.tokens[c]
            total = float(r.sum())
            if total <= 0:
                break
            if float(torch.rand((), generator=generator, dtype=torch.float64)) < float(r[tok]) / total:
                accepted.append(c)
                cur, moved = c, True
                break
            r[tok] = 0.0
        if not moved:
            r = r / r.sum()
            return accepted, int(torch.multinomial(r, 1, generator=generator))


def mean_accepted_length(new_tokens: int, calls: int) -> float:
    """(new tokens − 1) ÷ (model calls − 1): the prefill's token is not drafted; AR gives 1.0."""
    return float("nan") if calls <= 1 else (new_tokens - 1) / (calls - 1)


def ratio_interval(a, b, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0) -> tuple[float, float, float]:
    """mean(a) / mean(b) and its paired bootstrap interval (BCa over the units, e.g. prompts, that
    ``a`` and ``b`` share; percentile where BCa is undefined; collapsed with < 2 pairs)."""
    import warnings

    from scipy.stats import bootstrap

    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    r = float(a.mean() / b.mean())
    if a.size < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return r, r, r

    def stat(x, y, axis=-1):
        return x.mean(axis=axis) / y.mean(axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in ("BCa", "percentile"):
            ci = bootstrap((a, b), stat, paired=True, vectorized=True, confidence_level=confidence,
                           n_resamples=n_resamples, method=method, random_state=np.random.default_rng(seed))
            lo, hi = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
            if np.isfinite(lo) and np.isfinite(hi):
                return r, lo, hi
    return r, r, r


#: a bf16 divergence counts as a near tie when the reference's top-2 logit gap is at most this
#: many bf16 ulps (2^-7 relative) of its top logit [R]
TIE_ULPS = 4


def judge(new: list[int], ref: list[int], ref_logits, bf16: bool) -> dict:
    """The lossless verdict of one output against its greedy reference — one rule for the GPU check
    and the ``full`` scale. ``exact``; else the first divergence and, in bf16 only, whether the token
    chosen there is within ``TIE_ULPS`` bf16 ulps of the reference's own top logit (a near tie: a
    batched or tree-shaped bf16 call rounds differently from a one-token step) [R]. fp32 must be
    exact; a divergence in length or past the reference's logits is a failure."""
    if new == ref:
        return {"exact": True, "ok": True}
    i = next((k for k, (a, b) in enumerate(zip(new, ref, strict=False)) if a != b), min(len(new), len(ref)))
    if i >= len(ref_logits) or i >= len(new):
        return {"exact": False, "ok": False, "first_diff": i, "why": "length"}
    row = ref_logits[i]
    top2 = row.topk(2).values
    gap = float(top2[0] - top2[1])
    tol = TIE_ULPS * 2.0 ** -7 * max(1.0, abs(float(top2[0])))
    chosen_gap = float(row.max() - row[new[i]])
    tie = bf16 and chosen_gap <= tol
    return {"exact": False, "ok": bool(tie), "first_diff": i, "top2_gap": gap, "chosen_gap": chosen_gap,
            "tie_tol": tol}
