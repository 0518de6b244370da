"""One loader for local Hugging Face model folders: checked before torch is imported, never
downloading, every failure one ``UserError`` line.

    model, tok = load_pretrained("path/to/folder")                      # causal LM + tokenizer
    model, proc = load_pretrained("path/to/llava", "vlm", device="cuda")  # + AutoProcessor

The folder is checked first, cheaply and without torch or transformers (``check_model_dir``): it
exists, ``config.json`` is valid JSON with a ``model_type``, the weights are all there (every shard
an index lists) and each ``.safetensors`` header fits its file, and the tokenizer (or processor)
files are present. Only then are torch and transformers imported; whatever they raise while
loading becomes ``cannot load <path> as <kind>: <first line of the cause>``.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

from .errors import UserError

#: kind -> the transformers Auto classes that load it, first one the installed version has
KINDS: dict[str, tuple[str, ...]] = {
    "causal_lm": ("AutoModelForCausalLM",),
    "vlm": ("AutoModelForImageTextToText", "AutoModelForVision2Seq"),
    "seq2seq_lm": ("AutoModelForSeq2SeqLM",),
    "masked_lm": ("AutoModelForMaskedLM",),
    "encoder": ("AutoModel",),
    "sequence_classification": ("AutoModelForSequenceClassification",),
}
#: kinds whose checkpoint must cover every weight of the model (a task head of a
#: sequence_classification model, or an encoder's pooler, is legitimately new)
STRICT_KINDS = ("causal_lm", "vlm", "seq2seq_lm", "masked_lm")
DTYPES = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
                  "float": "float32"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "vocab.txt", "spiece.model", "sentencepiece.bpe.model")
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
_MAX_HEADER = 100_000_000  # the safetensors format's own limit on the JSON header


def check_model_dir(path: str | Path, *, tokenizer: bool = True, processor: bool = False) -> Path:
    """Check a Hugging Face folder without importing torch or transformers; return it as a
    ``Path``. Raises ``UserError`` naming the path, what is missing and what to do."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"{path} does not exist: give the local folder of a Hugging Face model "
                        "(nothing is downloaded)")
    if not path.is_dir():
        raise UserError(f"{path} is not a directory: give the folder that holds config.json and "
                        "the weights, not a file")
    config = path / "config.json"
    if not config.is_file():
        raise UserError(f"{path} has no config.json: not a Hugging Face model folder (copy the "
                        "whole folder saved by save_pretrained)")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{config} is not valid JSON ({_first_line(exc)}): re-copy it") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise UserError(f"{config} has no model_type: not a transformers config (re-save the model "
                        "with save_pretrained)")
    _check_weights(path)
    if tokenizer and not _any_file(path, TOKENIZER_FILES):
        raise UserError(f"{path} has no tokenizer ({', '.join(TOKENIZER_FILES)}): copy the "
                        "tokenizer files next to the weights (tokenizer.save_pretrained)")
    if processor and not _any_file(path, PROCESSOR_FILES):
        raise UserError(f"{path} has no processor ({' or '.join(PROCESSOR_FILES)}): copy them next "
                        "to the weights (processor.save_pretrained)")
    return path


