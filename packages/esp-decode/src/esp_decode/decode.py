"""The fused draft/verify loop shared by every drafter: one model call per step under a 4-D mask,
greedy or distribution-preserving verification, KV cache cut back to the accepted path.

A drafter proposes, per sequence, a ``Tree`` under the root plus probes (``(host, token)``; token
``None`` is a mask token, embedded by the drafter, and a host's masks form a chain; a host ``-2 - j``
is probe j) and observes each call's outcome (see ``core.item_visibility``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from icml26_shared import UserError

from .core import (
    Tree,
    item_positions,
    item_visibility,
    mean_accepted_length,
    tree_attention_mask,
    verify_sampling,
)

#: architectures whose attention takes a custom 4-D mask and explicit position ids
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "olmo2", "phi3")


class ItemProbs:
    """One row's per-item distributions of a call (``[items, V]``: root, nodes, probes), indexed like
    a tensor. The LM head and the softmax run only on the items that are read: verification asks
    for the root and the accepted path (``fill``, batched over rows), drafters for what their
    ``wanted`` names (batched too); any other item is computed when read."""

    def __init__(self, hidden: torch.Tensor, head, temperature: float, warp=None):
        self.hidden, self.head, self.temperature, self.warp = hidden, head, temperature, warp
        self.logits: dict[int, torch.Tensor] = {}
        self.shape = (hidden.shape[0], head.weight.shape[0])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if isinstance(key, int):
            return self[[key]][0]
        rows = list(range(self.shape[0]))[key] if isinstance(key, slice) else [int(i) for i in key]
        fill([self], [rows])
        if not rows:
            return torch.zeros(0, self.shape[1])
        logits = torch.stack([self.logits[i] for i in rows])
        if self.temperature > 0:
            logits = logits / self.temperature
            if self.warp is not None:   # top-k / top-p: the target distribution itself is warped
                logits = self.warp(None, logits)
        return torch.softmax(logits, -1)


def fill(items: list[ItemProbs], rows: list[list[int]]) -> None:
    """Compute the logits of ``rows[k]`` of ``items[k]`` not yet known, for every k in ONE head call
    (the LM head's weights are read once for the whole batch)."""
    todo = [(it, i) for it, r in zip(items, rows, strict=True) for i in sorted(set(r)) if i not in it.logits]
    if not todo:
        return
    logits = todo[0][0].head(torch.stack([it.hidden[i] for it, i in todo])).float()
    for (it, i), row in zip(todo, logits, strict=True):
        it.logits[i] = row


def verify_greedy_batched(items: list[ItemProbs], trees: list[Tree]) -> list[tuple[list[int], int]]:
    """``core.verify_greedy`` for every row at once, one depth at a time: the head runs on the root,
    then on each row's newly accepted node (one batched call per depth), never on the whole tree."""
    state: list[tuple[int, list[int]]] = [(-1, []) for _ in items]
    out: list = [None] * len(items)
    pending = list(range(len(items)))
    while pending:
        fill([items[k] for k in pending], [[state[k][0] + 1] for k in pending])
        nxt = []
        for k in pending:
            cur, acc = state[k]
            want = int(items[k].logits[cur + 1].argmax())
            child = trees[k].child(cur, want)
            if child is None:
                out[k] = (acc, want)
            else:
                state[k] = (child, [*acc, child])
                nxt.append(k)
        pending = nxt
    return out


@dataclass
class CallRecord:
    """What one call did for one sequence (passed to ``Drafter.observe``)."""

    context: list[int]            # committed tokens before the call (the root is the last)
    n_chain: int
    tree: Tree
    probes: list[tuple[int, int | None]]
    probs: ItemProbs              # [1 + nodes + probes, V] softmax of root, nodes, probes (on demand)
    accepted: list[int]
    bonus: int
    #: the target's last hidden states (after the final norm: what the LM head reads) of the chain,
    #: the root and the nodes, ``[n_chain + 1 + nodes, d]``: a view of what the call computed anyway
    #: (EAGLE's features); no drafter but ``eagle2`` reads it
    features: torch.Tensor | None = None


class Drafter:
    """Autoregressive decoding: an empty tree, no probes. Subclasses override the hooks."""

    name = "ar"
    #: the token whose embedding fills a probe's slot before ``mask_vector`` replaces it (set by
    #: ``generate`` from its ``pad_token_id``)
    pad_token_id = 0

    def bind(self, model) -> None:
        self.model = model

    def start(self, prompts: list[list[int]]) -> None:
        pass

    def draft(self, b: int, context: list[int], max_depth: int) -> tuple[Tree, list[tuple[int, int | None]]]:
        return Tree(), []

    def mask_vector(self, b: int) -> torch.Tensor:
        raise NotImplementedError

    def wanted(self, b: int, tree: Tree, probes: list[tuple[int, int | None]], accepted: list[int]) -> list[int]:
        """Items (0 = root, 1 + i = node i, 1 + |tree| + k = probe k) whose distributions ``observe``
        will read beyond the root and the accepted path: computed in one batched head call."""
        return []

    def observe(self, b: int, rec: CallRecord) -> None:
        pass


@dataclass
class RowStats:
    model_calls: int = 0
    accepted_lengths: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)
    items: list[int] = field(default_factory=list)   # per call: root + nodes + probes (chain excluded)
    new_tokens: int = 0

    def as_dict(self) -> dict:
        return {"model_calls": self.model_calls, "accepted_lengths": list(self.accepted_lengths),
                "tree_sizes": list(self.tree_sizes), "items": list(self.items),
                "new_tokens": self.new_tokens,
                "mean_accepted_length": mean_accepted_length(self.new_tokens, self.model_calls)}


