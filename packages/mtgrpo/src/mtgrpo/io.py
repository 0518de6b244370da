"""Users' formats: tasks from local files (``datasets``), Hugging Face causal LMs (full fine-tuning
or PEFT LoRA), the tiny CPU policy with its warm start, and checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from icml26_shared import UserError

from .config import TinyPolicyConfig
from .policy import TinyGPT, left_pad, sft_loss
from .tasks import CharTokenizer, Task, get_verifier, make_synthetic

# --- tasks --------------------------------------------------------------------------------------

def _read_jsonl(p: Path) -> list[dict]:
    """JSON Lines (or a JSON list) read here, so a malformed line is one clear error."""
    import json

    text = p.read_text(encoding="utf-8", errors="replace")
    if p.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    else:
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UserError(f"{p}: line {i} is not valid JSON ({exc.msg})") from None
    if not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{p}: every record must be a JSON object")
    return rows


def _read_rows(p: Path) -> list[dict]:
    if not p.exists():
        raise UserError(f"{p} does not exist")
    if p.is_file() and not p.read_bytes().strip():
        raise UserError(f"{p} is empty")
    if p.is_file() and p.suffix.lower() in (".jsonl", ".json"):
        return _read_jsonl(p)
    import logging

    from icml26_shared.data import load_local_dataset

    try:
        import datasets

        datasets.disable_progress_bars()  # the CLI's stderr carries errors only
        datasets.logging.set_verbosity(logging.CRITICAL)
        return [dict(r) for r in load_local_dataset(p)]
    except UserError:
        raise
    except Exception as exc:  # datasets raises many kinds of errors on malformed files
        raise UserError(f"{p}: cannot read: {type(exc).__name__}: {exc}") from None


def load_task(spec: str, verifier: str = "digits", n_train: int = 2000, n_test: int = 200,
              seed: int = 0, test_fraction: float = 0.1, n_dev: int = 0) -> Task:
    """A task from ``spec``: a synthetic name (``copy``, ``add:hard``…) or ``NAME=PATH`` / ``PATH``
    to a local JSONL/JSON/CSV/Parquet file (or ``save_to_disk`` folder) with ``prompt`` and
    ``answer`` columns; a ``split`` column (train / dev / test) is honoured, else the last
    ``test_fraction`` of rows is held out. ``verifier``: a name or ``module:function``;
    ``NAME=PATH@VERIFIER`` overrides it for this task. Files written by ``mtgrpo data
    reasoning-gym`` carry their metadata and default to the ``reasoning-gym`` verifier."""
    name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
    explicit = "@" in path
    if explicit:  # NAME=PATH@VERIFIER: a verifier for this task only
        path, _, verifier = path.rpartition("@")
    p = Path(path)
    looks_like_file = p.suffix or "/" in path or p.exists()
    if not looks_like_file:
        return make_synthetic(spec, n_train, n_test, seed, n_dev=n_dev)
    rows = _read_rows(p)
    if not rows:
        raise UserError(f"{p} is empty")
    missing = {"prompt", "answer"} - set(rows[0])
    if missing:
        raise UserError(f"{p}: missing column(s) {', '.join(sorted(missing))} (need prompt, answer)")
    if "split" in rows[0]:
        train = [r for r in rows if r["split"] not in ("test", "dev")]
        dev = [r for r in rows if r["split"] == "dev"]
        test = [r for r in rows if r["split"] == "test"]
    else:
        cut = max(1, int(round(len(rows) * (1 - test_fraction)))) if len(rows) > 1 else 1
        train, dev, test = rows[:cut], [], rows[cut:]
    if not test:
        raise UserError(f"{p}: no held-out rows to evaluate on (add rows with split=test, or "
                        "more rows so that the last tenth can be held out)")
    if not explicit and rows[0].get("source_dataset") and verifier in ("exact", "digits"):
        verifier = "reasoning-gym"  # a file written by `mtgrpo data reasoning-gym`
    return Task(name or p.stem, train, test, get_verifier(verifier), dev=dev)


# --- the tiny policy ----------------------------------------------------------------------------

def build_tiny(seed: int, cfg: TinyPolicyConfig | None = None):
    from .trainer import Policy

    cfg = cfg or TinyPolicyConfig()
    torch.manual_seed(seed)
    tok = CharTokenizer()
    model = TinyGPT(len(tok), cfg.d, cfg.layers, cfg.heads, cfg.ctx)
    return Policy(model, tok)


def sft_warmstart(policy, tasks: list[Task], cfg: TinyPolicyConfig | None = None,
                  seed: int = 0, steps: int | None = None, mix=None) -> list[float]:
    """Brief supervised warm start on all tasks (mixture ``mix``, default uniform) so each starts
    at a different, non-zero accuracy [R, design note §6.1]. Returns the loss curve."""
    cfg = cfg or TinyPolicyConfig()
    tok, model = policy.tokenizer, policy.model
    rng = np.random.default_rng([seed, 99])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(cfg.sft_steps if steps is None else steps):
        ks = rng.choice(len(tasks), cfg.sft_batch, p=None if mix is None else np.asarray(mix) / np.sum(mix))
        exs = [tasks[k].train[int(rng.integers(len(tasks[k].train)))] for k in ks]
        ids, pmask = left_pad([tok.encode(e["prompt"]) for e in exs], tok.pad_id)
        resp_ids = [tok.encode(e["answer"]) + [tok.eos_id] for e in exs]
        width = max(map(len, resp_ids))
        resp = torch.tensor([r + [tok.pad_id] * (width - len(r)) for r in resp_ids])
        rmask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in resp_ids])
        loss = sft_loss(model, ids, pmask, resp, rmask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


# --- Hugging Face models ------------------------------------------------------------------------

class HFTokenizer:
    """Adapter: ``encode`` (optionally through the chat template), ``decode`` (special tokens
    dropped), ``eos_id`` and ``pad_id`` (EOS when the tokenizer has no pad token)."""

    def __init__(self, tokenizer, chat_template: bool = False):
        self.tk = tokenizer
        self.chat = chat_template and getattr(tokenizer, "chat_template", None) is not None
        self.eos_id = tokenizer.eos_token_id
        if self.eos_id is None:
            raise UserError("the tokenizer has no eos token")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    def encode(self, text: str) -> list[int]:
        if self.chat:
            return list(self.tk.apply_chat_template([{"role": "user", "content": text}],
                                                    add_generation_prompt=True, tokenize=True,
                                                    return_dict=False))
        return list(self.tk(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids) -> str:
        return self.tk.decode(list(ids), skip_special_tokens=True)


DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
          "fp16": "float16", "float16": "float16"}


def load_hf_policy(path: str | Path, lora_r: int = 0, lora_alpha: int = 16,
                   target_modules: str | list[str] | None = None, chat_template: bool = False,
                   dtype: str = "fp32", gradient_checkpointing: bool = False):
    """A local Hugging Face causal LM (never downloads) in ``dtype`` (bf16 | fp16 | fp32);
    ``lora_r > 0`` wraps it in a PEFT LoRA adapter so only the adapter trains;
    ``gradient_checkpointing`` recomputes activations in the backward pass."""
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r} (bf16|fp16|fp32)")
    dtype = DTYPES[dtype]
    pol = _load_hf(Path(path), lora_r, lora_alpha, target_modules, chat_template, dtype)
    if gradient_checkpointing:
        m = pol.model
        base = m.get_base_model() if hasattr(m, "get_base_model") else m
        kw = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5 (the old name warns)
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
        if hasattr(base, "enable_input_require_grads"):
            base.enable_input_require_grads()
        base.config.use_cache = False
    return pol


def _load_hf(path: Path, lora_r, lora_alpha, target_modules, chat_template, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (path / "adapter_config.json").is_file():  # a PEFT adapter saved by `mtgrpo train --lora-r`
        from peft import AutoPeftModelForCausalLM

        try:
            model = AutoPeftModelForCausalLM.from_pretrained(path, is_trainable=True,
                                                             dtype=getattr(torch, dtype),
                                                             local_files_only=True)
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot load adapter {path}: {str(exc).splitlines()[0]}") from None
        return wrap_hf(model, tok, 0, chat_template=chat_template)
    if not (path / "config.json").is_file():
        raise UserError(f"{path} is not a local Hugging Face model folder (no config.json)")

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                                     local_files_only=True)
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load {path}: {str(exc).splitlines()[0]}") from None
    return wrap_hf(model, tok, lora_r, lora_alpha, target_modules, chat_template)


def lora_targets(model, spec: str | list[str] | None = None) -> str | list[str]:
    """The LoRA target modules for ``model``: ``None`` / ``"auto"`` gives peft's own table for a
    known architecture (``q_proj, v_proj`` for Llama / Qwen2, ``query_key_value`` for
    GPT-NeoX / Pythia, ...) and ``"all-linear"`` otherwise; ``"all-linear"`` or a comma list /
    list of module names is passed on as given."""
    if spec is None or spec == "auto":
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as known

        kind = getattr(getattr(model, "config", None), "model_type", None)
        return list(known[kind]) if kind in known else "all-linear"
    if spec == "all-linear":
        return spec
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    names = [n for n in names if n]
    if not names:
        raise UserError("--lora-targets is empty (auto, all-linear or module names)")
    return names


def wrap_hf(model, tokenizer, lora_r: int = 0, lora_alpha: int = 16,
            target_modules: str | list[str] | None = None, chat_template: bool = False):
    from .trainer import Policy

    if lora_r > 0:
        from peft import LoraConfig, get_peft_model

        targets = lora_targets(model, target_modules)
        cfg = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                         target_modules=targets)
        try:
            model = get_peft_model(model, cfg)
        except ValueError as exc:  # peft: no module of the model matches the targets
            raise UserError(f"--lora-targets {targets if isinstance(targets, str) else ','.join(targets)}"
                            f" match no module of this {type(model).__name__}: "
                            f"{str(exc).splitlines()[0][:200]}") from None
    return Policy(model, HFTokenizer(tokenizer, chat_template))


def save_policy(policy, out: str | Path) -> Path:
    """Save the trained weights: ``save_pretrained`` for HF / PEFT models, a state dict otherwise."""
    out = Path(out)
    model = policy.model
    if hasattr(model, "save_pretrained"):
        model.save_pretrained(out)
        tk = getattr(policy.tokenizer, "tk", None)
        if tk is not None:
            tk.save_pretrained(out)
    else:
        out.mkdir(parents=True, exist_ok=True)
        torch.save({"config": model.config, "state": model.state_dict()}, out / "tiny_policy.pt")
    return out