def check_safetensors(path: str | Path) -> None:
    """Check a ``.safetensors`` file's header without torch: 8 bytes of little-endian header
    length, a JSON header, and tensor data (the largest ``data_offsets`` end) that fills the rest
    of the file exactly. ``UserError`` when truncated or corrupt."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _Corrupt(f"{size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                raise _Corrupt(f"header of {n} bytes in a file of {size} bytes")
            header = json.loads(f.read(n).decode("utf-8"))
    except _Corrupt as exc:
        raise UserError(f"{path} is truncated or corrupt ({exc}): re-copy or re-download it") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path} is truncated or corrupt (unreadable header: {_first_line(exc)}): "
                        "re-copy or re-download it") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {_first_line(exc)}") from None
    if not isinstance(header, dict):
        raise UserError(f"{path} is truncated or corrupt (the header is not a JSON object): re-copy it")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and o >= 0 for o in offsets) or offsets[0] > offsets[1]):
            raise UserError(f"{path} is truncated or corrupt (tensor {name!r} has bad data_offsets): "
                            "re-copy it")
        end = max(end, offsets[1])
    if 8 + n + end != size:  # the format has no padding: safetensors refuses either way
        raise UserError(f"{path} is truncated or corrupt ({size} bytes, its header describes "
                        f"{8 + n + end}): re-copy or re-download it")


def load_pretrained(
    path: str | Path,
    kind: str = "causal_lm",
    *,
    dtype: Any = "auto",
    device: str = "auto",
    tokenizer: bool = True,
    processor: bool | None = None,
    trust_remote_code: bool = False,
    strict: bool = True,
    **model_kwargs: Any,
) -> tuple[Any, Any]:
    """``(model, tokenizer | processor | None)`` from a local Hugging Face folder, never
    downloading.

    ``kind``: one of ``KINDS`` (causal_lm, vlm, seq2seq_lm, masked_lm, encoder,
    sequence_classification). ``dtype``: auto (float32 on CPU, bfloat16 on a GPU that supports
    it, else float32), float32, bfloat16, float16 (or fp32/bf16/fp16, or a ``torch.dtype``).
    ``device``: auto (cuda when available), cpu, cuda, cuda:N; on a GPU the weights load straight
    onto it. ``processor``: load ``AutoProcessor`` (returned instead of the tokenizer, which it
    holds); None = only for kind vlm. ``strict``: for causal_lm/vlm/seq2seq_lm/masked_lm, refuse a
    checkpoint that leaves some of the model's weights freshly initialised. ``model_kwargs`` go
    to the model's ``from_pretrained`` (e.g. ``attn_implementation="sdpa"``, ``device_map``: then
    the model is not moved). The model is returned in eval mode.
    """
    if kind not in KINDS:
        raise UserError(f"unknown model kind {kind!r} (choose one of {', '.join(KINDS)})")
    if processor is None:
        processor = kind == "vlm"
    dtype_name = _dtype_name(dtype)
    _check_device(device)
    path = check_model_dir(path, tokenizer=tokenizer and not processor, processor=processor)

    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # no "Some weights…" notes or library chatter on stderr
    hf_logging.disable_progress_bar()
    dev = _resolve_device(torch, device)
    torch_dtype = _resolve_dtype(torch, dtype if dtype_name is None else dtype_name, dev)
    auto = _auto_class(transformers, kind)
    model_type = json.loads((path / "config.json").read_text(encoding="utf-8"))["model_type"]
    _check_model_type(transformers, path, kind, model_type, trust_remote_code)

    kw = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    model_kw = {"dtype": torch_dtype, **model_kwargs}
    if model_kw.get("device_map", "") is None:  # device_map=None passed along: same as not given
        del model_kw["device_map"]
    move = "device_map" not in model_kw
    if move and dev.type != "cpu":
        model_kw["device_map"] = str(dev)  # straight onto the GPU: never the whole model in host memory
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, info = auto.from_pretrained(path, output_loading_info=True, **kw, **model_kw)
            if processor:
                tok = transformers.AutoProcessor.from_pretrained(path, **kw)
            elif tokenizer:
                tok = transformers.AutoTokenizer.from_pretrained(path, **kw)
            else:
                tok = None
    except _load_errors() as exc:
        cause = _first_line(exc)
        if "ignore_mismatched_sizes" in cause:  # the details went to the silenced log: find them
            cause = _mismatch(auto, path, {**kw, **model_kw}) or cause
        raise UserError(f"cannot load {path} as {kind}: {cause}") from None
    missing = sorted((info or {}).get("missing_keys") or ())
    if strict and kind in STRICT_KINDS and missing:
        s = "s" if len(missing) > 1 else ""
        raise UserError(f"cannot load {path} as {kind}: {len(missing)} weight{s} of "
                        f"{type(model).__name__} {'are' if s else 'is'} missing from the checkpoint "
                        f"(e.g. {missing[0]}): "
                        "the folder is incomplete or holds another architecture")
    if move and not _on(model, dev):
        model = model.to(dev)
    return model.eval(), tok


def summarize(model: Any, tok: Any = None) -> dict[str, str]:
    """Short facts about a loaded model: class, model_type, parameters, dtype, device, tokenizer."""
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
    devices = sorted({str(p.device) for p in params})
    out = {
        "model": type(model).__name__,
        "model_type": str(getattr(getattr(model, "config", None), "model_type", "?")),
        "params": f"{n:,} ({_human(n)})",
        "dtype": ", ".join(dtypes) or "?",
        "device": ", ".join(devices) or "?",
    }
    if tok is not None:
        inner = getattr(tok, "tokenizer", None)  # a processor holds its tokenizer
        vocab = _safe_len(inner if inner is not None else tok)
        label = type(tok).__name__
        if inner is not None:
            label += f" ({type(inner).__name__})"
        out["tokenizer"] = label + (f", vocab {vocab:,}" if vocab is not None else "")
    else:
        out["tokenizer"] = "none"
    return out


# --- helpers ---------------------------------------------------------------------------------

class _Corrupt(Exception):
    pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = f"KeyError {exc.args[0]!r}"
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _any_file(path: Path, names: tuple[str, ...]) -> bool:
    return any((path / name).is_file() for name in names)


def _check_weights(path: Path) -> None:
    found = [name for name in WEIGHT_FILES if (path / name).is_file()]
    if not found:
        raise UserError(f"{path} has no weights ({', '.join(WEIGHT_FILES)}): copy the weight files "
                        "saved by save_pretrained into it")
    # the order transformers prefers: a single safetensors file, its sharded index, then .bin
    name = found[0]
    if name == "model.safetensors":
        check_safetensors(path / name)
    elif name.endswith(".index.json"):
        index = path / name
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            shards = sorted(set(data["weight_map"].values()))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"{index} is not a valid shard index ({_first_line(exc)}): "
                            "re-copy it") from None
        if not shards:
            raise UserError(f"{index} lists no shards: re-copy it")
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise UserError(f"{path} is missing the shard {missing[0]}{more} listed in {name} "
                            f"({len(shards)} shards in all): copy every shard")
        for s in shards:
            if s.endswith(".safetensors"):
                check_safetensors(path / s)
            else:
                _check_bin(path / s)
    else:
        _check_bin(path / name)


def _check_bin(path: Path) -> None:
    """A torch checkpoint is a zip archive (torch >= 1.6): its central directory is at the end,
    so a truncated copy is found without reading the data."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            magic = f.read(2)
        ok = size > 0 and (magic != b"PK" or zipfile.is_zipfile(path))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {_first_line(exc)}") from None
    if not ok:
        raise UserError(f"{path} is truncated or corrupt ({size} bytes, not a complete torch "
                        "checkpoint): re-copy or re-download it")