def _warper(top_k: int, top_p: float):
    """transformers' top-k then top-p logits warpers (the order ``generate`` applies them), or None."""
    if not isinstance(top_k, int) or top_k < 0:
        raise UserError(f"top_k must be an integer >= 0 (0 = off), got {top_k}")
    if not (0.0 < top_p <= 1.0):
        raise UserError(f"top_p must be in (0, 1] (1 = off), got {top_p}")
    if top_k == 0 and top_p == 1.0:
        return None
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    return LogitsProcessorList(([TopKLogitsWarper(top_k)] if top_k else [])
                               + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else []))


def check_model(model) -> None:
    mtype = getattr(model.config, "model_type", "?")
    if mtype not in SUPPORTED:
        raise UserError(f"model type {mtype!r} is not supported: tree decoding needs a causal LM that "
                        f"takes 4-D attention masks and position ids ({', '.join(SUPPORTED)})")
    if getattr(model.config, "_attn_implementation", None) not in (None, "sdpa", "eager"):
        raise UserError(f"attention implementation {model.config._attn_implementation!r} ignores 4-D "
                        "masks: load the model with attn_implementation='sdpa'")


def _cache_kwarg(module) -> str:
    """The cache keyword of ``module``'s forward: ``cache`` (transformers >= 5.x renamed it; the old
    ``past_key_values`` then warns) or ``past_key_values``. Read from the class, so an instance
    whose ``forward`` is wrapped (a call counter, an accelerate hook) still gets the right name."""
    fn = inspect.unwrap(type(module).forward)
    return "cache" if "cache" in inspect.signature(fn).parameters else "past_key_values"


def new_cache(model):
    """An empty ``DynamicCache`` (transformers >= 4.56 takes the config; older ones take nothing)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


def stack_caches(model, caches):
    """One batched ``DynamicCache`` from single-row caches of different lengths (each row's keys and
    values left-aligned, zero-padded to the longest), and the rows' lengths: with
    ``generate(cache=, cache_lengths=)`` several prompts' own prefills serve one batched decode."""
    lengths = [c.get_seq_length() for c in caches]
    n = max(lengths)
    out = new_cache(model)
    per_row = [[(_get(obj, k), _get(obj, v)) for obj, k, v in _kv_tensors(c)] for c in caches]
    for layer in range(len(per_row[0])):
        kv = []
        for j in range(2):
            rows = [r[layer][j] for r in per_row]
            kv.append(torch.cat([torch.nn.functional.pad(t, (0, 0, 0, n - t.shape[2])) for t in rows], 0))
        out.update(kv[0], kv[1], layer)
    return out, lengths


