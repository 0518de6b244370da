"""``SteeringDirection``: a fitted preference direction, one unit vector per layer, saved as
safetensors with the metadata that says which model and which fit it belongs to [R].

``steer --save-direction FILE`` writes one; ``steer --load-direction FILE`` sweeps it without
refitting, after checking that the model has the same hidden size, layer count and config hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icml26_shared import UserError

FORMAT = "mc2-bench steering direction 1"
# config entries that do not change the network: where it was loaded from, the library version,
# the dtype it was saved in
_VOLATILE = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "_attn_implementation",
             "_attn_implementation_autoset", "_commit_hash", "architectures"}


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in sorted(obj.items()) if k not in _VOLATILE}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def config_hash(adapter) -> str:
    """sha256 (first 16 hex digits) of the model's configuration, without the entries that do not
    change the network (path, library version, dtype): the same weights' folder copied elsewhere,
    or loaded in bf16, hash the same."""
    import dataclasses

    model = adapter.model
    if hasattr(model, "config") and hasattr(model.config, "to_dict"):
        cfg = model.config.to_dict()
    elif hasattr(model, "cfg") and dataclasses.is_dataclass(model.cfg):
        cfg = {"toy": dataclasses.asdict(model.cfg)}
    else:
        raise TypeError(f"cannot fingerprint a {type(model).__name__}")
    text = json.dumps(_clean(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_hidden_size(adapter) -> int | None:
    model = adapter.model
    if hasattr(model, "cfg") and hasattr(model.cfg, "d_model"):
        return int(model.cfg.d_model)
    cfg = getattr(model, "config", None)
    if cfg is None:
        return None
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return getattr(text, "hidden_size", None)


@dataclass
class SteeringDirection:
    """Unit vectors per layer plus what they were fitted on. ``amps``: per layer (c_vision,
    c_text), the AMPS statistics (mean normalised projections of each group)."""

    vectors: dict[int, np.ndarray]
    positions: str
    contrast: str
    method: str
    fit_at: str
    model_config_hash: str
    n_layers: int
    amps: dict[int, tuple[float, float]] = field(default_factory=dict)
    fit_ids: list[str] = field(default_factory=list)
    version: str = ""

    @property
    def layers(self) -> list[int]:
        return sorted(self.vectors)

    @property
    def hidden_size(self) -> int:
        return int(next(iter(self.vectors.values())).shape[-1])

    def metadata(self) -> dict:
        return {"format": FORMAT, "model_config_hash": self.model_config_hash,
                "hidden_size": self.hidden_size, "n_layers": self.n_layers, "layers": self.layers,
                "positions": self.positions, "contrast": self.contrast, "method": self.method,
                "fit_at": self.fit_at, "amps": {str(k): list(v) for k, v in self.amps.items()},
                "fit_ids": list(self.fit_ids), "version": self.version}

    def save(self, path) -> Path:
        """Write ``path`` (safetensors: ``layer.<L>`` float32 vectors; the metadata as JSON under
        the ``mc2_bench`` key), atomically; an existing file is refused."""
        from safetensors.numpy import save

        from icml26_shared.io import atomic_write_bytes

        path = Path(path)
        if path.exists():
            raise UserError(f"{path} already exists (choose another path; nothing was overwritten)")
        tensors = {f"layer.{L}": np.ascontiguousarray(self.vectors[L], np.float32) for L in self.layers}
        return atomic_write_bytes(path, save(tensors, metadata={"mc2_bench": json.dumps(self.metadata())}))

    @classmethod
    def load(cls, path) -> SteeringDirection:
        """Read a file written by ``save``; anything else is one ``UserError`` line."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise UserError(f"direction file {path} does not exist")
        try:
            with safe_open(str(path), "np") as f:
                meta = json.loads((f.metadata() or {})["mc2_bench"])
                vectors = {int(k.split(".", 1)[1]): f.get_tensor(k) for k in f.keys()}
        except Exception:
            raise UserError(f"{path} is not a direction saved by mc2-bench steer --save-direction") from None
        if meta.get("format") != FORMAT:
            raise UserError(f"{path}: unknown direction format {meta.get('format')!r}")
        return cls(vectors=vectors, positions=meta["positions"], contrast=meta["contrast"],
                   method=meta["method"], fit_at=meta["fit_at"],
                   model_config_hash=meta["model_config_hash"], n_layers=int(meta["n_layers"]),
                   amps={int(k): (float(v[0]), float(v[1])) for k, v in meta.get("amps", {}).items()},
                   fit_ids=list(meta.get("fit_ids", [])), version=meta.get("version", ""))

    def check_model(self, adapter, where: str = "") -> None:
        """Refuse, in one line, a model of another layer count, hidden size or config hash."""
        src = f"{where}: " if where else ""
        hidden_size = model_hidden_size(adapter)
        if adapter.n_layers != self.n_layers:
            raise UserError(f"{src}fitted on a model with {self.n_layers} layers, this one has {adapter.n_layers}")
        if hidden_size is not None and hidden_size != self.hidden_size:
            raise UserError(f"{src}hidden size {self.hidden_size}, this model's is {hidden_size}")
        h = config_hash(adapter)
        if h != self.model_config_hash:
            raise UserError(f"{src}fitted on a model with config hash {self.model_config_hash}, "
                            f"this one's is {h} (another model)")