def _dtype_name(dtype: Any) -> str | None:
    """Validate a dtype given as text before any heavy import; None for a torch.dtype object."""
    if not isinstance(dtype, str):
        if type(dtype).__name__ == "dtype" and type(dtype).__module__ == "torch":
            return None
        raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if name not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r} (choose one of {', '.join(DTYPES)})")
    return name


def _check_device(device: str) -> None:
    ok = isinstance(device, str) and (
        device in ("auto", "cpu", "cuda", "mps") or (device.startswith("cuda:") and device[5:].isdigit()))
    if not ok:
        raise UserError(f"unknown device {device!r} (choose auto, cpu, cuda or cuda:N)")


def _resolve_device(torch: Any, device: str) -> Any:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device {device} asked for, but torch sees no CUDA GPU here "
                            "(use --device cpu or auto)")
        index = int(device[5:]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UserError(f"device {device} asked for, but torch sees {torch.cuda.device_count()} GPU(s)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise UserError("device mps asked for, but it is not available here (use --device cpu)")
    return torch.device(device)


def _resolve_dtype(torch: Any, dtype: Any, dev: Any) -> Any:
    if not isinstance(dtype, str):
        return dtype
    if dtype == "auto":
        if dev.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, dtype)


def _auto_class(transformers: Any, kind: str) -> Any:
    for name in KINDS[kind]:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    raise UserError(f"transformers {transformers.__version__} has none of {', '.join(KINDS[kind])} "
                    f"for kind {kind}: upgrade transformers")


def _check_model_type(transformers: Any, path: Path, kind: str, model_type: str,
                      trust_remote_code: bool) -> None:
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:  # a layout this module does not know: let from_pretrained decide
        return
    if model_type in CONFIG_MAPPING:
        return
    if trust_remote_code:  # the folder may bring its own code (auto_map)
        return
    raise UserError(f"cannot load {path} as {kind}: model_type {model_type!r} is not known to "
                    f"transformers {transformers.__version__} (upgrade transformers, or pass "
                    "trust_remote_code for a folder that ships its own modelling code)")


def _load_errors() -> tuple[type[BaseException], ...]:
    # TypeError: a config value of the wrong type; ImportError: a tokenizer needing sentencepiece
    errors: list[type[BaseException]] = [OSError, ValueError, KeyError, RuntimeError, ImportError,
                                         TypeError]
    try:
        from safetensors import SafetensorError

        errors.append(SafetensorError)
    except ImportError:
        pass
    return tuple(errors)


def _mismatch(auto: Any, path: Path, kw: dict[str, Any]) -> str | None:
    """The first checkpoint/config shape mismatch, in words (loads once more, in the error path
    only, with ``ignore_mismatched_sizes``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, info = auto.from_pretrained(path, output_loading_info=True, ignore_mismatched_sizes=True, **kw)
        key, ckpt, model = sorted(info["mismatched_keys"])[0]
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return None
    n = len(info["mismatched_keys"])
    more = f" (and {n - 1} more)" if n > 1 else ""
    return (f"{key} has shape {list(ckpt)} in the checkpoint but {list(model)} in the model built from "
            f"config.json{more}: the config and the weights come from different models")


def _on(model: Any, dev: Any) -> bool:
    try:
        first = next(model.parameters())
    except (StopIteration, AttributeError):
        return True
    return first.device.type == dev.type and (dev.index is None or first.device.index == dev.index)


def _safe_len(tok: Any) -> int | None:
    try:
        return len(tok)
    except TypeError:
        return None


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)