def _kv_tensors(cache):
    """(keys, values) per layer, for transformers' layered caches and the older list-based ones."""
    if hasattr(cache, "layers"):
        return [(layer, "keys", "values") for layer in cache.layers]
    return [(cache, ("key_cache", i), ("value_cache", i)) for i in range(len(cache.key_cache))]


def _get(obj, name):
    return getattr(obj, name) if isinstance(name, str) else getattr(obj, name[0])[name[1]]


def _compact(cache, keep: list[list[int]]) -> None:
    """Keep, per row, the given slot indices (left-aligned); the rest is cropped (DynamicCache.crop).
    Slots before the first one that moves stay where they are: only the tail is gathered."""
    new_len = max(len(k) for k in keep)
    cur = cache.get_seq_length()
    start = min(next((i for i, j in enumerate(k) if i != j), len(k)) for k in keep)
    if start < new_len:
        idx = torch.tensor([k[start:] + [0] * (new_len - len(k)) for k in keep])
        for obj, *names in _kv_tensors(cache):
            for name in names:
                t = _get(obj, name)
                B, H, _, D = t.shape
                g = t.gather(2, idx.to(t.device)[:, None, :, None].expand(B, H, new_len - start, D))
                t[:, :, start:new_len] = g
    if new_len < cur:
        cache.crop(new_len - cur)  # negative: remove that many (transformers 4.x and 5.x alike)


