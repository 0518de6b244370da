"""Users' formats: task JSONL / local datasets, models (local folders, ``smollm2``, a tiny
in-process Llama or Qwen2), states / bases / vectors as safetensors plus JSON. Every write goes
to a temporary sibling and is renamed into place; an existing output is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

from icml26_shared import UserError
from icml26_shared.io import atomic_dir

TASK_KEYS = ("id", "task", "prompt")


# --- tasks -----------------------------------------------------------------------------------

def read_tasks(path: str | Path) -> list[dict]:
    """Forced-choice items ``{"id", "task", "prompt", "options", "answer"}`` (or generation items
    with ``"target"``) from JSONL, or from a local ``datasets`` folder/file."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if path.suffix.lower() == ".jsonl" and path.is_file():
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
    else:
        from icml26_shared.data import load_local_dataset

        rows = [dict(r) for r in load_local_dataset(path)]
    if not rows:
        raise UserError(f"{path} holds no items")
    for n, r in enumerate(rows, 1):
        _check_item(r, f"{path}: item {n}")
    return rows


def _check_item(r: dict, where: str) -> None:
    if not isinstance(r, dict):
        raise UserError(f"{where}: not a JSON object")
    missing = [k for k in TASK_KEYS if k not in r]
    if missing:
        raise UserError(f"{where}: missing {', '.join(missing)}")
    if "options" in r:
        opts, ans = r["options"], r.get("answer")
        if not isinstance(opts, list) or len(opts) < 2 or not all(isinstance(o, str) and o for o in opts):
            raise UserError(f"{where}: options must be a list of at least 2 non-empty strings")
        if not isinstance(ans, int) or isinstance(ans, bool) or not 0 <= ans < len(opts):
            raise UserError(f"{where}: answer {ans!r} is not an option index in [0, {len(opts) - 1}]")
    elif "target" not in r:
        raise UserError(f"{where}: needs options + answer (forced choice) or target (generation)")


def forced_choice_only(items: list[dict], where: str) -> list[dict]:
    fc = [it for it in items if "options" in it]
    if not fc:
        raise UserError(f"{where}: this command needs forced-choice items (options + answer)")
    return fc


# --- models ----------------------------------------------------------------------------------

def char_tokenizer():
    """A character-level fast tokenizer built in-process (no files), for the tiny models."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()  # decode "abc" as "abc", not "a b c" (generation exact match)
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def tiny_model(kind: str = "llama", seed: int = 0, layers: int = 2, hidden: int = 64):
    """A random-init tiny causal LM (``llama`` or ``qwen2``) and its char tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = char_tokenizer()
    kw = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
              num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=1024, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(seed)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**kw))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**kw))
    else:
        raise UserError(f"unknown tiny model {kind!r} (llama or qwen2)")
    return model.eval(), tok


