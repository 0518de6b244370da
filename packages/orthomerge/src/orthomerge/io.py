"""Users' formats: peft OFT / BOFT / LoRA adapter folders, Hugging Face safetensors checkpoints.

Everything is read lazily through ``safetensors.safe_open`` (one tensor at a time) and every write
goes to a temporary sibling folder renamed into place at the end: an error leaves nothing behind
and never touches an existing output unless ``force``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from icml26_shared import UserError
from icml26_shared.io import atomic_dir as shared_atomic_dir
from icml26_shared.io import write_json
from icml26_shared.merge import prepare_out as shared_prepare_out

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PREFIX = "base_model.model."
SUFFIXES = {"OFT": (".oft_R.weight", ".oft_r"), "BOFT": (".boft_R", ".boft_s"),
            "LORA": (".lora_A.weight", ".lora_B.weight")}
# config fields that must agree for adapters to be merged into one
SAME = {"OFT": ("oft_block_size", "r", "block_share", "coft", "eps", "use_cayley_neumann",
                "num_cayley_neumann_terms", "fan_in_fan_out"),
        "BOFT": ("boft_block_size", "boft_block_num", "boft_n_butterfly_factor", "fan_in_fan_out")}
HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
            "chat_template.jinja", "added_tokens.json")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{what} {path}: unreadable ({type(exc).__name__}: {exc})") from None


class Tensors:
    """Lazy tensor store over one or more safetensors files (a checkpoint or an adapter)."""

    def __init__(self, files: dict[str, Path], label: str):
        self.files, self.label = files, label  # tensor name -> file

    @classmethod
    def open(cls, path: str | Path) -> Tensors:
        """A ``.safetensors`` file or a folder with ``model.safetensors`` /
        ``model.safetensors.index.json`` / ``adapter_model.safetensors``."""
        from safetensors import safe_open

        path = Path(path)
        if not path.exists():
            raise UserError(f"{path} does not exist")
        if path.is_dir():
            index = path / "model.safetensors.index.json"
            if index.is_file():
                wmap = _read_json(index, "checkpoint index").get("weight_map", {})
                files = {k: path / v for k, v in wmap.items()}
                for f in set(files.values()):
                    if not f.is_file():
                        raise UserError(f"checkpoint {path}: missing shard {f.name}")
                if not files:
                    raise UserError(f"checkpoint {path}: empty weight_map in {index.name}")
            else:
                cands = [path / n for n in ("model.safetensors", ADAPTER_WEIGHTS) if (path / n).is_file()]
                if not cands:
                    raise UserError(f"{path}: no model.safetensors, model.safetensors.index.json or "
                                    f"{ADAPTER_WEIGHTS} (only safetensors checkpoints are read)")
                files = {}
                for f in cands[:1]:
                    files.update({k: f for k in _keys(f)})
        else:
            files = {k: path for k in _keys(path)}
        for f in set(files.values()):  # open every file once: a corrupt one fails here, not midway
            try:
                with safe_open(str(f), framework="pt"):
                    pass
            except Exception as exc:
                raise UserError(f"{f}: not a readable safetensors file ({exc})") from None
        return cls(files, str(path))

    def keys(self) -> list[str]:
        return list(self.files)

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def shape(self, key: str) -> tuple[int, ...]:
        from safetensors import safe_open

        with safe_open(str(self.files[key]), framework="pt") as f:
            return tuple(f.get_slice(key).get_shape())

    def __getitem__(self, key: str) -> torch.Tensor:
        """The tensor, checked finite on read (before any SVD sees it): a NaN or inf is one
        ``UserError`` line naming the tensor and its file."""
        from safetensors import safe_open

        with safe_open(str(self.files[key]), framework="pt") as f:
            t = f.get_tensor(key)
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise UserError(f"{key} in {self.files[key]}: {bad} non-finite value(s) (NaN or inf); "
                            "this checkpoint or adapter cannot be merged")
        return t


def _keys(file: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            return list(f.keys())
    except Exception as exc:
        raise UserError(f"{file}: not a readable safetensors file ({exc})") from None


class Adapter:
    """A peft adapter folder: its config, its tensors, and the modules it targets."""

    def __init__(self, path: Path, config: dict[str, Any], tensors: Tensors):
        self.path, self.config, self.tensors = path, config, tensors
        self.peft_type = str(config.get("peft_type", "")).upper()

    @classmethod
    def open(cls, path: str | Path, allowed=("OFT", "BOFT")) -> Adapter:
        path = Path(path)
        if not path.is_dir():
            raise UserError(f"adapter {path} does not exist or is not a directory")
        if not (path / ADAPTER_CONFIG).is_file():
            raise UserError(f"adapter {path}: missing {ADAPTER_CONFIG}")
        if not (path / ADAPTER_WEIGHTS).is_file():
            raise UserError(f"adapter {path}: missing {ADAPTER_WEIGHTS} (only safetensors is read)")
        config = _read_json(path / ADAPTER_CONFIG, "adapter config")
        ad = cls(path, config, Tensors.open(path / ADAPTER_WEIGHTS))
        if ad.peft_type not in allowed:
            raise UserError(f"adapter {path}: peft_type {config.get('peft_type')!r} is not "
                            f"{' or '.join(allowed)}")
        if not ad.modules():
            raise UserError(f"adapter {path}: no {ad.peft_type} weights in {ADAPTER_WEIGHTS}")
        return ad

    @property
    def legacy(self) -> bool:
        """peft ≤ 0.15 OFT stored full b×b matrices as ``oft_r`` (skew part used)."""
        return self.peft_type == "OFT" and any(k.endswith(".oft_r") for k in self.tensors.keys())

    def modules(self) -> list[str]:
        """Module paths without peft's ``base_model.model.`` prefix, sorted."""
        main = SUFFIXES[self.peft_type][0]
        sufs = (main, ".oft_r") if self.peft_type == "OFT" else (main,)
        out = set()
        for k in self.tensors.keys():
            for s in sufs:
                if k.endswith(s):
                    out.add(k[: -len(s)].removeprefix(PREFIX))
        return sorted(out)

    def key(self, module: str, suffix: str) -> str:
        return PREFIX + module + suffix

    def other_keys(self) -> list[str]:
        """Tensors that are not the method's parameters (biases, modules_to_save): averaged."""
        sufs = SUFFIXES[self.peft_type] + ((".oft_s",) if self.peft_type == "OFT" else ())
        return sorted(k for k in self.tensors.keys() if not k.endswith(sufs))