@torch.no_grad()
def generate(model, prompts: list[list[int]], drafter: Drafter, max_new_tokens: int, *,
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
             eos_token_id: int | list[int] | None = None,
             pad_token_id: int = 0, cache=None, cache_lengths: list[int] | None = None
             ) -> tuple[list[list[int]], list[dict]]:
    """Decode every prompt (batched: per-sequence trees in one padded call). Returns the new tokens
    per prompt and per-prompt stats (``model_calls`` counts every forward, prefill included).
    A row that is done (EOS or ``max_new_tokens``) leaves the batch and the cache
    (``DynamicCache.batch_select_indices``), so later calls carry only the rows still decoding.
    ``cache``: a ``DynamicCache`` to use (afterwards it holds the committed prefix, except its last
    token, of the rows that finished last — at batch 1, the prompt's). It may come pre-filled with the keys and values of the first ``L``
    tokens of every prompt (``L`` = its length, shorter than every prompt; e.g. one prompt's prefill
    shared by several drafters via ``copy.deepcopy``): decoding then starts from there, and the
    first call (the rest of the prompt plus the first draft) counts as the prefill.
    ``cache_lengths``: with a pre-filled batched cache whose rows hold different numbers of valid
    (left-aligned) slots, row b's count (e.g. per-prompt prefills stacked by ``stack_caches``)."""
    check_model(model)
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise UserError("every prompt needs at least one token")
    if not (temperature >= 0.0) or temperature != temperature:
        raise UserError(f"temperature must be >= 0, got {temperature}")
    warp = _warper(top_k, top_p)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    head = model.get_output_embeddings()
    embed = model.get_input_embeddings()
    dev = next(model.parameters()).device
    kw = _cache_kwarg(base)
    gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
    drafter.pad_token_id = int(pad_token_id)
    drafter.bind(model)
    drafter.start([list(p) for p in prompts])
    B = len(prompts)
    ctx = [list(map(int, p)) for p in prompts]
    cache = new_cache(model) if cache is None else cache
    pre = cache.get_seq_length()
    n_cached = [pre] * B if cache_lengths is None else [int(n) for n in cache_lengths]
    if len(n_cached) != B or any(not 0 <= n <= pre for n in n_cached):
        raise UserError(f"cache_lengths must give one count in [0, {pre}] per prompt, got {cache_lengths}")
    if any(n >= len(p) for n, p in zip(n_cached, ctx, strict=True)):
        raise UserError(f"the given cache holds {max(n_cached)} tokens: every prompt must be longer")
    new = [[] for _ in range(B)]
    done = [False] * B
    stats = [RowStats() for _ in range(B)]
    live = list(range(B))   # rows still decoding, in the cache's row order; finished rows leave
    while live:
        layouts = {}
        for b in live:
            remaining = max_new_tokens - len(new[b])
            tree, probes = drafter.draft(b, ctx[b], max(0, remaining - 1))
            n_chain = len(ctx[b]) - n_cached[b] - 1
            layouts[b] = (n_chain, tree, probes)
        cache_len = cache.get_seq_length()
        vis_rows, pos_rows, emb_rows = [], [], []
        for b in live:
            n_chain, tree, probes = layouts[b]
            hosts = [h for h, _ in probes]
            chained = [t is None for _, t in probes]   # masks chain on their host; given tokens do not
            vis_rows.append(item_visibility(n_chain, tree, hosts, chained))
            pos_rows.append(item_positions(n_cached[b], n_chain, tree, hosts, chained))
            toks = ctx[b][n_cached[b]:] + tree.tokens + [pad_token_id if t is None else t for _, t in probes]
            e = embed(torch.tensor(toks, device=dev))
            mask_rows = [1 + n_chain + len(tree) + k for k, (_, t) in enumerate(probes) if t is None]
            if mask_rows:
                e = e.clone()
                e[mask_rows] = drafter.mask_vector(b).to(e.dtype).to(dev)
            emb_rows.append(e)
        n = max(v.shape[0] for v in vis_rows)
        d = emb_rows[0].shape[-1]
        inputs = torch.zeros(len(live), n, d, dtype=emb_rows[0].dtype, device=dev)
        pos = torch.zeros(len(live), n, dtype=torch.long)
        for i in range(len(live)):
            m = emb_rows[i].shape[0]
            inputs[i, :m] = emb_rows[i]
            pos[i, :m] = torch.tensor(pos_rows[i])
            pos[i, m:] = pos_rows[i][-1]
        mask = tree_attention_mask(vis_rows, [n_cached[b] for b in live], cache_len, dtype=inputs.dtype).to(dev)
        out = base(inputs_embeds=inputs, attention_mask=mask, position_ids=pos.to(dev), use_cache=True,
                   **{kw: cache})
        hidden = out.last_hidden_state
        items = []
        for i, b in enumerate(live):
            n_chain, tree, probes = layouts[b]
            items.append(ItemProbs(hidden[i, n_chain: n_chain + 1 + len(tree) + len(probes)], head, temperature, warp))
        trees = [layouts[b][1] for b in live]
        if temperature > 0:
            fill(items, [list(range(1 + len(t))) for t in trees])
            verdicts = [verify_sampling(t, it[: 1 + len(t)].cpu(), gen) for it, t in zip(items, trees, strict=True)]
        else:
            verdicts = verify_greedy_batched(items, trees)
        fill(items, [drafter.wanted(b, layouts[b][1], layouts[b][2], verdicts[i][0]) for i, b in enumerate(live)])
        keep = []
        for i, b in enumerate(live):
            n_chain, tree, probes = layouts[b]
            probs, (accepted, bonus) = items[i], verdicts[i]
            m = len(probs)
            drafter.observe(b, CallRecord(list(ctx[b]), n_chain, tree, probes, probs, accepted, bonus,
                                          hidden[i, : n_chain + 1 + len(tree)]))
            keep.append(list(range(n_cached[b])) + [cache_len + j for j in range(n_chain + 1)]
                        + [cache_len + n_chain + 1 + a for a in accepted])
            n_cached[b] = len(ctx[b]) + len(accepted)
            added = [tree.tokens[a] for a in accepted] + [bonus]
            cut = len(added)
            for j, t in enumerate(added):
                if t in eos:
                    cut = j + 1
                    break
            cut = min(cut, max_new_tokens - len(new[b]))
            added = added[:cut]
            ctx[b] += added
            new[b] += added
            st = stats[b]
            st.model_calls += 1
            st.accepted_lengths.append(len(added))
            st.tree_sizes.append(len(tree))
            st.items.append(m)
            st.new_tokens = len(new[b])
            if len(new[b]) >= max_new_tokens or (added and added[-1] in eos):
                done[b] = True
        _compact(cache, keep)
        if any(done[b] for b in live):   # finished rows leave the batch and the cache
            rest = [i for i, b in enumerate(live) if not done[b]]
            if rest:
                cache.batch_select_indices(torch.tensor(rest, device=dev))
            live = [live[i] for i in rest]
    return new, [s.as_dict() for s in stats]
