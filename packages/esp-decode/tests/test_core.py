"""The tree, its 4-D mask and verification, as specified."""

import itertools

import numpy as np
import pytest
import torch
from esp_decode.core import (
    Tree,
    build_tree,
    item_positions,
    item_visibility,
    tree_attention_mask,
    verify_greedy,
    verify_sampling,
)
from scipy.stats import chisquare


def _tree():
    t = Tree()
    a = t.add(-1, 5)
    b = t.add(-1, 6)
    t.add(a, 7)
    c = t.add(a, 8)
    t.add(c, 9)
    t.add(b, 5)
    return t


def test_visibility_matches_the_definition():
    t = _tree()
    hosts = [-1, -1, 0, 0, 4]
    n_chain = 2
    vis = item_visibility(n_chain, t, hosts).numpy()
    root = n_chain
    idx = lambda i: root + 1 + i  # noqa: E731
    for i in range(len(t)):  # a node sees the prefix (chain + root), its ancestors and itself
        want = {*range(root + 1), idx(i), *(idx(a) for a in t.ancestors(i))}
        assert set(np.flatnonzero(vis[idx(i)])) == want
    for k, h in enumerate(hosts):  # a mask sees the prefix, its host's ancestors, the host, earlier masks
        q = root + 1 + len(t) + k
        host_set = set(range(root + 1)) if h < 0 else {*range(root + 1), idx(h), *(idx(a) for a in t.ancestors(h))}
        earlier = {root + 1 + len(t) + j for j in range(k) if hosts[j] == h}
        assert set(np.flatnonzero(vis[q])) == host_set | earlier | {q}
    pos = item_positions(10, n_chain, t, hosts)
    assert pos[:3] == [10, 11, 12] and pos[idx(4)] == 12 + 3
    assert pos[root + 1 + len(t):] == [13, 14, 14, 15, 16]


def test_4d_mask_hides_other_rows_cache_and_keeps_padding_finite():
    v1 = torch.tensor([[True]])
    v2 = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    m = tree_attention_mask([v1, v2], [2, 4], cache_len=4)
    assert m.shape == (2, 1, 3, 7)
    allowed = m == 0
    assert allowed[0, 0, 0, :2].all() and not allowed[0, 0, 0, 2:4].any()
    assert allowed[0, 0, 1].tolist() == [False] * 5 + [True, False]  # padded query sees itself only
    assert allowed[1, 0, :, :4].all() and allowed[1, 0, :, 4:].equal(v2)


def test_build_tree_is_the_best_ancestor_closed_subset():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(3, 12), -1)
    topk, budget = (4, 3, 2), 10
    t = build_tree(probs, topk, budget)
    assert len(t) == budget
    for i in range(len(t)):  # no duplicate siblings, parents before children, scores are products
        sib = [t.tokens[j] for j in t.children(t.parents[i])]
        assert len(sib) == len(set(sib))
        assert t.parents[i] < i
        path = t.path(i)
        assert t.scores[i] == pytest.approx(float(np.prod([probs[d, tok] for d, tok in enumerate(path)])))
    # brute force: the best `budget` prefixes of the per-level top-K product
    tops = [torch.topk(probs[j], k).indices.tolist() for j, k in enumerate(topk)]
    prefixes = {}
    for d in range(1, 4):
        for combo in itertools.product(*tops[:d]):
            prefixes[combo] = float(np.prod([probs[j, tok] for j, tok in enumerate(combo)]))
    best = sorted(prefixes.values(), reverse=True)[:budget]
    assert sorted(t.scores, reverse=True) == pytest.approx(best)


def test_verify_greedy_takes_the_longest_matching_path():
    t = _tree()
    # argmax at root=5 -> node0; at node0 = 8 -> node3; at node3 = 9 -> node4; at node4 = 2 (bonus)
    argmax = [5, 8, 0, 0, 9, 2, 0]
    acc, bonus = verify_greedy(t, argmax)
    assert acc == [0, 3, 4] and bonus == 2
    acc, bonus = verify_greedy(t, [1] + [0] * 6)
    assert acc == [] and bonus == 1


def test_verify_sampling_preserves_the_target_distribution():
    """The first emitted token (accepted child or residual draw) follows the root's target p."""
    p = torch.tensor([0.05, 0.4, 0.3, 0.15, 0.1])
    t = Tree()
    t.add(-1, 1)
    t.add(-1, 3)
    t.add(-1, 4)
    probs = torch.stack([p] + [torch.full((5,), 0.2)] * 3)
    g = torch.Generator().manual_seed(0)
    n = 3000
    counts = np.zeros(5)
    for _ in range(n):
        acc, bonus = verify_sampling(t, probs, g)
        counts[t.tokens[acc[0]] if acc else bonus] += 1
    expected = p.double().numpy()
    assert chisquare(counts, n * expected / expected.sum()).pvalue > 1e-3
    # a verifier that always accepts the first candidate would be far off
    assert counts[1] / n < 0.5

