"""The method registry: every paper package registers one ``MethodDescriptor`` under the entry-point
group ``icml26.methods``. The core never imports a package by name.

A package's ``pyproject.toml``::

    [project.entry-points."icml26.methods"]
    circumerge = "circumerge.registry:DESCRIPTOR"

and ``circumerge/registry.py`` must stay light (no torch / jax import): ``reproduce`` is a string
``"module:function"`` imported only when the reproduction runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UserError
from .results import Claim

if TYPE_CHECKING:
    from .results import Results

GROUP = "icml26.methods"
ReproduceFn = Callable[[str, Path, int], "Results"]


@dataclass(frozen=True)
class Paper:
    title: str
    venue: str = "ICML 2026"
    arxiv: str | None = None
    url: str | None = None


@dataclass(frozen=True)
class MethodDescriptor:
    """What a package tells the core about itself.

    ``reproduce`` names a function ``f(scale: str, out_dir: Path, seed: int) -> Results`` as
    ``"module:function"``; it may write figures into ``out_dir`` and list them in
    ``Results.figures``. ``scales`` documents what each scale runs; ``full`` names what it needs
    (a CUDA device, user-supplied paths) and raises ``UserError`` at once when they are missing.
    """

    name: str
    version: str
    paper: Paper
    claims: tuple[Claim, ...]
    reproduce: str
    summary: str = ""
    scales: dict[str, str] = field(default_factory=dict)
    #: typical wall time of ``reproduce --scale quick`` on 2 CPU cores, in minutes (for progress
    #: estimates and ``icml26 list``); None when not measured yet
    quick_minutes: float | None = None
    #: set by ``discover`` for an entry point that failed to load: the package is listed and its
    #: reproduction recorded as ``failed`` with this message, and the other packages still run
    load_error: str | None = None

    def load_reproduce(self) -> ReproduceFn:
        if self.load_error is not None:
            raise RuntimeError(self.load_error)
        module, _, func = self.reproduce.partition(":")
        return getattr(importlib.import_module(module), func)


def discover() -> dict[str, MethodDescriptor]:
    """All registered descriptors by name.

    A broken registration (an import error, not a ``MethodDescriptor``) does not hide the others:
    it appears under its entry-point name as a descriptor with ``load_error`` set, which
    ``icml26 list`` shows and ``icml26 reproduce`` records as a failed package.
    """
    found: dict[str, MethodDescriptor] = {}
    for ep in metadata.entry_points(group=GROUP):
        try:
            desc = ep.load()
            if callable(desc) and not isinstance(desc, MethodDescriptor):
                desc = desc()
            if not isinstance(desc, MethodDescriptor):
                raise TypeError(f"{ep.value} is a {type(desc).__name__}, not a MethodDescriptor")
        except Exception as exc:
            dist = ep.dist.name if getattr(ep, "dist", None) is not None else ep.name
            desc = MethodDescriptor(
                name=ep.name, version=package_version(dist), paper=Paper(title="(failed to load)"),
                claims=(), reproduce=ep.value,
                load_error=f"entry point {ep.name!r} ({ep.value}) failed to load: "
                           f"{type(exc).__name__}: {exc}")
        found[desc.name] = desc
    return dict(sorted(found.items()))


def get(name: str) -> MethodDescriptor:
    methods = discover()
    if name not in methods:
        known = ", ".join(methods) or "none registered"
        raise UserError(f"unknown package {name!r} (registered: {known})")
    return methods[name]


def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"
