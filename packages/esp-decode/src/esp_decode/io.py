"""Users' formats: prompt files (JSONL ``{"id", "prompt"}`` or one prompt per line), local Hugging
Face model folders (or ``smollm2``), and atomic output files (temporary file, then rename)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from icml26_shared import UserError
from icml26_shared.io import atomic_write_text


def read_prompts(path: str | Path) -> list[tuple[str, str]]:
    """``[(id, prompt)]``. A file whose first non-blank line starts with ``{`` is JSONL (every line
    then needs a non-empty string ``prompt``); otherwise each non-blank line is one prompt."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such prompt file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise UserError(f"{path}: empty prompt file")
    out: list[tuple[str, str]] = []
    if lines[0][1].lstrip().startswith("{"):
        for i, line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{i}: malformed JSON ({exc.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
                raise UserError(f"{path}:{i}: each JSONL line needs a non-empty string 'prompt'")
            out.append((str(row.get("id", len(out))), row["prompt"]))
    else:
        out = [(str(k), line) for k, (_, line) in enumerate(lines)]
    return out


def load_model(spec: str, dtype: str = "float32", device: str | None = None):
    """``(model, tokenizer)`` from a local HF folder, or SmolLM2-135M-Instruct for ``smollm2``, in
    ``dtype`` on ``device`` (default: CUDA when present)."""
    import logging
    import warnings

    import torch

    from .decode import check_model

    if spec == "smollm2":
        import contextlib
        import io

        from icml26_shared.data import load_smollm2

        with contextlib.redirect_stderr(io.StringIO()):   # the one-time GGUF conversion's progress bar
            model, tok = load_smollm2(dtype)
    else:
        path = Path(spec)
        if not (path / "config.json").is_file():
            raise UserError(f"{spec}: not a local Hugging Face model folder (no config.json), nor 'smollm2'")
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        try:
            config = AutoConfig.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise UserError(f"{spec}: cannot read config.json ({str(exc).splitlines()[0]})") from None
        if getattr(config, "model_type", None) is None:
            raise UserError(f"{spec}: config.json has no model_type")
        from types import SimpleNamespace

        check_model(SimpleNamespace(config=config))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("transformers").setLevel(logging.ERROR)
            try:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                                             attn_implementation="sdpa", local_files_only=True)
                tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            except (OSError, ValueError) as exc:
                raise UserError(f"{spec}: cannot load the model ({str(exc).splitlines()[0]})") from None
    check_model(model)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device=device, dtype=getattr(torch, dtype))
    return model.eval(), tok


def encode(tok, prompt: str, chat: bool) -> list[int]:
    if chat:
        if getattr(tok, "chat_template", None) is None:
            raise UserError("--chat: this tokenizer has no chat template")
        return list(tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))
    ids = tok(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise UserError(f"prompt {prompt[:30]!r} encodes to no tokens")
    return list(ids)


def check_out(path: Path | None, force: bool = False) -> None:
    if path is not None and path.exists() and not force:
        raise UserError(f"{path} already exists (pass --force to replace it)")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically; the folder must exist (one line if not)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"{path.parent}: no such folder")
    atomic_write_text(path, text, mkdir=False)


def finite(name: str, value: float, lo: float | None = None) -> float:
    if not math.isfinite(value) or (lo is not None and value < lo):
        raise UserError(f"{name} must be a finite number{'' if lo is None else f' >= {lo}'}, got {value}")
    return value
