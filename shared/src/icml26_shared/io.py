"""Small I/O helpers every package needs: writes that never leave a half-written file, one
strict JSON writer, and output folders that ``--force`` may replace only when a run wrote them.

JSON: ``to_jsonable`` turns what numerical code produces (NumPy scalars and arrays, tuples, paths,
dataclasses, NaN/inf) into plain JSON values, NaN and ±inf becoming ``null``; ``dumps_json``,
``write_json`` and ``print_json`` are the one way a package writes JSON, so no file and no
``--json`` output ever holds the non-standard tokens ``NaN`` or ``Infinity``.

Folders: ``atomic_dir`` builds a folder aside and swaps it in; it leaves a manifest
(``.icml26-manifest.json``) naming every file it wrote, and ``replace=True`` swaps out an existing
folder only if ``is_run_folder`` says every file there is listed in such a manifest.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import IO, Any

__all__ = ["MANIFEST", "add_to_manifest", "atomic_dir", "atomic_write_bytes", "atomic_write_text",
           "check_replaceable", "dumps_json", "is_run_folder", "print_json", "to_jsonable",
           "write_json"]

#: the file ``atomic_dir`` writes into every folder it commits
MANIFEST = ".icml26-manifest.json"
_MANIFEST_FORMAT = "icml26-manifest"


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


# ---------------------------------------------------------------------------------------- JSON


def _key(k: Any) -> str:
    """A dict key as the string ``json.dumps`` would write for it (``1`` -> ``"1"``, ``True`` ->
    ``"true"``, ``None`` -> ``"null"``), so ``json.loads(dumps_json(x)) == to_jsonable(x)``;
    NumPy scalars as their Python value, anything else (a Path, a tuple) as ``str(k)``."""
    if isinstance(k, str):
        return str(k)
    if k is None or isinstance(k, bool):
        return json.dumps(k)
    if isinstance(k, int):
        return int.__repr__(int(k))
    if isinstance(k, float):
        return json.dumps(float(k))  # NaN / inf keys read "NaN" / "Infinity", as json writes them
    if hasattr(k, "tolist") and hasattr(k, "dtype"):  # a NumPy scalar
        return _key(k.tolist())
    return str(k)


def to_jsonable(obj: Any, *, default: Callable[[Any], Any] | None = None,
                sort_keys: bool = False) -> Any:
    """``obj`` as plain JSON values, recursively: NaN and ±inf become ``None``; dict keys become
    the strings json writes for them; NumPy (and other array-library) scalars and arrays become
    Python numbers and lists; tuples and sets become lists (sets sorted); ``Path`` becomes
    ``str``; dataclasses go through ``asdict``; enums give their value. Anything else is passed
    to ``default`` (like ``json.dumps(default=...)``) and its result converted in turn; without
    ``default`` it is returned as is (``dumps_json`` then raises ``TypeError``). ``sort_keys``
    orders every dict by its original keys, as ``json.dumps(sort_keys=True)`` does (``2`` before
    ``10``).

    The result survives a JSON round trip unchanged: ``json.loads(dumps_json(x)) ==
    to_jsonable(x)``."""
    def conv(o: Any) -> Any:
        return to_jsonable(o, default=default, sort_keys=sort_keys)

    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, int):
        return obj if type(obj) is int else int(obj)  # IntEnum, NumPy-like int subclasses
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        items = list(obj.items())
        if sort_keys:
            try:
                items.sort(key=lambda kv: kv[0])
            except TypeError:  # keys of mixed types (json.dumps would refuse): by their text
                items.sort(key=lambda kv: _key(kv[0]))
        return {_key(k): conv(v) for k, v in items}
    if isinstance(obj, (list, tuple)):
        return [conv(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        out = [conv(v) for v in obj]
        try:
            return sorted(out)
        except TypeError:
            return sorted(out, key=repr)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return conv(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return conv(dataclasses.asdict(obj))
    if hasattr(obj, "tolist") and (hasattr(obj, "dtype") or hasattr(obj, "shape")):
        return conv(obj.tolist())  # NumPy / torch / jax scalars and arrays
    if default is not None:
        out = default(obj)
        return out if out is obj else conv(out)
    return obj


def dumps_json(obj: Any, *, indent: int | str | None = 2, sort_keys: bool = False,
               default: Callable[[Any], Any] | None = None, **kw: Any) -> str:
    """Strict JSON text of ``to_jsonable(obj)``: never ``NaN``/``Infinity`` (``allow_nan=False``).

    ``indent``, ``sort_keys`` and any other ``json.dumps`` keyword (``separators``,
    ``ensure_ascii``) keep their meaning, so a plain ``json.dumps`` call can be swapped for this
    one with the same arguments and the same bytes whenever no NaN occurs. ``default`` converts
    objects ``to_jsonable`` does not know."""
    # the dicts come back ordered by their original keys, as json.dumps(sort_keys=True) orders them
    return json.dumps(to_jsonable(obj, default=default, sort_keys=sort_keys), indent=indent,
                      allow_nan=False, **kw)


def write_json(path: str | Path, obj: Any, *, indent: int | str | None = 2,
               sort_keys: bool = False, mkdir: bool = True, **kw: Any) -> Path:
    """Write ``dumps_json(obj, ...)`` plus a trailing newline to ``path``, atomically."""
    text = dumps_json(obj, indent=indent, sort_keys=sort_keys, **kw)
    return atomic_write_text(path, text + "\n", mkdir=mkdir)


def print_json(obj: Any, *, indent: int | str | None = 2, sort_keys: bool = False,
               file: IO[str] | None = None, flush: bool = False, **kw: Any) -> None:
    """Print ``dumps_json(obj, ...)`` (a CLI's ``--json`` output) to stdout or ``file``."""
    print(dumps_json(obj, indent=indent, sort_keys=sort_keys, **kw),
          file=sys.stdout if file is None else file, flush=flush)


# ------------------------------------------------------------------------------------- folders


def _files(folder: Path) -> list[str]:
    """Every non-folder entry below ``folder`` (symlinks included), relative, POSIX, sorted."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out += [(rel / f).as_posix() for f in files]
        out += [(rel / d).as_posix() for d in dirs if (Path(root) / d).is_symlink()]
    return sorted(out)


def _manifest_files(folder: Path) -> set[str] | None:
    """The files listed in ``folder``'s manifest; None without a readable one."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _MANIFEST_FORMAT \
            or not isinstance(data.get("files"), list):
        return None
    return {f for f in data["files"] if isinstance(f, str)}


def is_run_folder(path: str | Path) -> tuple[bool, str | None]:
    """May ``path`` be replaced (``atomic_dir(replace=True)``, ``--force``) without losing a file
    that no run wrote? ``(True, None)`` when it does not exist, is an empty folder (empty
    sub-folders allowed), or every file below it is listed in its ``.icml26-manifest.json``;
    else ``(False, first such file)`` (relative to ``path``; ``"."`` when ``path`` is a file)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return True, None
    if path.is_symlink() or not path.is_dir():
        return False, "."
    listed = _manifest_files(path) or set()
    for f in _files(path):
        if f != MANIFEST and f not in listed:
            return False, f
    return True, None


def check_replaceable(path: str | Path) -> None:
    """Raise ``UserError`` (one line) unless ``is_run_folder(path)``: what ``atomic_dir(path,
    replace=True)`` checks, for a command that wants to refuse ``--force`` before any work."""
    from .errors import UserError

    path = Path(path)
    ok, first = is_run_folder(path)
    if not ok:
        if first == ".":
            raise UserError(f"{path} is a file, not a folder a run wrote; move it or choose "
                            "another folder")
        raise UserError(f"{path} holds files that no run wrote ({first}); move them or choose "
                        "another folder")


def _write_manifest(folder: Path, writer: str | None) -> None:
    data = {"format": _MANIFEST_FORMAT, "version": 1, "writer": writer,
            "files": [f for f in _files(folder) if f != MANIFEST]}
    (folder / MANIFEST).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def add_to_manifest(folder: str | Path, *files: str | Path, writer: str | None = None) -> None:
    """Record ``files`` (paths inside ``folder``, relative or not) in ``folder``'s manifest, for a
    run that keeps writing into its own folder after ``atomic_dir`` made it (a checkpoint saved
    every N steps), so that ``replace=True`` may still swap the folder later. Creates the manifest
    when there is none; lists nothing else (a file nobody recorded stays a user's file)."""
    folder = Path(folder)
    rel = set()
    for f in files:
        f = Path(f)
        rel.add((f.relative_to(folder) if f.is_absolute() else f).as_posix())
    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("format") != _MANIFEST_FORMAT \
            or not isinstance(data.get("files"), list):
        data = {"format": _MANIFEST_FORMAT, "version": 1, "writer": writer, "files": []}
    if writer is not None:
        data["writer"] = writer
    data["files"] = sorted(set(data["files"]) | rel)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n", mkdir=False)


@contextmanager
def atomic_dir(path: str | Path, *, replace: bool = False,
               exists_error: str = "{path} already exists",
               writer: str | None = None) -> Iterator[Path]:
    """``with atomic_dir(out) as tmp:`` fill ``tmp``; it becomes ``out`` only if the block succeeds.

    ``tmp`` is a fresh sibling of ``out`` (same file system, so the final rename is atomic). On any
    error (Ctrl-C included) ``tmp`` is removed and ``out`` is left exactly as it was. The committed
    folder holds ``.icml26-manifest.json`` listing every file the block wrote (and ``writer``, e.g.
    ``"mesret 0.3.1"``). An existing ``out`` raises ``UserError(exists_error)`` (before the block
    and again if it appears meanwhile) unless ``replace=True``; then it is swapped out and removed
    after the new one is in place, but only if ``is_run_folder(out)``: a folder holding any file
    its manifest does not list (or, without a manifest, any file at all) is refused with
    ``UserError`` before the block runs and again before the swap.
    """
    from .errors import UserError

    path = Path(path)
    if path.exists() or path.is_symlink():
        if not replace:
            raise UserError(exists_error.format(path=path))
        check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _write_manifest(tmp, writer)
        if path.exists() or path.is_symlink():
            if not replace:
                raise UserError(exists_error.format(path=path))
            check_replaceable(path)
            old = tmp.with_suffix(".old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
