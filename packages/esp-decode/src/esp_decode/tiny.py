"""Model A of the reproduction: a tiny character-level causal LM (Llama architecture, GQA) trained
in-process on three synthetic regimes, and the learned-mask ablation (one embedding, model frozen).

Regimes [R]: ``copy`` (templated records that repeat their fields — favours prompt lookup),
``arith`` (running-sum traces — deterministic continuations), ``grammar`` (a stochastic grammar —
open-ended text where n-gram drafters have little to match).
"""

from __future__ import annotations

import random
import time

import numpy as np
import torch

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 +=;:.,|\n"
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
NOUNS = ["cat", "dog", "bird", "fish", "tree", "river", "stone", "cloud", "house", "road"]
VERBS = ["sees", "finds", "likes", "hears", "follows", "paints", "keeps", "moves"]
ADJS = ["red", "small", "old", "quiet", "bright", "tall", "cold", "green"]


class CharTokenizer:
    def __init__(self):
        self.stoi = {c: i + 1 for i, c in enumerate(CHARS)}   # 0 = pad
        self.itos = {i: c for c, i in self.stoi.items()}
        self.vocab_size = len(CHARS) + 1
        self.eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return [self.stoi[c] for c in text if c in self.stoi]

    def decode(self, ids) -> str:
        return "".join(self.itos.get(int(i), "") for i in ids)


def sample_text(regime: str, rng: random.Random, length: int = 200) -> str:
    out = ""
    while len(out) < length:
        if regime == "copy":
            name, num, noun = rng.choice(NAMES), rng.randint(10, 999), rng.choice(NOUNS)
            rec = f"name: {name}; id: {num}; item: {noun}"
            out += rec + " | " + " | ".join([f"{name} {num} {noun}"] * rng.randint(2, 4)) + ".\n"
        elif regime == "arith":
            a = rng.randint(1, 50)
            steps = []
            for _ in range(rng.randint(3, 6)):
                b = rng.randint(1, 20)
                steps.append(f"{a}+{b}={a + b}")
                a += b
            out += "; ".join(steps) + ".\n"
        elif regime == "grammar":
            words = ["the", rng.choice(ADJS), rng.choice(NOUNS), rng.choice(VERBS)]
            words += ["a", rng.choice(NOUNS)] if rng.random() < 0.5 else ["the", rng.choice(ADJS), rng.choice(NOUNS)]
            if rng.random() < 0.4:
                words += ["near", "the", rng.choice(NOUNS)]
            out += " ".join(words) + ". "
        else:
            raise ValueError(regime)
    return out


REGIMES = ("copy", "arith", "grammar")


def make_model(vocab: int, d: int = 128, layers: int = 4, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=None, eos_token_id=None)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def _batch(tok, rng, batch: int, seq: int) -> torch.Tensor:
    rows = []
    for i in range(batch):
        ids = tok.encode(sample_text(REGIMES[i % 3], rng, seq + 40))
        s = rng.randint(0, len(ids) - seq - 1)
        rows.append(ids[s: s + seq + 1])
    return torch.tensor(rows)


def train_tiny(seed: int, seconds: float, max_steps: int, d: int = 128, layers: int = 4,
               seq: int = 96, batch: int = 32, lr: float = 4e-3, eval_every: int = 0):
    """Train on an equal mix of the regimes for exactly ``max_steps`` (AdamW, 10 warm-up steps,
    cosine decay to 10 % of ``lr`` [R]); the model never depends on the machine's speed.
    ``seconds``: a CPU-time budget that is only reported (``over_budget``), never a stop.
    ``eval_every`` > 0: the loss on a fixed held-out batch (other text than training's) every that
    many steps, with the mean training loss since the last point (``info["curve"]``)."""
    import math

    tok = CharTokenizer()
    model = make_model(tok.vocab_size, d, layers, seed)
    rng = random.Random(seed)
    held = _batch(tok, random.Random(f"heldout-{seed}"), batch, seq) if eval_every else None
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = min(10, max(1, max_steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warm if s < warm else
                                              0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / max(1, max_steps - warm))))
    model.train()
    t0, w0, steps, loss = time.process_time(), time.perf_counter(), 0, float("nan")
    curve: dict[str, list[float]] = {"steps": [], "train": [], "heldout": []}
    recent: list[float] = []
    while steps < max_steps:
        x = _batch(tok, rng, batch, seq)
        logits = model(input_ids=x[:, :-1]).logits
        loss_t = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss_t.backward()
        opt.step()
        sched.step()
        loss, steps = loss_t.item(), steps + 1
        recent.append(loss)
        if eval_every and (steps % eval_every == 0 or steps == max_steps):
            model.eval()
            with torch.no_grad():
                hl = model(input_ids=held[:, :-1]).logits
                h = torch.nn.functional.cross_entropy(hl.reshape(-1, hl.shape[-1]), held[:, 1:].reshape(-1)).item()
            model.train()
            curve["steps"].append(steps)
            curve["train"].append(sum(recent) / len(recent))
            curve["heldout"].append(h)
            recent = []
    model.eval()
    cpu = time.process_time() - t0
    return model, tok, {"steps": steps, "final_loss": loss, "cpu_seconds": cpu,
                        "seconds": time.perf_counter() - w0, "over_budget": cpu > seconds, "curve": curve}


