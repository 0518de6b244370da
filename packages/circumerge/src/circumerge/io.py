"""PEFT LoRA adapters on disk: ``adapter_config.json`` + ``adapter_model.safetensors``.

Reading is lazy: ``PeftAdapter`` opens the safetensors file and loads one module's (A, B) at a
time (``safe_open``), so merging a whole adapter set holds one layer's factors, never every dense
delta. The LoRA scaling (``lora_alpha / r``, or ``/ √r`` with rsLoRA, with ``rank_pattern`` /
``alpha_pattern`` overrides) is folded into B on read; written adapters use ``lora_alpha = r`` so
their scaling is 1 and ``PeftModel.from_pretrained`` reproduces B A exactly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from icml26_shared import UserError

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
_A, _B = ".lora_A.weight", ".lora_B.weight"


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """peft's rule: a pattern applies when the module name ends with it (at a dot boundary)."""
    for pat, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({pat})$", module):
            return value
    return default


@dataclass
class PeftAdapter:
    """A PEFT LoRA adapter folder, read module by module."""

    path: Path
    config: dict[str, Any]
    modules: list[str]  # module paths as keyed in the file, without the .lora_A/.lora_B suffix
    shapes: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # module -> (r, n, m)

    @classmethod
    def open(cls, path: str | Path) -> PeftAdapter:
        from safetensors import safe_open

        path = Path(path)
        if not path.is_dir():
            raise UserError(f"adapter {path} does not exist or is not a directory")
        cfg_file, w_file = path / CONFIG_NAME, path / WEIGHTS_NAME
        if not cfg_file.is_file():
            raise UserError(f"adapter {path}: missing {CONFIG_NAME}")
        if not w_file.is_file():
            extra = " (only .safetensors is read; re-save with safe_serialization=True)" \
                if (path / "adapter_model.bin").is_file() else ""
            raise UserError(f"adapter {path}: missing {WEIGHTS_NAME}{extra}")
        try:
            config = json.loads(cfg_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"adapter {path}: unreadable {CONFIG_NAME} ({exc})") from None
        if str(config.get("peft_type", "LORA")).upper() != "LORA":
            raise UserError(f"adapter {path}: peft_type {config.get('peft_type')!r} is not LORA")
        if config.get("use_dora"):
            raise UserError(f"adapter {path}: DoRA adapters are not supported (magnitude vectors)")
        try:
            with safe_open(str(w_file), framework="pt") as f:
                keys = list(f.keys())
                modules = sorted(k[: -len(_A)] for k in keys if k.endswith(_A))
                others = [k for k in keys if not (k.endswith(_A) or k.endswith(_B))]
                shapes = {}
                for mod in modules:
                    if mod + _B not in keys:
                        raise UserError(f"adapter {path}: {mod} has lora_A but no lora_B")
                    (r, n), (m, rb) = f.get_slice(mod + _A).get_shape(), f.get_slice(mod + _B).get_shape()
                    if rb != r:
                        raise UserError(f"adapter {path}: {mod} has lora_A rank {r} but lora_B rank {rb}")
                    shapes[mod] = (r, n, m)
        except UserError:
            raise
        except Exception as exc:  # a corrupt file
            raise UserError(f"adapter {path}: cannot read {WEIGHTS_NAME} ({exc})") from None
        if others:
            raise UserError(f"adapter {path}: tensors other than LoRA A/B are not supported "
                            f"(e.g. {others[0]}; modules_to_save, biases, embeddings)")
        if not modules:
            raise UserError(f"adapter {path}: no LoRA weights in {WEIGHTS_NAME}")
        return cls(path, config, modules, shapes)

    @property
    def base_model(self) -> str | None:
        return self.config.get("base_model_name_or_path")

    def scaling(self, module: str) -> float:
        r = self.shapes[module][0]
        name = module.removeprefix("base_model.model.")
        alpha = _pattern_value(self.config.get("alpha_pattern") or {}, name,
                               self.config.get("lora_alpha", r))
        return alpha / math.sqrt(r) if self.config.get("use_rslora") else alpha / r

    def load(self, module: str, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(A (r, n), B (m, r)) of one module in its stored dtype (or ``dtype``), scaling folded
        into B (in float32 at least: a bf16 B times a scaling would round)."""
        from safetensors import safe_open

        with safe_open(str(self.path / WEIGHTS_NAME), framework="pt") as f:
            A = f.get_tensor(module + _A)
            B = f.get_tensor(module + _B)
        if dtype is not None:
            A, B = A.to(dtype), B.to(dtype)
        scale = self.scaling(module)
        if scale != 1.0:
            B = B.to(torch.promote_types(B.dtype, torch.float32)) * scale
            A = A.to(B.dtype)
        if not (bool(torch.isfinite(A).all()) and bool(torch.isfinite(B).all())):
            raise UserError(f"adapter {self.path}: {module} holds NaN or inf values")
        return A, B

    def weight_dtype(self) -> torch.dtype:
        """The stored dtype (the merged adapter is written in the first adapter's dtype)."""
        from safetensors import safe_open

        with safe_open(str(self.path / WEIGHTS_NAME), framework="pt") as f:
            code = f.get_slice(self.modules[0] + _A).get_dtype()
        return _DTYPES.get(code, torch.float32)


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def check_compatible(adapters: list[PeftAdapter], *, ignore_base_name: bool = False) -> None:
    """Refuse adapters that cannot be merged: different base model names (unless
    ``ignore_base_name``: the same model saved under two paths), target modules or shapes."""
    first = adapters[0]
    for ad in adapters[1:]:
        if ad.base_model != first.base_model and not ignore_base_name:
            raise UserError(f"adapters have different base models: {first.base_model!r} "
                            f"({first.path}) vs {ad.base_model!r} ({ad.path}); if they are the same "
                            "model, pass --ignore-base-name (modules and shapes are still checked)")
        if set(ad.modules) != set(first.modules):
            diff = sorted(set(ad.modules) ^ set(first.modules))
            raise UserError(f"adapters target different modules: {first.path} and {ad.path} differ "
                            f"on {len(diff)} module(s), e.g. {diff[0]}")
        if bool(ad.config.get("fan_in_fan_out")) != bool(first.config.get("fan_in_fan_out")):
            raise UserError(f"adapters differ in fan_in_fan_out: {first.path} vs {ad.path}")
        for mod in first.modules:
            if ad.shapes[mod][1:] != first.shapes[mod][1:]:
                raise UserError(f"module {mod}: shapes differ between {first.path} and {ad.path}")


def iter_layers(adapters: list[PeftAdapter]) -> Iterator[tuple[str, list[torch.Tensor], list[torch.Tensor]]]:
    """Yield (module, As, Bs) one module at a time (stored dtype, scaling folded into B)."""
    for mod in adapters[0].modules:
        pairs = [ad.load(mod) for ad in adapters]
        yield mod, [a for a, _ in pairs], [b for _, b in pairs]


def output_config(template: dict[str, Any], rank: int) -> dict[str, Any]:
    """The first adapter's config with rank ``rank`` and scaling 1 (lora_alpha = r)."""
    cfg = dict(template)
    cfg.update(r=rank, lora_alpha=rank, rank_pattern={}, alpha_pattern={}, use_rslora=False,
               use_dora=False, peft_type="LORA")
    return cfg
