"""Forced-choice readout with the cache advancing [P: "teacher-forced log-probabilities of each
option while the cache advances"; the position bookkeeping is ours, R].

The prompt body (chat-formatted question and assistant header) is prefilled once. The answer cue
("Answer:") is then teacher-forced one token per pass, and each option's tokens after it, so every
pass that decides the answer is a decode pass (sequence length 1) that a
:class:`~decodeshare.hooks.DecodeOnlyIntervention` edits; the prefill cache is shared by every
condition (cropped back after each scoring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .hooks import encode_left, eos_ids

CUE = "Answer:"


def chat_body(tok, question: str) -> str:
    """The prompt body: the question as a user turn, then the assistant header."""
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                       add_generation_prompt=True)
    return f"Question: {question}\n"


@dataclass
class Prepared:
    items: list[dict]
    ids: torch.Tensor         # [b, L] left-padded body
    mask: torch.Tensor        # [b, L]
    cache: object             # the prefill's KV cache (cropped back to L after each use)
    cue: list[int]
    options: list[list[list[int]]]  # [row][option] token ids
    answers: np.ndarray

    @property
    def n_options(self) -> int:
        return max(len(o) for o in self.options)


@torch.no_grad()
def prepare(model, tok, items: list[dict], cue: str = CUE) -> Prepared:
    """Tokenise a batch (one task: same option count) and run its prefill once."""
    dev = next(model.parameters()).device
    ids, mask = encode_left(tok, [chat_body(tok, it["prompt"]) for it in items], dev)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **_last_logits(model))
    cache = getattr(out, "cache", None) or out.past_key_values
    opts = [[tok(o, add_special_tokens=False).input_ids for o in it["options"]] for it in items]
    return Prepared(items, ids, mask, cache, tok(cue, add_special_tokens=False).input_ids,
                    opts, np.array([it["answer"] for it in items]))


def _last_logits(model) -> dict:
    """Only the last position's logits are read after a prefill: skip the LM head elsewhere."""
    import inspect

    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def replicate(p: Prepared, copies: int) -> Prepared:
    """``p`` with every row repeated ``copies`` times in a row (row r * copies + j is copy j of
    row r), the prefill cache copied likewise: one batch scores ``copies`` conditions at once,
    each decode pass reading the weights once for all of them (same passes, same log-probs)."""
    import copy

    cache = copy.deepcopy(p.cache)
    cache.batch_repeat_interleave(copies)
    return Prepared([it for it in p.items for _ in range(copies)], p.ids.repeat_interleave(copies, 0),
                    p.mask.repeat_interleave(copies, 0), cache, p.cue,
                    [o for o in p.options for _ in range(copies)], np.repeat(p.answers, copies))


def _cache_kw(model) -> str:
    """transformers >= 5.24 names the cache argument ``cache``; earlier ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _step(model, p: Prepared, tokens: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor):
    out = model(input_ids=tokens.view(-1, 1), attention_mask=mask, position_ids=pos.view(-1, 1),
                use_cache=True, **{_cache_kw(model): p.cache})
    return torch.log_softmax(out.logits[:, -1].float(), -1)


@torch.no_grad()
def score(model, p: Prepared) -> np.ndarray:
    """Log-probabilities [b, n_options] of each option (sum over its tokens); -inf for options a
    row does not have. Only decode passes are run; the cache is restored afterwards."""
    dev = p.ids.device
    b, L = p.ids.shape
    last = (p.mask.cumsum(1) - 1)[:, -1]
    mask = p.mask
    logp = None
    for j, t in enumerate(p.cue):
        mask = torch.cat([mask, torch.ones(b, 1, dtype=mask.dtype, device=dev)], 1)
        logp = _step(model, p, torch.full((b,), t, device=dev), mask, last + 1 + j)
    base_len, base_mask, base_pos = L + len(p.cue), mask, last + len(p.cue)
    scores = np.full((b, p.n_options), -np.inf)
    for o in range(p.n_options):
        toks = [row[o] if o < len(row) else [0] for row in p.options]
        width = max(len(x) for x in toks)
        total = logp[torch.arange(b), torch.tensor([x[0] for x in toks], device=dev)].clone()
        mask = base_mask
        for j in range(1, width):
            prev = torch.tensor([x[j - 1] if j - 1 < len(x) else 0 for x in toks], device=dev)
            mask = torch.cat([mask, torch.ones(b, 1, dtype=mask.dtype, device=dev)], 1)
            lp = _step(model, p, prev, mask, base_pos + j)
            nxt = torch.tensor([x[j] if j < len(x) else 0 for x in toks], device=dev)
            has = torch.tensor([j < len(x) for x in toks], device=dev)
            total += torch.where(has, lp[torch.arange(b), nxt], torch.zeros_like(total))
        _crop_to(p.cache, base_len)
        for r, row in enumerate(p.options):
            if o < len(row):
                scores[r, o] = float(total[r])
    _crop_to(p.cache, L)
    return scores


def _crop_to(cache, length: int) -> None:
    """Drop cached positions beyond ``length`` (a negative count works in every transformers)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def predictions(scores: np.ndarray) -> np.ndarray:
    return scores.argmax(1)


