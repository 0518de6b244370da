"""Small I/O helpers every package needs: writes that never leave a half-written file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_bytes(path: str | Path, data: bytes, *, mkdir: bool = True) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename.

    Readers see either the old file or the complete new one; on any error (Ctrl-C included)
    the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str, *, mkdir: bool = True) -> Path:
    """``atomic_write_bytes`` for text (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"), mkdir=mkdir)
