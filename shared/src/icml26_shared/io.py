"""Small I/O helpers every package needs: writes that never leave a half-written file."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_dir", "atomic_write_bytes", "atomic_write_text"]


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


@contextmanager
def atomic_dir(path: str | Path, *, replace: bool = False,
               exists_error: str = "{path} already exists") -> Iterator[Path]:
    """``with atomic_dir(out) as tmp:`` fill ``tmp``; it becomes ``out`` only if the block succeeds.

    ``tmp`` is a fresh sibling of ``out`` (same file system, so the final rename is atomic). On any
    error (Ctrl-C included) ``tmp`` is removed and ``out`` is left exactly as it was. An existing
    ``out`` raises ``UserError(exists_error)`` (before the block and again if it appears meanwhile)
    unless ``replace=True``; then the old folder is swapped out and removed only after the new one
    is in place.
    """
    from .errors import UserError

    path = Path(path)
    if path.exists() and not replace:
        raise UserError(exists_error.format(path=path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            if not replace:
                raise UserError(exists_error.format(path=path))
            old = tmp.with_suffix(".old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