def check_compatible(adapters: list[Adapter]) -> None:
    """Refuse mixed PEFT types, block sizes, Cayley settings, target modules or shapes."""
    first = adapters[0]
    for ad in adapters[1:]:
        if ad.peft_type != first.peft_type:
            raise UserError(f"mixed PEFT types: {first.path} is {first.peft_type}, {ad.path} is {ad.peft_type}")
        for field in SAME.get(first.peft_type, ()):
            if ad.config.get(field) != first.config.get(field) and not (first.legacy or ad.legacy):
                raise UserError(f"adapters differ in {field}: {first.config.get(field)!r} ({first.path}) "
                                f"vs {ad.config.get(field)!r} ({ad.path})")
        if ad.modules() != first.modules():
            diff = sorted(set(ad.modules()) ^ set(first.modules()))
            raise UserError(f"adapters target different modules: {first.path} vs {ad.path} "
                            f"(e.g. {diff[0]})")
        for k in set(first.tensors.keys()) & set(ad.tensors.keys()):
            if ad.tensors.shape(k) != first.tensors.shape(k):
                raise UserError(f"{k}: shape {ad.tensors.shape(k)} in {ad.path} vs "
                                f"{first.tensors.shape(k)} in {first.path} (different block sizes?)")
        if set(ad.other_keys()) != set(first.other_keys()):
            raise UserError(f"adapters {first.path} and {ad.path} hold different extra tensors")


# --- writing -------------------------------------------------------------------------------------

TOOL = "orthomerge"


def _writer() -> str:
    from icml26_shared.registry import package_version

    return f"{TOOL} {package_version(TOOL)}"


def prepare_out(out: str | Path, force: bool, inputs=()) -> Path:
    """Check ``--out`` before any work (the shared ``prepare_out``, tool ``orthomerge``): refuse a
    symlink, an ``out`` that is an input or ``--base``, contains one or lies inside one (symlinks
    followed), an existing one without ``force``, and with ``force`` any folder that is not an
    earlier orthomerge output. Returns the resolved path the run writes to."""
    return shared_prepare_out(out, force, tuple(inputs), tool=TOOL).resolve()


def atomic_dir(out: Path, force: bool = False):
    """Yield a temporary sibling folder; on success it replaces ``out`` (``icml26_shared.io.atomic_dir``,
    manifest writer ``orthomerge <version>``: a later ``--force`` may replace it)."""
    return shared_atomic_dir(Path(out), replace=force, writer=_writer())


def write_adapter(out: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor],
                  force: bool = False) -> Path:
    from safetensors.torch import save_file

    with atomic_dir(out, force) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / ADAPTER_WEIGHTS),
                  metadata={"format": "pt"})
        write_json(tmp / ADAPTER_CONFIG, config, indent=2, default=str)
    return out


def write_checkpoint(out: Path, tensors: dict[str, torch.Tensor], base_dir: Path | None,
                     force: bool = False, max_shard_size: str = "5GB") -> Path:
    """A Hugging Face checkpoint: safetensors shards (huggingface_hub's splitter), the index, and
    the base folder's config / tokenizer files."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    with atomic_dir(out, force) as tmp:
        split = split_torch_state_dict_into_shards(tensors, max_shard_size=max_shard_size)
        for fname, names in split.filename_to_tensors.items():
            save_file({n: tensors[n].contiguous() for n in names}, str(tmp / fname), metadata={"format": "pt"})
        if split.is_sharded:
            index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
            write_json(tmp / "model.safetensors.index.json", index, indent=2)
        if base_dir is not None and Path(base_dir).is_dir():
            for name in HF_FILES:
                if (Path(base_dir) / name).is_file():
                    shutil.copy2(Path(base_dir) / name, tmp / name)
    return out