_TINY_DTYPES = {"auto": "float32", "float32": "float32", "fp32": "float32", "bfloat16": "bfloat16",
                "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}


def _tiny_on(model, dtype: str, device: str):
    """The in-process tiny models on the asked dtype and device (the core's names and checks)."""
    import torch

    name = _TINY_DTYPES.get(str(dtype).lower())
    if name is None:
        raise UserError(f"unknown dtype {dtype!r} (choose one of auto, float32, bfloat16, float16)")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    ok = device in ("cpu", "cuda", "mps") or (device.startswith("cuda:") and device[5:].isdigit())
    if not ok:
        raise UserError(f"unknown device {device!r} (choose auto, cpu, cuda or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {device} asked for, but torch sees no CUDA GPU here")
    return model.to(device=device, dtype=getattr(torch, name))


def load_model(spec: str, dtype: str = "float32", device: str = "cpu", device_map: str | None = None):
    """``(model, tokenizer)`` from a local folder (through the core's ``load_pretrained``: the
    folder is checked first, every failure is one ``UserError`` line, nothing is downloaded),
    ``smollm2`` or ``tiny-llama`` / ``tiny-qwen2``, in ``dtype`` (auto, float32, bfloat16,
    float16; auto = float32 on the CPU, bfloat16 on a GPU that has it) on ``device`` (auto, cpu,
    cuda, cuda:N), or placed by ``device_map`` (e.g. auto, across GPUs)."""
    if spec in ("tiny-llama", "tiny-qwen2"):
        model, tok = tiny_model(spec.split("-")[1])
        return _tiny_on(model, dtype, device), tok
    from icml26_shared.hf import load_pretrained

    if spec == "smollm2":
        from icml26_shared.data import smollm2_hf_dir

        spec = smollm2_hf_dir()
    kw = {"device_map": device_map} if device_map else {}
    model, tok = load_pretrained(spec, dtype=dtype, device=device, **kw)
    tok.padding_side = "left"
    return model, tok


# --- atomic output ---------------------------------------------------------------------------

def refuse_existing(path: str | Path) -> Path:
    path = Path(path)
    if path.exists():
        raise UserError(f"{path} already exists (nothing was written)")
    return path


_EXISTS = "{path} already exists (nothing was written)"


def write_json_atomic(path: str | Path, obj) -> Path:
    from icml26_shared.io import write_json

    return write_json(path, obj, indent=2)


# --- states and bases ------------------------------------------------------------------------

def save_states(out: str | Path, states: dict, manifest: dict) -> Path:
    """``out/<task>.safetensors`` (tensor ``states`` [n, d]) and ``out/manifest.json``."""
    from safetensors.torch import save_file

    with atomic_dir(out, exists_error=_EXISTS) as tmp:
        for task, x in states.items():
            save_file({"states": x.contiguous().float()}, str(tmp / f"{task}.safetensors"))
        write_json_atomic(tmp / "manifest.json", {**manifest, "counts": {t: int(len(x)) for t, x in states.items()}})
    return Path(out)


def load_states(folder: str | Path) -> tuple[dict, dict]:
    """``({task: np.ndarray [n, d]}, manifest)``; only the tensors are required."""
    import numpy as np
    from safetensors.numpy import load_file

    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a states folder")
    files = sorted(folder.glob("*.safetensors"))
    if len(files) < 2:
        raise UserError(f"{folder}: needs the states of at least 2 tasks (<task>.safetensors)")
    states = {}
    for f in files:
        try:
            x = load_file(str(f))["states"]
        except Exception as exc:  # safetensors raises several types for corrupt files
            raise UserError(f"{f}: cannot read states ({type(exc).__name__})") from None
        if x.ndim != 2 or not np.isfinite(x).all():
            raise UserError(f"{f}: states must be a finite [n, d] tensor")
        states[f.stem] = x.astype(np.float64)
    widths = {x.shape[1] for x in states.values()}
    if len(widths) != 1:
        raise UserError(f"{folder}: tasks have different widths {sorted(widths)}")
    man = folder / "manifest.json"
    manifest = json.loads(man.read_text()) if man.is_file() else {}
    return states, manifest


def save_basis(out: str | Path, fit, meta: dict) -> Path:
    """``basis.safetensors`` (``Q`` [d, k], ``shared`` [d, |S|]) and ``basis.json``."""
    import torch
    from safetensors.torch import save_file

    with atomic_dir(out, exists_error=_EXISTS) as tmp:
        save_file({"Q": torch.from_numpy(fit.Q.copy()).float(),
                   "shared": torch.from_numpy(fit.shared.copy()).float()}, str(tmp / "basis.safetensors"))
        write_json_atomic(tmp / "basis.json", {
            **meta, "k": fit.k, "shared_idx": [int(i) for i in fit.shared_idx],
            "shared_dim": int(len(fit.shared_idx)), "tau": fit.tau, "tau_k": fit.tau * fit.k,
            "m": fit.m, "tasks": fit.tasks, "n_per_task": fit.n_per_task})
    return Path(out)


def load_basis(folder: str | Path, width: int | None = None) -> tuple[dict, dict]:
    import numpy as np
    from safetensors.numpy import load_file

    folder = Path(folder)
    f, j = folder / "basis.safetensors", folder / "basis.json"
    if not f.is_file() or not j.is_file():
        raise UserError(f"{folder}: not a basis folder (basis.safetensors and basis.json)")
    try:
        tensors = {k: v.astype(np.float64) for k, v in load_file(str(f)).items()}
        meta = json.loads(j.read_text())
    except Exception as exc:
        raise UserError(f"{folder}: cannot read the basis ({type(exc).__name__})") from None
    if "shared" not in tensors or tensors["shared"].ndim != 2:
        raise UserError(f"{f}: no [d, |S|] tensor 'shared'")
    if width is not None and tensors["shared"].shape[0] != width:
        raise UserError(f"{folder}: the basis has width {tensors['shared'].shape[0]} but the model's "
                        f"hidden size is {width}")
    return tensors, meta


def load_vectors(path: str | Path, width: int) -> dict:
    import numpy as np
    from safetensors.numpy import load_file

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    try:
        vecs = {k: v.astype(np.float64).ravel() for k, v in load_file(str(path)).items()}
    except Exception as exc:
        raise UserError(f"{path}: cannot read vectors ({type(exc).__name__})") from None
    bad = [k for k, v in vecs.items() if v.shape[0] != width or not all(math.isfinite(x) for x in v[:8])]
    if not vecs or bad:
        raise UserError(f"{path}: every vector must have width {width} (bad: {', '.join(bad) or 'none given'})")
    return vecs
