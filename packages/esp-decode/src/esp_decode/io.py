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
    """``(model, tokenizer)`` from a local HF folder (through the core's ``load_pretrained``: the
    folder is checked first, every failure is one ``UserError`` line, nothing is downloaded), or
    SmolLM2-135M-Instruct for ``smollm2``, in ``dtype`` on ``device`` (default: CUDA when
    present); a model tree decoding cannot drive (``check_model``) is refused."""
    from .decode import check_model

    if spec != "smollm2":
        from types import SimpleNamespace

        from icml26_shared.hf import check_model_dir, load_pretrained

        config = json.loads((check_model_dir(spec) / "config.json").read_text(encoding="utf-8"))
        check_model(SimpleNamespace(config=SimpleNamespace(model_type=config["model_type"])))  # before the weights load
        model, tok = load_pretrained(spec, dtype=dtype, device=device or "auto", attn_implementation="sdpa")
        check_model(model)
        return model, tok
    import contextlib
    import io

    import torch

    from icml26_shared.data import load_smollm2

    with contextlib.redirect_stderr(io.StringIO()):   # the one-time GGUF conversion's progress bar
        model, tok = load_smollm2(dtype)
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
