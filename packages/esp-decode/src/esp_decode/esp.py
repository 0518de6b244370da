"""ESP: mask tokens from the model's own embedding space, a pruned top-K tree, one fused call.

``ESPDecoder`` is the public entry point; ``ESPDrafter`` plugs into ``decode.generate`` like the
baselines do, and ``HybridDrafter`` merges PLD's prompt matches into ESP's tree (``esp+pld``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .config import ESPConfig
from .core import Tree, build_tree, chain_tree
from .decode import CallRecord, Drafter, generate


class ESPDrafter(Drafter):
    name = "esp"

    def __init__(self, cfg: ESPConfig | None = None, mask_embedding: torch.Tensor | None = None):
        self.cfg = cfg or ESPConfig()
        if self.cfg.mask_init == "learned" and mask_embedding is None:
            raise ValueError("mask_init='learned' needs mask_embedding (see experiments.learn_mask)")
        self.learned = mask_embedding

    def start(self, prompts: list[list[int]]) -> None:
        table = self.model.get_input_embeddings().weight
        self.sums = [table[torch.tensor(p, device=table.device)].float().sum(0) for p in prompts]
        self.counts = [len(p) for p in prompts]
        self.vocab_mean = table.float().mean(0)
        self.prompt_mean = [s / c for s, c in zip(self.sums, self.counts, strict=True)]
        self.pending = [None] * len(prompts)   # [levels, V] probabilities for the next tree
        self.probe_log: list[list[tuple[int, list[list[int]]]]] = [[] for _ in prompts]

    def mask_vector(self, b: int) -> torch.Tensor:
        init = self.cfg.mask_init
        if init == "prompt_mean":
            return self.prompt_mean[b]
        if init == "context_mean":
            return self.sums[b] / self.counts[b]
        if init == "vocab_mean":
            return self.vocab_mean
        if init == "pad":   # esp-nullmask: the slot keeps the pad token's embedding
            return self.model.get_input_embeddings().weight[self.pad_token_id]
        return self.learned.reshape(-1)

    def draft(self, b: int, context: list[int], max_depth: int) -> tuple[Tree, list[tuple[int, int | None]]]:
        k = self.cfg.num_masks
        if k == 0:
            return Tree(), []
        probs = self.pending[b]
        tree = Tree()
        if probs is not None and probs.shape[0] > 0 and max_depth > 0:
            if self.cfg.shape == "chain":
                tree = chain_tree(probs, max_depth)
            else:
                tree = build_tree(probs, self.cfg.topk, self.cfg.max_nodes, max_depth)
        return tree, self.probes_for(tree)

    def probes_for(self, tree: Tree) -> list[tuple[int, int | None]]:
        k = self.cfg.num_masks
        if self.cfg.attach == "all":
            hosts = [-1, *range(len(tree))]
        elif self.cfg.attach == "top":
            hosts = [-1, *best_path(tree)]
        else:
            hosts = [-1]
        return [(h, None) for h in hosts for _ in range(k)]

    def wanted(self, b, tree, probes, accepted) -> list[int]:
        """The masks that seed the next tree, and the root's masks (the probe log)."""
        base = 1 + len(tree)
        return mask_rows(tree, probes, accepted) + [base + k for k, (h, t) in enumerate(probes) if h == -1 and t is None]

    def observe(self, b: int, rec: CallRecord) -> None:
        if self.cfg.mask_init == "context_mean":
            table = self.model.get_input_embeddings().weight
            added = [rec.tree.tokens[a] for a in rec.accepted] + [rec.bonus]
            self.sums[b] = self.sums[b] + table[torch.tensor(added, device=table.device)].float().sum(0)
            self.counts[b] += len(added)
        self.pending[b] = masks_after(rec)
        root_masks = [1 + len(rec.tree) + k for k, (h, t) in enumerate(rec.probes) if h == -1 and t is None]
        if root_masks:
            top5 = torch.topk(rec.probs[root_masks], min(5, rec.probs.shape[-1]), -1).indices.tolist()
            self.probe_log[b].append((len(rec.context) - 1, top5))

    def probe_accuracy(self, sequences: list[list[int]]) -> dict[str, float]:
        """Top-1 / top-5 accuracy of the root's mask j (depth j + 1) against the model's own greedy
        future token (``sequences``: prompt + output), over every logged call."""
        hits: dict[str, list[float]] = {}
        for b, seq in enumerate(sequences):
            for root, top5 in self.probe_log[b]:
                for j, cands in enumerate(top5):
                    target = root + j + 2
                    if target >= len(seq):
                        continue
                    hits.setdefault(f"top1_depth{j + 1}", []).append(float(cands[0] == seq[target]))
                    hits.setdefault(f"top5_depth{j + 1}", []).append(float(seq[target] in cands))
        return {k: float(np.mean(v)) for k, v in sorted(hits.items())}


