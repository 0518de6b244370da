"""The training-free drafters ESP is compared against, behind one interface and verifier, plus a
small registry (``make_drafter``): a new drafter is one decorated factory.

- ``ar``: plain autoregressive decoding.
- ``pld``: prompt n-gram drafting; with ``max_matches=1`` it proposes exactly what transformers'
  ``PromptLookupCandidateGenerator`` proposes (first match, longest n-gram first, EOS-trimmed) [C].
- ``lade``: Lookahead decoding's 2-D window and LRU n-gram pool after LADE's
  ``jacobi_greedy_search_multilevel`` (our own code; the window is a tree of probes under LADE's
  lookahead mask, the guesses one verified tree) [C].
- ``stand``: STAND-style logit n-gram memory: the verifier's top-k next tokens stored per (1- and
  2-token) context, drafted as a best-first tree (deterministic top-K in greedy mode) [R].

``eagle2`` (``eagle.py``), the upper reference, needs a trained EAGLE head: it is registered apart
(``TRAINED``), so ``DRAFTERS`` stays the training-free set.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from icml26_shared import UserError

from .config import ESPConfig, LADEConfig, PLDConfig, STANDConfig
from .core import Tree
from .decode import CallRecord, Drafter

DRAFTERS: dict[str, Callable[..., Drafter]] = {}   # the training-free ones
TRAINED: dict[str, Callable[..., Drafter]] = {}    # reference drafters that need trained weights


def register(name: str, trained: bool = False):
    def deco(fn):
        (TRAINED if trained else DRAFTERS)[name] = fn
        return fn
    return deco


def make_drafter(name: str, **kw) -> Drafter:
    fn = DRAFTERS.get(name) or TRAINED.get(name)
    if fn is None:
        raise UserError(f"unknown drafter {name!r} (choose from {', '.join([*DRAFTERS, *TRAINED])})")
    return fn(**kw)


class PLDDrafter(Drafter):
    name = "pld"

    def __init__(self, cfg: PLDConfig | None = None, eos_token_id=None):
        self.cfg = cfg or PLDConfig()
        self.eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))

    def matches(self, context: list[int]) -> list[list[int]]:
        """Continuations after earlier occurrences of the context's last n-gram (n from
        ``max_ngram`` down to 1; the first n with a match wins; left to right), distinct."""
        L = len(context)
        for n in range(min(self.cfg.max_ngram, L - 1), 0, -1):
            gram = context[-n:]
            found: list[list[int]] = []
            for i in range(L - n + 1):
                if context[i: i + n] != gram:
                    continue
                start = i + n
                cont = context[start: min(start + self.cfg.num_pred, L)]
                if not cont:
                    continue
                for j, t in enumerate(cont):
                    if t in self.eos:
                        cont = cont[:j]
                        break
                if not cont:  # transformers keeps an EOS-emptied match (then falls back to AR)
                    return found or [[]]
                if cont not in found:
                    found.append(cont)
                if len(found) >= self.cfg.max_matches:
                    return found
            if found:
                return found
        return []

    def draft(self, b, context, max_depth):
        tree = Tree()
        for rank, cont in enumerate(self.matches(context)):
            tree.add_path(cont[:max_depth], score=1.0 / (1 + rank), max_nodes=self.cfg.max_nodes)
        return tree, []


class LADEDrafter(Drafter):
    """Lookahead decoding with its 2-D window, after LADE's ``jacobi_greedy_search_multilevel``
    (greedy, ``ALWAYS_FWD_ONE``): level 0 holds W - 1 tokens after the root (columns 1..W - 1), levels
    1..N - 2 hold W columns each; token (l, c) sits at root + c + l and sees the root, level 0 up to
    column c and its own column below it (LADE's lookahead mask). The window starts as W + N - 3
    random copies from the prompt; N - 2 warm-up calls fill the levels; then each call's last level
    gives, per column, an n-gram (level 0 .. N - 2 of the column + the output) for a pool keyed by
    its first token, LRU-capped at G; the window shifts one column per call. Up to G pooled n-grams
    keyed by the root are verified as one tree by the shared verifier."""

    name = "lade"

    def __init__(self, cfg: LADEConfig | None = None, seed: int = 0):
        self.cfg = cfg or LADEConfig()
        self.seed = seed

    def start(self, prompts):
        N, W = self.cfg.ngram, self.cfg.window
        # one generator per row, each seeded alike: a row's window does not depend on its batch
        self.rng = [random.Random(self.seed) for _ in prompts]
        #: per row: levels[0] (columns 1..), levels[1..fill] (columns 0..); full when fill == N - 2
        self.levels = [[[r.choice(p) for _ in range(W + N - 3)]] for r, p in zip(self.rng, prompts, strict=True)]
        self.pool: list[dict[int, list[tuple[int, ...]]]] = [{} for _ in prompts]
        self.last_level: list[list[int]] = [[] for _ in prompts]
        if self.cfg.pool_from_prompt:
            for b, p in enumerate(prompts):
                for i in range(len(p) - N + 1):
                    self._remember(b, p[i], tuple(p[i + 1: i + N]))

    def _remember(self, b: int, key: int, gram: tuple[int, ...]) -> None:
        """LADE's ``update_token_map`` for one n-gram: LRU list of at most G entries per key."""
        lst = self.pool[b].setdefault(key, [])
        if gram in lst:
            lst.remove(gram)
        elif len(lst) >= self.cfg.guesses:
            del lst[0]
        if self.cfg.guesses > 0:
            lst.append(gram)

    def window_probes(self, b: int) -> tuple[list[tuple[int, int | None]], list[int]]:
        """The lookahead branch as probes (hosts ``-2 - j`` = probe j) and the probe indices of the
        level whose outputs ``observe`` reads (level 0 before the first level is filled)."""
        levels = self.levels[b]
        probes: list[tuple[int, int | None]] = []
        at: dict[tuple[int, int], int] = {}
        for c, tok in enumerate(levels[0], start=1):            # level 0: a chain after the root
            at[(0, c)] = len(probes)
            probes.append((-1 if c == 1 else -2 - at[(0, c - 1)], tok))
        for lv in range(1, len(levels)):                       # level l: one column at a time
            for c, tok in enumerate(levels[lv]):
                below = (lv - 1, c)
                host = -1 if below == (0, 0) else -2 - at[below]
                at[(lv, c)] = len(probes)
                probes.append((host, tok))
        top = len(levels) - 1
        read = [at[(top, c)] for c in range(1 if top == 0 else 0, len(levels[top]) + (1 if top == 0 else 0))]
        return probes, read

    def draft(self, b, context, max_depth):
        tree = Tree()
        if len(self.levels[b]) == self.cfg.ngram - 1:          # warm-up done: the verification branch
            for rank, gram in enumerate(self.pool[b].get(context[-1], [])[: self.cfg.guesses]):
                tree.add_path(list(gram)[:max_depth], score=1.0 / (1 + rank), max_nodes=self.cfg.max_nodes)
        probes, self.last_level[b] = self.window_probes(b)
        return tree, probes

    def wanted(self, b, tree, probes, accepted):
        return [1 + len(tree) + k for k in self.last_level[b]]

    def observe(self, b, rec: CallRecord):
        N = self.cfg.ngram
        base = 1 + len(rec.tree)
        outs = rec.probs[[base + k for k in self.last_level[b]]].argmax(-1).tolist()
        levels = self.levels[b]
        fill = len(levels) - 1
        if fill == 0:                                          # first warm-up call
            levels[0] = levels[0][1:]
            levels.append(outs)
        elif fill < N - 2:                                     # later warm-up calls
            for lv in range(fill + 1):
                levels[lv] = levels[lv][1:]
            levels.append(outs[1:])
        else:                                                  # full: collect n-grams, shift one column
            keys = [rec.context[-1], *levels[0]]
            for c in range(self.cfg.window):
                self._remember(b, keys[c], tuple(levels[lv][c] for lv in range(1, N - 1)) + (outs[c],))
            levels[0] = levels[1][1:]
            for lv in range(1, N - 2):
                levels[lv] = levels[lv + 1]
            levels[N - 2] = outs
        if self.cfg.pool_from_prompt:                          # LADE's append_new_generated_pool
            ctx = list(rec.context)
            for tok in [rec.tree.tokens[a] for a in rec.accepted] + [rec.bonus]:
                ctx.append(tok)
                if len(ctx) >= N:
                    self._remember(b, ctx[-N], tuple(ctx[-N + 1:]))


class STANDDrafter(Drafter):
    name = "stand"

    def __init__(self, cfg: STANDConfig | None = None):
        self.cfg = cfg or STANDConfig()

    def start(self, prompts):
        self.mem1: list[dict] = [{} for _ in prompts]
        self.mem2: list[dict] = [{} for _ in prompts]

    def _cands(self, b, prev: int | None, tok: int) -> list[tuple[int, float]]:
        hit = self.mem2[b].get((prev, tok)) if prev is not None else None
        return hit if hit is not None else self.mem1[b].get(tok, [])

    def draft(self, b, context, max_depth):
        cfg = self.cfg
        tree = Tree()
        depth_cap = min(len(cfg.topk), max_depth)
        prev = context[-2] if len(context) > 1 else None
        frontier = [(p, -1, 0, t, context[-1]) for t, p in self._cands(b, prev, context[-1])[: cfg.topk[0]]]
        while frontier and len(tree) < cfg.max_nodes and depth_cap > 0:
            frontier.sort(key=lambda x: (-x[0], x[2]))
            score, parent, level, tok, ptok = frontier.pop(0)
            node = tree.add(parent, tok, score)
            if level + 1 < depth_cap:
                frontier += [(score * p, node, level + 1, t, tok)
                             for t, p in self._cands(b, ptok, tok)[: cfg.topk[level + 1]]]
        return tree, []

    def observe(self, b, rec: CallRecord):
        k = self.cfg.store_topk
        # verified contexts only: the root (its context is committed) and each accepted node
        path_tokens = [rec.context[-1]] + [rec.tree.tokens[a] for a in rec.accepted]
        rows = [0] + [1 + a for a in rec.accepted]
        prevs = [rec.context[-2] if len(rec.context) > 1 else None] + path_tokens[:-1]
        p, ids = torch.topk(rec.probs[rows], min(k, rec.probs.shape[-1]), dim=-1)
        for tok, prev, pr, ir in zip(path_tokens, prevs, p.tolist(), ids.tolist(), strict=True):
            cands = list(zip(ir, pr, strict=True))
            self.mem1[b][tok] = cands
            if prev is not None:
                self.mem2[b][(prev, tok)] = cands


@register("ar")
def _ar(**kw) -> Drafter:
    return Drafter()


@register("pld")
def _pld(pld: PLDConfig | None = None, eos_token_id=None, **kw) -> Drafter:
    return PLDDrafter(pld, eos_token_id)


@register("lade")
def _lade(lade: LADEConfig | None = None, seed: int = 0, **kw) -> Drafter:
    return LADEDrafter(lade, seed)


@register("stand")
def _stand(stand: STANDConfig | None = None, **kw) -> Drafter:
    return STANDDrafter(stand)


@register("esp")
def _esp(esp: ESPConfig | None = None, mask_embedding=None, **kw) -> Drafter:
    from .esp import ESPDrafter

    return ESPDrafter(esp, mask_embedding)


@register("esp-nullmask")
def _esp_nullmask(esp: ESPConfig | None = None, **kw) -> Drafter:
    """The mechanism removed: ESP's tree, probes and items, the mask slots left at the pad token's
    embedding (no embedding-space probe)."""
    from dataclasses import replace

    from .esp import ESPDrafter

    d = ESPDrafter(replace(esp or ESPConfig(), mask_init="pad"))
    d.name = "esp-nullmask"
    return d


@register("esp-chain")
def _esp_chain(esp: ESPConfig | None = None, mask_embedding=None, **kw) -> Drafter:
    """The tree removed: ESP's masks drafting a top-1 chain."""
    from dataclasses import replace

    from .esp import ESPDrafter

    d = ESPDrafter(replace(esp or ESPConfig(), shape="chain"), mask_embedding)
    d.name = "esp-chain"
    return d


@register("esp+pld")
def _hybrid(esp: ESPConfig | None = None, pld: PLDConfig | None = None, mask_embedding=None,
            eos_token_id=None, **kw) -> Drafter:
    from .esp import ESPDrafter, HybridDrafter

    return HybridDrafter(ESPDrafter(esp, mask_embedding), PLDDrafter(pld, eos_token_id))


@register("eagle2", trained=True)
def _eagle2(eagle_head=None, eagle_path=None, eagle2=None, **kw) -> Drafter:
    """``eagle_head`` (a loaded ``eagle.EagleHead``, shared by many drafters) or ``eagle_path`` (an
    EAGLE-1/2 checkpoint folder)."""
    from .eagle import Eagle2Drafter, load_head

    if eagle_head is None:
        if eagle_path is None:
            raise UserError("drafter 'eagle2' needs an EAGLE-1/2 checkpoint folder (--eagle-path DIR)")
        eagle_head = load_head(eagle_path)
    return Eagle2Drafter(eagle_head, eagle2)