@torch.no_grad()
def score_no_cache(model, tok, item: dict, cue: str = CUE) -> np.ndarray:
    """Reference: each option scored by one full forward pass over body + cue + option (no cache)."""
    dev = next(model.parameters()).device
    body = tok(chat_body(tok, item["prompt"]), add_special_tokens=False).input_ids
    prefix = body + tok(cue, add_special_tokens=False).input_ids
    out = []
    for o in item["options"]:
        ot = tok(o, add_special_tokens=False).input_ids
        ids = torch.tensor([prefix + ot], device=dev)
        lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        out.append(sum(float(lp[len(prefix) - 1 + j, t]) for j, t in enumerate(ot)))
    return np.array(out)


# --- generation exact match [P: "generation exact match"; normalisation ours, R] ---------------

@dataclass
class GenPrepared:
    """A batch of generation items ``{"id", "task", "prompt", "target"}`` with its prefill run
    once: the cache (cropped back after each use) and the first new token, which the prefill alone
    decides (so no decode-only edit can change it)."""

    items: list[dict]
    ids: torch.Tensor
    mask: torch.Tensor
    cache: object
    first: torch.Tensor          # [b] greedy first new token from the prefill's last logits
    targets: list[str]
    max_new_tokens: int
    eos: list[int]               # every end-of-generation id (generation_config's list, or the tokenizer's)


@torch.no_grad()
def prepare_gen(model, tok, items: list[dict], max_new_tokens: int = 16) -> GenPrepared:
    """Tokenise a batch of generation items and run its prefill once."""
    if max_new_tokens < 2:
        raise ValueError("generation needs max_new_tokens >= 2 (the first token is the prefill's)")
    dev = next(model.parameters()).device
    ids, mask = encode_left(tok, [chat_body(tok, it["prompt"]) for it in items], dev)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **_last_logits(model))
    cache = getattr(out, "cache", None) or out.past_key_values
    return GenPrepared(items, ids, mask, cache, out.logits[:, -1].argmax(-1), [str(it["target"]) for it in items],
                       max_new_tokens, eos_ids(model, tok))


@torch.no_grad()
def generate_cached(model, p: GenPrepared) -> torch.Tensor:
    """Greedy continuation [b, max_new_tokens] from the shared prefill cache: new token 0 comes
    from the prefill, each further one from a decode pass (so N tokens = N - 1 decode passes, as
    in ``model.generate``); rows that emitted EOS keep emitting it. The cache is restored."""
    dev = p.ids.device
    b, L = p.ids.shape
    last = (p.mask.cumsum(1) - 1)[:, -1]
    tok, mask = p.first.clone(), p.mask
    eos = torch.tensor(p.eos, dtype=tok.dtype, device=dev)
    done = torch.isin(tok, eos)
    out = [tok]
    for j in range(1, p.max_new_tokens):
        mask = torch.cat([mask, torch.ones(b, 1, dtype=mask.dtype, device=dev)], 1)
        nxt = _step(model, p, tok, mask, last + j).argmax(-1)
        if p.eos:
            nxt = torch.where(done, torch.full_like(nxt, p.eos[0]), nxt)
            done = done | torch.isin(nxt, eos)
        out.append(nxt)
        tok = nxt
    _crop_to(p.cache, L)
    return torch.stack(out, 1)


def normalise(text: str) -> str:
    """The answer as compared [R]: the first line, stripped, lower-cased, without a trailing
    full stop."""
    line = text.strip().split("\n", 1)[0].strip().lower()
    return line[:-1].rstrip() if line.endswith(".") else line


def exact_match(texts: list[str], targets: list[str]) -> np.ndarray:
    """1.0 where the normalised generation equals the normalised target."""
    return np.array([float(normalise(t) == normalise(g)) for t, g in zip(texts, targets)])


def generated_texts(tok, p: GenPrepared, tokens: torch.Tensor) -> list[str]:
    return [tok.decode([t for t in row.tolist() if t not in p.eos], skip_special_tokens=True) for row in tokens]