def _mask_batch(tok, rng, batch: int, seq: int, num_masks: int):
    t = rng.randint(16, seq - num_masks - 2)
    rows = []
    for i in range(batch):
        ids = tok.encode(sample_text(REGIMES[i % 3], rng, seq + 40))
        s = rng.randint(0, len(ids) - seq - 1)
        rows.append(ids[s: s + seq])
    return t, torch.tensor(rows)


def learn_mask(model, tok: CharTokenizer, seed: int, steps: int, num_masks: int, seq: int = 96,
               batch: int = 16, eval_every: int = 0, info: dict | None = None) -> torch.Tensor:
    """Optimise one mask embedding (model frozen) so that mask j after a context predicts the token
    j + 1 steps ahead: the learned single-mask-vector ablation. ``eval_every`` > 0: the loss on 4
    fixed held-out batches (other text) every that many steps goes to ``info["curve"]``, with the
    mean training loss since the last point."""
    rng = random.Random(seed + 1)
    emb = model.get_input_embeddings()
    e = emb.weight.detach().mean(0).clone().requires_grad_(True)
    opt = torch.optim.Adam([e], lr=1e-2)
    held = [_mask_batch(tok, random.Random(f"mask-heldout-{seed}-{i}"), batch, seq, num_masks)
            for i in range(4)] if eval_every else []

    def loss_of(t, x):
        inp = torch.cat([emb(x[:, : t + 1]), e.expand(x.shape[0], num_masks, -1)], 1)
        logits = model(inputs_embeds=inp).logits[:, t + 1:]
        target = x[:, t + 2: t + 2 + num_masks]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    curve: dict[str, list[float]] = {"steps": [], "train": [], "heldout": []}
    recent: list[float] = []
    for p in model.parameters():
        p.requires_grad_(False)
    for step in range(1, steps + 1):
        loss = loss_of(*_mask_batch(tok, rng, batch, seq, num_masks))
        opt.zero_grad()
        loss.backward()
        opt.step()
        recent.append(loss.item())
        if eval_every and (step % eval_every == 0 or step == steps):
            with torch.no_grad():
                h = float(np.mean([loss_of(t, x).item() for t, x in held]))
            curve["steps"].append(step)
            curve["train"].append(sum(recent) / len(recent))
            curve["heldout"].append(h)
            recent = []
    for p in model.parameters():
        p.requires_grad_(True)
    if info is not None:
        info["curve"] = curve
    return e.detach()


def last_gain(curve: dict, frac: float = 0.2) -> float:
    """Relative held-out loss gain over the last ``frac`` of the steps: (loss at (1 - frac) x steps
    - final loss) / loss at (1 - frac) x steps (the curve's point at or before that step)."""
    steps, h = curve["steps"], curve["heldout"]
    cut = (1 - frac) * steps[-1]
    i = max(j for j, s in enumerate(steps) if s <= cut) if steps[0] <= cut else 0
    return (h[i] - h[-1]) / h[i]


def tiny_prompts(regime: str, n: int, seed: int, chars: int = 96) -> list[str]:
    rng = random.Random(f"{regime}-{seed}")
    return [sample_text(regime, rng, chars + 60)[:chars] for _ in range(n)]
