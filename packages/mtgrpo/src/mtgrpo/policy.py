"""Policies: a tiny decoder transformer for the CPU reproduction [R], and the model-agnostic
rollout / log-prob helpers used for it and for any Hugging Face causal LM.

Sequences are ``[prompt (left-padded) | response (right-padded)]``; positions come from the
attention mask so that left padding does not shift them. Sampling takes its uniforms from the
caller (inverse-CDF), which makes rollouts independent of how groups are split across processes.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from icml26_kernels import token_logprobs


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor, mask: torch.Tensor, past=None):
        b, t, d = x.shape
        q, k, v = (y.transpose(1, 2) for y in
                   self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2))
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), (k, v)


class Output:
    def __init__(self, logits, past_key_values):
        self.logits, self.past_key_values = logits, past_key_values


class TinyGPT(nn.Module):
    """A 2-layer pre-LN decoder; ``forward(input_ids, attention_mask, position_ids) -> logits``."""

    def __init__(self, vocab: int, d: int = 64, layers: int = 2, heads: int = 4, ctx: int = 48):
        super().__init__()
        self.config = {"vocab": vocab, "d": d, "layers": layers, "heads": heads, "ctx": ctx}
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 * (1 if p.shape[0] != d else 1 / math.sqrt(2 * layers)))

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache: bool = False, logits_to_keep: int = 0):
        """``attention_mask`` covers past and new tokens; returns logits (of the last
        ``logits_to_keep`` positions when > 0), or an object with ``logits`` and
        ``past_key_values`` when ``use_cache``."""
        b, t = input_ids.shape
        past_len = past_key_values[0][0].shape[2] if past_key_values else 0
        if attention_mask is None:
            attention_mask = torch.ones(b, past_len + t, dtype=torch.long, device=input_ids.device)
        if position_ids is None:
            position_ids = positions(attention_mask)[:, past_len:]
        x = self.tok(input_ids) + self.pos(position_ids.clamp(max=self.pos.num_embeddings - 1))
        total = past_len + t
        causal = torch.ones(total, total, dtype=torch.bool, device=x.device).tril()[past_len:]
        self_key = torch.eye(total, dtype=torch.bool, device=x.device)[past_len:]
        mask = causal & (attention_mask.bool()[:, None, None, :] | self_key)
        cache = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, mask, past_key_values[i] if past_key_values else None)
            cache.append(kv)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        logits = self.head(self.ln(x))
        return Output(logits, cache) if use_cache else logits


def positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


def logits_of(model, ids: torch.Tensor, mask: torch.Tensor, keep: int = 0) -> torch.Tensor:
    """Logits of the last ``keep`` positions (all when 0): the LM head runs on those only
    (``logits_to_keep`` of Hugging Face causal LMs and of ``TinyGPT``)."""
    kw = {"logits_to_keep": keep} if keep else {}
    try:
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), **kw)
    except TypeError:  # a model without logits_to_keep: full logits, sliced here
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask))
        out = out if isinstance(out, torch.Tensor) else out.logits
        return out[:, -keep:] if keep else out
    out = out if isinstance(out, torch.Tensor) else out.logits
    return out[:, -keep:] if keep and out.shape[1] > keep else out


def left_pad(seqs: list[list[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def generate(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new: int, eos_id: int,
             pad_id: int, uniforms: torch.Tensor | None, temperature: float = 1.0
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample responses. ``uniforms [B, max_new]`` in [0, 1) drive inverse-CDF sampling (``None``:
    greedy). Returns ``(response [B, R], response_mask [B, R])``; the mask covers tokens up to and
    including EOS."""
    b = prompt_ids.shape[0]
    mask = prompt_mask
    done = torch.zeros(b, dtype=torch.bool, device=prompt_ids.device)
    out, valid = [], []
    pos = positions(mask)
    step_ids, step_pos, past = prompt_ids, pos, None
    for t in range(max_new):
        res = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                    past_key_values=past, use_cache=True)
        past = res.past_key_values
        logits = res.logits[:, -1].float()
        if uniforms is None:
            tok = logits.argmax(-1)
        else:
            cdf = torch.softmax(logits / temperature, -1).cumsum(-1)
            u = uniforms[:, t:t + 1].to(cdf) * cdf[:, -1:]
            tok = torch.searchsorted(cdf, u).squeeze(1).clamp_max(logits.shape[-1] - 1)
        live = ~done
        tok = torch.where(live, tok, torch.full_like(tok, pad_id))
        valid.append(live)
        out.append(tok)
        done = done | (tok == eos_id)
        if bool(done.all()) or t == max_new - 1:
            break
        mask = torch.cat([mask, live.long()[:, None]], 1)
        step_ids, step_pos = tok[:, None], positions(mask)[:, -1:]
    return torch.stack(out, 1), torch.stack(valid, 1).long()


def response_logprobs(model, prompt_ids, prompt_mask, resp, resp_mask,
                      temperature: float = 1.0) -> torch.Tensor:
    """Per-token log-probs ``[B, R]`` of the response under the *sampling* distribution
    ``softmax(logits / temperature)`` (0 outside ``resp_mask``), through
    ``icml26_kernels.token_logprobs``. Only the response positions reach the LM head."""
    ids = torch.cat([prompt_ids, resp], 1)
    mask = torch.cat([prompt_mask, resp_mask], 1)
    r = resp.shape[1]
    logits = logits_of(model, ids, mask, keep=r + 1)[:, :-1]
    if temperature != 1.0:
        logits = logits / temperature
    targets = torch.where(resp_mask.bool(), resp, torch.full_like(resp, -100))
    return token_logprobs(logits, targets)


@torch.no_grad()
def hf_generate(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new: int,
                eos_id: int, pad_id: int, seed: int | None, temperature: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched ``model.generate`` with the KV cache (Hugging Face / PEFT models): pure sampling
    at ``temperature`` (no top-k / top-p, so the sampling distribution is the one the loss
    scores), greedy when ``seed is None``. The sampling stream is seeded from ``seed`` without
    touching the global RNG. Returns ``(response [B, R], response_mask [B, R])``, the mask up to
    and including EOS."""
    devices = [prompt_ids.device] if prompt_ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(int(seed))
        kw = dict(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0) \
            if seed is not None else dict(do_sample=False)
        out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask,
                             max_new_tokens=max_new, eos_token_id=eos_id, pad_token_id=pad_id,
                             use_cache=True, **kw)
    resp = out[:, prompt_ids.shape[1]:]
    if resp.shape[1] == 0:
        resp = torch.full((prompt_ids.shape[0], 1), pad_id, dtype=torch.long, device=out.device)
    is_eos = (resp == eos_id).long()
    after = (is_eos.cumsum(1) - is_eos) > 0  # positions after the first EOS
    mask = (~after).long()
    resp = torch.where(after, torch.full_like(resp, pad_id), resp)
    return resp, mask


def sft_loss(model, prompt_ids, prompt_mask, resp, resp_mask) -> torch.Tensor:
    lp = response_logprobs(model, prompt_ids, prompt_mask, resp, resp_mask)
    return -(lp * resp_mask).sum() / resp_mask.sum().clamp_min(1)