def best_path(tree: Tree) -> list[int]:
    """Node indices of the tree's best-scoring root-to-leaf chain (best child at each level)."""
    out, cur = [], -1
    while True:
        kids = tree.children(cur)
        if not kids:
            return out
        cur = max(kids, key=lambda c: (tree.scores[c], -c))
        out.append(cur)


def masks_after(rec: CallRecord) -> torch.Tensor | None:
    """The next tree's per-level distributions: the masks of the deepest accepted node that carries
    masks; a host at depth d_h whose path was accepted to depth m lends masks m − d_h onwards."""
    rows = mask_rows(rec.tree, rec.probes, rec.accepted)
    return rec.probs[rows] if rows else None


def mask_rows(tree: Tree, probes: list[tuple[int, int | None]], accepted: list[int]) -> list[int]:
    """The call's item rows that ``masks_after`` reads (empty: no usable mask)."""
    base = 1 + len(tree)
    by_host: dict[int, list[int]] = {}
    for k, (h, t) in enumerate(probes):
        if t is None:
            by_host.setdefault(h, []).append(base + k)
    path = [-1, *accepted]
    m = len(accepted)
    for depth in range(m, -1, -1):
        host = path[depth]
        if host in by_host:
            return by_host[host][m - depth:]
    return []


class HybridDrafter(Drafter):
    """``esp+pld``: PLD's prompt matches first, then ESP's best nodes up to the budget; masks on
    every node. Duplicate siblings are merged by ``Tree.add``."""

    name = "esp+pld"

    def __init__(self, esp: ESPDrafter, pld: Drafter):
        self.esp, self.pld = esp, pld

    def bind(self, model) -> None:
        super().bind(model)
        self.esp.pad_token_id = self.pad_token_id
        self.esp.bind(model)
        self.pld.bind(model)

    def start(self, prompts):
        self.esp.start(prompts)
        self.pld.start(prompts)

    def mask_vector(self, b: int) -> torch.Tensor:
        return self.esp.mask_vector(b)

    def draft(self, b, context, max_depth):
        tree, _ = self.pld.draft(b, context, max_depth)
        esp_tree, _ = self.esp.draft(b, context, max_depth)
        budget = self.esp.cfg.max_nodes
        where = {-1: -1}
        for i, (tok, par, sc) in enumerate(zip(esp_tree.tokens, esp_tree.parents, esp_tree.scores, strict=True)):
            parent = where[par]
            if tree.child(parent, tok) is None and len(tree) >= budget:
                break
            where[i] = tree.add(parent, tok, sc)
        return tree, self.esp.probes_for(tree)

    def wanted(self, b, tree, probes, accepted):
        return self.esp.wanted(b, tree, probes, accepted)

    def observe(self, b, rec):
        self.esp.observe(b, rec)
        self.pld.observe(b, rec)


class ESPDecoder:
    """``ESPDecoder(model, tokenizer).generate(input_ids, max_new_tokens)`` -> (output_ids, stats).

    ``input_ids``: a [B, T] tensor (rows may be right-padded with ``attention_mask``-style
    ``lengths``) or a list of token lists. Output rows are prompt + new tokens (as lists when the
    lengths differ)."""

    def __init__(self, model, tokenizer=None, num_masks: int | None = None, topk=None, max_nodes: int | None = None,
                 mask_init: str | None = None, attach: str | None = None, shape: str | None = None,
                 mask_embedding: torch.Tensor | None = None):
        # a knob left at None takes ESPConfig's default (tune's SmolLM2 choice, tuned_smollm2.json)
        self.model, self.tokenizer = model, tokenizer
        given = dict(num_masks=num_masks, topk=None if topk is None else tuple(int(k) for k in topk),
                     max_nodes=max_nodes, mask_init=mask_init, attach=attach, shape=shape)
        self.cfg = replace(ESPConfig(), **{k: v for k, v in given.items() if v is not None})
        self.mask_embedding = mask_embedding

    def drafter(self) -> ESPDrafter:
        return ESPDrafter(replace(self.cfg), self.mask_embedding)

    def generate(self, input_ids, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None,
                 lengths: list[int] | None = None, top_k: int = 0, top_p: float = 1.0):
        rows = _rows(input_ids, lengths)
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if eos is None and self.tokenizer is not None:
            eos = self.tokenizer.eos_token_id
        new, stats = generate(self.model, rows, self.drafter(), max_new_tokens, temperature=temperature,
                              top_k=top_k, top_p=top_p, seed=seed, eos_token_id=eos)
        outs = [r + n for r, n in zip(rows, new, strict=True)]
        if len(outs) == 1:
            return torch.tensor([outs[0]]), stats[0]
        return outs, stats


def _rows(input_ids, lengths=None) -> list[list[int]]:
    if isinstance(input_ids, torch.Tensor):
        ids = input_ids.reshape(-1, input_ids.shape[-1]).tolist()
        return [r[: lengths[i]] if lengths else r for i, r in enumerate(ids)]
    return [list(map(int, r)) for r in input_ids]
