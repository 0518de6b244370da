"""The training-free drafters ESP is compared against, behind one interface and verifier, plus a
small registry (``make_drafter``): a new drafter is one decorated factory.

- ``ar``: plain autoregressive decoding.
- ``pld``: prompt n-gram drafting; with ``max_matches=1`` it proposes exactly what transformers'
  ``PromptLookupCandidateGenerator`` proposes (first match, longest n-gram first, EOS-trimmed) [C].
- ``lade``: our own Lookahead decoding (Jacobi window as probes on the root, n-gram pool keyed by
  the first token, up to G guesses verified as one tree) — a 1-D window, not LADE's 2-D one [R].
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
    name = "lade"

    def __init__(self, cfg: LADEConfig | None = None, seed: int = 0):
        self.cfg = cfg or LADEConfig()
        self.seed = seed

    def start(self, prompts):
        # one generator per row, each seeded alike: a row's guesses do not depend on its batch
        self.rng = [random.Random(self.seed) for _ in prompts]
        self.prompts = prompts
        self.window = [[r.choice(p) for _ in range(self.cfg.window)] for r, p in zip(self.rng, prompts, strict=True)]
        self.pool: list[dict[int, list[list[int]]]] = [{} for _ in prompts]

    def draft(self, b, context, max_depth):
        tree = Tree()
        for rank, cont in enumerate(self.pool[b].get(context[-1], [])[: self.cfg.guesses]):
            tree.add_path(cont[:max_depth], score=1.0 / (1 + rank), max_nodes=self.cfg.max_nodes)
        return tree, [(-1, t) for t in self.window[b]]

    def wanted(self, b, tree, probes, accepted):
        return list(range(1 + len(tree), 1 + len(tree) + self.cfg.window))

    def observe(self, b, rec: CallRecord):
        W, N = self.cfg.window, self.cfg.ngram
        base = 1 + len(rec.tree)
        outs = rec.probs[base: base + W].argmax(-1).tolist()
        slots = [rec.context[-1], *self.window[b]]       # slot 0 = root, 1..W = guesses
        pool = self.pool[b]
        for s in range(1, W + 1):                          # n-gram ending with the output at slot s
            lo = s - (N - 2)
            if lo < 0:
                continue
            gram = slots[lo: s + 1] + [outs[s - 1]]
            key, cont = gram[0], gram[1:]
            lst = pool.setdefault(key, [])
            if cont in lst:
                lst.remove(cont)
            lst.insert(0, cont)
            del lst[4 * self.cfg.guesses:]
        m = len(rec.accepted)                              # Jacobi shift by the tokens committed
        self.window[b] = [outs[s + m] if s + m < W else self.rng[b].choice(self.prompts[b])
                          for s in range(W)]


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
