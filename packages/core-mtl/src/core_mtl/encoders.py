"""Your own backbone: ``--encoder MODULE:FACTORY`` names a zero-argument factory returning a
``torch.nn.Module`` that maps ``[B, 3, H, W]`` to F ``[B, C, h, w]``. MODULE is a dotted module
name (importable, or under the current folder) or a ``.py`` file; the spec is recorded in the run
folder, so ``eval`` and ``diagnose`` rebuild the same network."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from icml26_shared import UserError


def _import(module: str):
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise UserError(f"--encoder: file {module} does not exist")
        name = f"_core_mtl_encoder_{abs(hash(str(path.resolve())))}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as exc:  # noqa: BLE001 (the user's file; one clear line)
            del sys.modules[name]
            raise UserError(f"--encoder: importing {module} failed: {type(exc).__name__}: {exc}") from None
        return mod
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UserError(f"--encoder: cannot import module {module!r} ({exc})") from None
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"--encoder: importing {module!r} failed: {type(exc).__name__}: {exc}") from None


def resolve(spec: str):
    """(factory, canonical spec): ``.py`` paths made absolute so a later ``eval`` finds them."""
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not attr.isidentifier():
        raise UserError(f"--encoder must be MODULE:FACTORY (e.g. mypkg.nets:backbone or nets.py:backbone), got {spec!r}")
    if module.endswith(".py"):
        module = str(Path(module).resolve())
    factory = getattr(_import(module), attr, None)
    if not callable(factory):
        raise UserError(f"--encoder: {module} has no callable {attr!r}")
    return factory, f"{module}:{attr}"


def build(spec: str):
    """A fresh encoder module from ``spec``; errors are one line."""
    import torch

    factory, _ = resolve(spec)
    try:
        m = factory()
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"--encoder: {spec}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(m, torch.nn.Module):
        raise UserError(f"--encoder: {spec}() returned {type(m).__name__}, not a torch.nn.Module")
    return m
