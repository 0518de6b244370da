"""A streaming safetensors writer: the header (names, shapes, offsets) is fixed up front, each
tensor is appended as soon as it is computed, so a merged adapter is never held whole in memory.

The file is written into a temporary sibling folder that replaces the output folder only on
``commit()``; any exception removes it (never a partial adapter).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import torch

from icml26_shared.io import atomic_dir, dumps_json, write_json

_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


class StreamingAdapterWriter:
    """Usage::

        with StreamingAdapterWriter(out, [(name, shape), ...], dtype, config, meta, force) as w:
            for name, tensor in ...:      # in the declared order
                w.write(name, tensor)
        # renamed into place on a clean exit
    """

    def __init__(self, out: Path, layout: list[tuple[str, tuple[int, ...]]], dtype: torch.dtype,
                 config: dict[str, Any], meta: dict[str, str] | None = None, force: bool = False):
        self.out, self.layout, self.dtype, self.force = Path(out), layout, dtype, force
        self.config = config
        itemsize = torch.empty((), dtype=dtype).element_size()
        header: dict[str, Any] = {"__metadata__": {"format": "pt", **(meta or {})}}
        offset = 0
        for name, shape in layout:
            size = itemsize
            for d in shape:
                size *= d
            header[name] = {"dtype": _CODES[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            offset += size
        raw = dumps_json(header, indent=None, separators=(",", ":")).encode()
        self._header = raw + b" " * (-len(raw) % 8)
        self._next = 0

    def __enter__(self) -> StreamingAdapterWriter:
        # a run's folder only: --force never replaces a folder holding files no run wrote
        from . import __version__

        self._dir = atomic_dir(self.out.absolute(), replace=self.force,
                               exists_error="{path} appeared while merging",
                               writer=f"circumerge {__version__}")
        self.tmp = self._dir.__enter__()
        self._fh = open(self.tmp / "adapter_model.safetensors", "wb")  # noqa: SIM115
        self._fh.write(struct.pack("<Q", len(self._header)) + self._header)
        return self

    def write(self, name: str, tensor: torch.Tensor) -> None:
        want_name, want_shape = self.layout[self._next]
        if name != want_name or tuple(tensor.shape) != tuple(want_shape):
            raise RuntimeError(f"writer expected {want_name} {want_shape}, got {name} {tuple(tensor.shape)}")
        data = tensor.detach().to(self.dtype).contiguous().cpu()
        self._fh.write(data.view(torch.uint8).numpy().tobytes())
        self._next += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        self._fh.close()
        if exc_type is None:
            try:
                if self._next != len(self.layout):
                    raise RuntimeError(f"only {self._next} of {len(self.layout)} tensors were written")
                write_json(self.tmp / "adapter_config.json", self.config, indent=2, default=str)
            except BaseException as e:
                self._dir.__exit__(type(e), e, e.__traceback__)  # removes the temporary folder
                raise
        self._dir.__exit__(exc_type, exc, tb)  # renamed into place on a clean exit
