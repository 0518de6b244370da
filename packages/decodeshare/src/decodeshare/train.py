"""``train-tiny``: a character-level Llama trained here, from scratch, on the five multi-token
generation tasks (issue 51: a model that solves its tasks well above chance, so that removing a
decode-time subspace has a decision to break). Saved with ``save_pretrained`` (model and the
package's character tokenizer), so every verb loads it as a model folder.

Training stops by a stated rule read on the ``dev`` hash split only (``STEP_RULE``: teacher-forced
dev exact match stalls, ``icml26_shared.train.EarlyStopping``) or at the cap ``MAX_STEPS``; the
recipe (lr 5e-3, 200 warmup steps, clipping at 1.0) was chosen on dev prompts (docs/experiments.md).
The dev curve, per task, is saved beside the model; no checkpoint is picked (the last one is kept)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from icml26_shared import UserError

#: the architecture (4 layers, d = 128) of the dev probe (docs/experiments.md)
ARCH = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64)
#: the recipe (lr, warmup and clipping chosen on dev prompts, docs/experiments.md)
LR, WARMUP, CLIP, WEIGHT_DECAY, BATCH = 5e-3, 200, 1.0, 0.01, 64
#: the step rule (written before the dev runs): teacher-forced dev exact match over
#: DEV_PER_TASK dev prompts per task, every EVAL_EVERY steps; stop when it has not risen by more
#: than MIN_DELTA for PATIENCE evaluations in a row (``icml26_shared.train.EarlyStopping``), or at
#: the cap MAX_STEPS; the model is the last one trained (no checkpoint is picked)
MAX_STEPS, EVAL_EVERY, DEV_PER_TASK, PATIENCE, MIN_DELTA = 3000, 250, 100, 2, 0.01
STEP_RULE = (f"stop when teacher-forced dev exact match ({DEV_PER_TASK} dev prompts per task, every "
             f"{EVAL_EVERY} steps) has not risen by more than {MIN_DELTA:g} for {PATIENCE} evaluations "
             f"in a row, or at the cap")


def _encode(tok, items: list[tuple[str, str]]):
    """Prompt (chat body) + target + EOS, right-padded; the loss mask covers target and EOS."""
    import torch

    from .readout import chat_body

    seqs, masks = [], []
    for prompt, target in items:
        p = tok(chat_body(tok, prompt), add_special_tokens=False).input_ids
        a = tok(target, add_special_tokens=False).input_ids + [tok.eos_token_id]
        seqs.append(p + a)
        masks.append([0] * len(p) + [1] * len(a))
    w = max(map(len, seqs))
    pad = tok.pad_token_id
    ids = torch.tensor([s + [pad] * (w - len(s)) for s in seqs])
    loss_mask = torch.tensor([m + [0] * (w - len(m)) for m in masks], dtype=torch.bool)
    att = torch.tensor([[1] * len(s) + [0] * (w - len(s)) for s in seqs])
    return ids, att, loss_mask


def _train_batch(rng: random.Random, tasks: tuple[str, ...], n: int) -> list[tuple[str, str]]:
    from .tasks import gen_example, split_of

    out = []
    while len(out) < n:
        prompt, target = gen_example(rng.choice(tasks), rng)
        if split_of(prompt) == "train":  # never a dev, calibration or evaluation prompt
            out.append((prompt, target))
    return out


def teacher_forced_hits(model, tok, items: list[tuple[str, str]]):
    """Per item: is every target token (and EOS) the argmax given the true prefix? (bool tensor)"""
    import torch

    ids, att, m = _encode(tok, items)
    with torch.no_grad():
        pred = model(input_ids=ids, attention_mask=att).logits[:, :-1].argmax(-1)
    return ((pred == ids[:, 1:]) | ~m[:, 1:]).all(1)


def teacher_forced_em(model, tok, items: list[tuple[str, str]]) -> float:
    """Fraction of items whose every target token (and EOS) is the argmax given the true prefix."""
    return float(teacher_forced_hits(model, tok, items).float().mean())


def train_tiny(out: str | Path, steps: int = MAX_STEPS, seed: int = 0, tasks: tuple[str, ...] | None = None,
               eval_every: int = EVAL_EVERY, batch: int = BATCH, arch: dict | None = None,
               lr: float = LR, warmup: int = WARMUP, clip: float | None = CLIP, rule: bool = True,
               patience: int = PATIENCE, min_delta: float = MIN_DELTA, dev_per_task: int = DEV_PER_TASK,
               log=None) -> dict:
    """Train the char-level Llama until the step rule fires (``rule=True``, see ``STEP_RULE``) or
    for ``steps`` steps (the cap), and save it to ``out`` (refused if it exists). Returns ``{"steps"
    (trained), "cap", "stopped_at" (None when the cap bound), "dev_steps", "dev_em", "dev_em_by_task",
    "train_loss", "seconds", "recipe", "path"}``; the same curve is written to
    ``out/train_curve.json``. The dev prompts are the ``dev`` hash split: never trained on, never
    a calibration or evaluation item."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from icml26_shared.train import EarlyStopping

    from .io import char_tokenizer, refuse_existing
    from .tasks import GEN_GENERATORS, make_gen_tasks

    tasks = tuple(tasks or GEN_GENERATORS)
    unknown = sorted(set(tasks) - set(GEN_GENERATORS))
    if unknown:
        raise UserError(f"unknown generation task(s) {', '.join(unknown)} (choose from "
                        f"{', '.join(GEN_GENERATORS)})")
    if steps < 1 or eval_every < 1:
        raise UserError("--steps and --eval-every must be >= 1")
    out = refuse_existing(out)
    tok = char_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=tok.eos_token_id, **(arch or ARCH))
    model = LlamaForCausalLM(cfg)
    dev_items = make_gen_tasks(dev_per_task, seed, tasks, split="dev")
    dev = [(it["prompt"], it["target"]) for it in dev_items]
    dev_task = [it["task"] for it in dev_items]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    es = EarlyStopping(patience=patience, min_delta=min_delta, mode="max") if rule else None
    rng = random.Random(seed + 1)
    recipe = dict(lr=lr, warmup=warmup, clip=clip, batch=batch, weight_decay=WEIGHT_DECAY,
                  arch=dict(arch or ARCH), rule=STEP_RULE if rule else "none (fixed steps)",
                  patience=patience, min_delta=min_delta, dev_per_task=dev_per_task)
    curve = {"steps": 0, "cap": steps, "stopped_at": None, "dev_steps": [], "dev_em": [],
             "dev_em_by_task": {t: [] for t in tasks}, "train_loss": [], "recipe": recipe}
    t0, running = time.perf_counter(), []
    model.train()
    for step in range(1, steps + 1):
        ids, att, m = _encode(tok, _train_batch(rng, tasks, batch))
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits[m[:, 1:]], ids[:, 1:][m[:, 1:]])
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        running.append(loss.item())
        curve["steps"] = step
        if step % eval_every == 0 or step == steps:
            model.eval()
            hits = teacher_forced_hits(model, tok, dev)
            model.train()
            em = float(hits.float().mean())
            curve["dev_steps"].append(step)
            curve["dev_em"].append(em)
            for t in tasks:
                sel = [i for i, tt in enumerate(dev_task) if tt == t]
                curve["dev_em_by_task"][t].append(float(hits[sel].float().mean()))
            curve["train_loss"].append(sum(running) / len(running))
            running = []
            if log:
                per = ", ".join(f"{t} {v[-1]:.2f}" for t, v in curve["dev_em_by_task"].items())
                log(f"step {step}: train loss {curve['train_loss'][-1]:.3f}, dev EM (teacher-forced) "
                    f"{em:.3f} ({per}), {time.perf_counter() - t0:.0f} s")
            if es is not None and es.step(em, at=step):
                curve["stopped_at"] = step
                break
    model.eval()
    curve["seconds"] = time.perf_counter() - t0
    from icml26_shared.io import atomic_dir

    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (Path(tmp) / "train_curve.json").write_text(json.dumps(curve, indent=1))
    curve["path"] = str(out)
    return curve
