"""Every drafter's settings from the command line: a JSON file (``--config``, e.g. written by
``tune``), then ``--set SECTION.FIELD=VALUE`` overrides, each field parsed by its dataclass type."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

from icml26_shared import UserError

from .config import Eagle2Config, ESPConfig, LADEConfig, PLDConfig, STANDConfig

#: the config sections, by the keyword ``baselines.make_drafter`` passes them under
SECTIONS: dict[str, type] = {"esp": ESPConfig, "pld": PLDConfig, "lade": LADEConfig, "stand": STANDConfig,
                             "eagle2": Eagle2Config}
#: which section configures each drafter (``--json`` records it beside the arm)
OF_DRAFTER = {"esp": "esp", "esp-nullmask": "esp", "esp-chain": "esp", "esp+pld": "esp", "pld": "pld",
              "lade": "lade", "stand": "stand", "eagle2": "eagle2"}


def _types(cls) -> dict[str, object]:
    return typing.get_type_hints(cls)


def parse_value(section: str, name: str, text):
    """``text`` (a string from ``--set``, or a JSON value) as field ``name`` of ``section``'s type."""
    cls = SECTIONS[section]
    typ = _types(cls)[name]
    try:
        if typ is bool:
            if isinstance(text, bool):
                return text
            low = str(text).strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if typ is int:
            if isinstance(text, bool) or (isinstance(text, float) and not text.is_integer()):
                raise ValueError
            return int(text)
        if typ is float:
            return float(text)
        if typing.get_origin(typ) is tuple:
            items = text if isinstance(text, (list, tuple)) else [x for x in str(text).split(",") if x.strip()]
            return tuple(int(x) for x in items)
        return str(text)
    except (TypeError, ValueError):
        raise UserError(f"{section}.{name}: cannot read {text!r} as {getattr(typ, '__name__', typ)}") from None


def _check(section: str, name: str) -> None:
    if section not in SECTIONS:
        raise UserError(f"unknown config section {section!r} (choose from {', '.join(SECTIONS)})")
    names = [f.name for f in dataclasses.fields(SECTIONS[section])]
    if name not in names:
        raise UserError(f"unknown field {section}.{name} (fields: {', '.join(names)})")


def read_config(path: Path) -> dict[str, dict]:
    """``{section: {field: value}}`` from a JSON file (top-level keys starting with ``_`` are notes)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such config file")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a config is a JSON object {{section: {{field: value}}}}")
    out: dict[str, dict] = {}
    for section, fields in data.items():
        if section.startswith("_"):
            continue
        if not isinstance(fields, dict):
            raise UserError(f"{path}: section {section!r} must be an object of fields")
        for name, value in fields.items():
            _check(section, name)
            out.setdefault(section, {})[name] = parse_value(section, name, value)
    return out


def parse_sets(items: list[str] | None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise UserError(f"--set {item!r}: expected SECTION.FIELD=VALUE, e.g. lade.window=4")
        _check(section, name)
        out.setdefault(section, {})[name] = parse_value(section, name, value)
    return out


def build(layers: list[dict[str, dict]]) -> dict[str, object]:
    """One config per section: the defaults, then each layer's fields in order (later wins)."""
    merged: dict[str, dict] = {s: {} for s in SECTIONS}
    for layer in layers:
        for section, fields in layer.items():
            merged[section].update(fields)
    out = {}
    for section, cls in SECTIONS.items():
        fields = merged[section]
        try:
            out[section] = cls(**fields)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{section}: {exc}") from None
    esp = out["esp"]
    if esp.mask_init == "learned":
        raise UserError("esp.mask_init 'learned' needs a trained mask vector: use the Python API "
                        "(ESPDrafter(cfg, mask_embedding=...))")
    if esp.num_masks > len(esp.topk):   # one top-K per mask level: the last one repeats
        out["esp"] = dataclasses.replace(esp, topk=esp.topk + (esp.topk[-1],) * (esp.num_masks - len(esp.topk)))
    return out


def as_json(cfg) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}
