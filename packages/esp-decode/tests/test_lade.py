"""The 2-D Lookahead drafter against LADE's own logic: its lookahead mask (the README figure at
N 4, W 5, 2 guesses) and, after k calls, its window and n-gram pool against an oracle.

The oracle's window and pool updates are transcribed from LADE's ``jacobi_greedy_search_multilevel``
and ``update_token_map`` (hao-ai-lab/LookaheadDecoding, lade/decoding.py, Apache-2.0, Copyright the
LookaheadDecoding authors), greedy with ``ALWAYS_FWD_ONE``; its Jacobi outputs come from plain
causal forwards of each window token's own sequence, not from the package's tree mask.
"""

import random

import torch
from esp_decode.baselines import LADEDrafter, make_drafter
from esp_decode.config import LADEConfig
from esp_decode.core import Tree, item_positions, item_visibility
from esp_decode.decode import generate

# LADE's README mask figure (media/mask.png), N = 4, W = 5, two guesses of N - 1 = 3 tokens. Rows and
# columns: the root; level 0 (4 tokens, columns 1-4); level 1 (5, columns 0-4); level 2 (5); guess a
# (3); guess b (3). '#' = attends.
FIGURE = """
#....................
##...................
###..................
####.................
#####................
#....#...............
##....#..............
###....#.............
####....#............
#####....#...........
#....#....#..........
##....#....#.........
###....#....#........
####....#....#.......
#####....#....#......
#..............#.....
#..............##....
#..............###...
#.................#..
#.................##.
#.................###
"""


def test_lookahead_mask_equals_lades_figure():
    N, W = 4, 5
    dr = LADEDrafter(LADEConfig(ngram=N, window=W, guesses=2))
    dr.levels = [[[11, 12, 13, 14], [21, 22, 23, 24, 25], [31, 32, 33, 34, 35]]]   # a full window
    probes, read = dr.window_probes(0)
    assert [t for _, t in probes] == [11, 12, 13, 14, 21, 22, 23, 24, 25, 31, 32, 33, 34, 35]
    assert read == list(range(9, 14))                       # the outputs of level N - 2
    tree = Tree()
    tree.add_path([41, 42, 43])
    tree.add_path([51, 52, 53])
    hosts = [h for h, _ in probes]
    chained = [False] * len(probes)
    vis = item_visibility(0, tree, hosts, chained).numpy()
    order = [0, *range(7, 21), *range(1, 7)]                # ours: root, guesses, window -> the figure's
    got = ["".join("#" if v else "." for v in vis[i, order]) for i in order]
    assert got == FIGURE.split(), "\n".join(got)
    pos = item_positions(10, 0, tree, hosts, chained)
    assert [pos[i] - 10 for i in order] == [0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 1, 2, 3, 1, 2, 3]


def _oracle(model, prompt, ref, N, W, G, calls, seed=0):
    """LADE's greedy loop (window, pool, hits), one state snapshot per call."""
    rng = random.Random(seed)
    past = [[rng.choice(prompt) for _ in range(W + N - 3)]] + [None] * (N - 2)
    fill, token_map, ctx, out, snaps = 0, {}, list(prompt), [], []

    def jacobi(level, cols):   # argmax after each window token's own sequence (plain causal forward)
        res = []
        for c in cols:
            seq = ctx + past[0][:c] + [past[lv][c] for lv in range(1, level + 1)]
            with torch.no_grad():
                res.append(int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
        return res

    for _ in range(calls):
        lst = ctx[-1]
        max_hit = 0
        remaining = len(ref) - len(out)
        if past[N - 2] is not None and lst in token_map:
            for guess in token_map[lst]:
                g = list(guess)[: remaining - 1]
                gg = 0
                while gg < len(g) and g[gg] == ref[len(out) + gg]:
                    gg += 1
                max_hit = max(max_hit, gg)
        if past[1] is None:                                   # the first warm-up call
            new = jacobi(0, range(1, len(past[0]) + 1))
            past[0] = past[0][1:]
            past[1] = new
            fill += 1
        elif past[N - 2] is None:                             # later warm-up calls
            cur = jacobi(fill, range(len(past[fill])))
            for lv in range(fill + 1):
                past[lv] = past[lv][1:]
            past[fill + 1] = cur[1:]
            fill += 1
        else:                                                 # update_token_map, then the shift
            new = jacobi(N - 2, range(W))
            keys = [lst] + past[0]
            for i in range(W):
                tup = tuple(past[ll][i] for ll in range(1, N - 1)) + (new[i],)
                lst_i = token_map.setdefault(keys[i], [])
                if tup in lst_i:
                    lst_i.remove(tup)
                    lst_i.append(tup)
                elif len(lst_i) < G:
                    lst_i.append(tup)
                else:
                    token_map[keys[i]] = lst_i[1:] + [tup]
            past[0] = past[1][1:]
            for lv in range(1, N - 2):
                past[lv] = past[lv + 1][:]
            past[N - 2] = new
        add = ref[len(out): len(out) + max_hit + 1]
        ctx += add
        out += add
        snaps.append(([list(p) for p in past if p is not None], {k: list(v) for k, v in token_map.items()}))
    return snaps


def test_window_and_pool_after_k_calls_equal_lades(trained_tiny):
    model, prompts = trained_tiny
    N, W, G, tokens = 4, 5, 2, 40
    for prompt in (prompts[0], prompts[9]):
        ref = generate(model, [prompt], make_drafter("ar"), tokens)[0][0]
        dr = make_drafter("lade", lade=LADEConfig(ngram=N, window=W, guesses=G))
        snaps = []
        orig = dr.observe

        def spy(b, rec, dr=dr, orig=orig, snaps=snaps):
            orig(b, rec)
            snaps.append(([list(lv) for lv in dr.levels[b]], {k: list(v) for k, v in dr.pool[b].items()}))

        dr.observe = spy
        new, st = generate(model, [prompt], dr, tokens)
        assert new[0] == ref
        k = len(snaps) - 1           # the last call is cut by max_new_tokens: compare the ones before
        want = _oracle(model, prompt, ref, N, W, G, k)
        assert snaps[:k] == want
        assert any(len(v) == G for v in snaps[k - 1][1].values())   # the LRU cap was reached
        assert max(st[0]["accepted_lengths"]) > 1                   # and guesses were accepted
