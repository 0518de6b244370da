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
                use_cache: bool = False):
        """``attention_mask`` covers past and new tokens; returns logits, or an object with
        ``logits`` and ``past_key_values`` when ``use_cache``."""
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
        logits = self.head(self.ln(x))
        return Output(logits, cache) if use_cache else logits


def positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp_min(0)


def logits_of(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask))
    return out if isinstance(out, torch.Tensor) else out.logits


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


def response_logprobs(model, prompt_ids, prompt_mask, resp, resp_mask) -> torch.Tensor:
    """Per-token log-probs ``[B, R]`` of the response under ``model`` (0 outside ``resp_mask``),
    through ``icml26_kernels.token_logprobs``."""
    ids = torch.cat([prompt_ids, resp], 1)
    mask = torch.cat([prompt_mask, resp_mask], 1)
    p = prompt_ids.shape[1]
    logits = logits_of(model, ids, mask)[:, p - 1:-1]
    targets = torch.where(resp_mask.bool(), resp, torch.full_like(resp, -100))
    return token_logprobs(logits, targets)


def sft_loss(model, prompt_ids, prompt_mask, resp, resp_mask) -> torch.Tensor:
    lp = response_logprobs(model, prompt_ids, prompt_mask, resp, resp_mask)
    return -(lp * resp_mask).sum() / resp_mask.sum().clamp_min(1)
