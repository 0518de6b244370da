"""The ``pyapi`` data set: a real long-tailed multi-label text set built from the docstrings of the
public callables of numpy, scipy, scikit-learn and pandas (issue 29, item 3) [R].

text   = summary + extended summary of the numpydoc docstring (the part before the first section),
         with code (backtick spans, roles, doctest lines, literal blocks, dotted/underscored/called
         identifiers) and every label name (as a whole word, any case) removed;
labels = the callable's parameter names (its docstring's Parameters sections and its signature) of
         at least 3 characters used by at least ``MIN_USES`` callables.

The ufunc parameters (``out``, ``where``, ``casting``, ``order``, ``dtype``, ``subok``,
``signature``) make the built-in dominant coalition. The build is shipped frozen in the wheel as
``data/pyapi.jsonl.gz`` beside ``data/pyapi.meta.json`` (source versions, the SHA-256 of the
uncompressed JSONL, sizes) and ``data/pyapi_NOTICES.txt`` (the sources' BSD licence texts).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import inspect
import json
import pkgutil
import re
import warnings
from collections import Counter
from pathlib import Path

from icml26_shared import UserError
from icml26_shared.io import dumps_json

SOURCES = ("numpy", "scipy", "sklearn", "pandas")
DISTS = {"numpy": "numpy", "scipy": "scipy", "sklearn": "scikit-learn", "pandas": "pandas"}
LICENSE_FILES = {"numpy": "LICENSE.txt", "scipy": "LICENSE.txt", "scikit-learn": "COPYING",
                 "pandas": "LICENSE"}
NUMPY_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma", "numpy.polynomial",
                 "numpy.strings", "numpy.char", "numpy.lib.stride_tricks", "numpy.testing",
                 "numpy.emath", "numpy.rec")
MIN_USES = 20
MIN_LEN = 3
DATA_DIR = Path(__file__).parent / "data"
SHIPPED = DATA_DIR / "pyapi.jsonl.gz"
META = DATA_DIR / "pyapi.meta.json"
NOTICES = DATA_DIR / "pyapi_NOTICES.txt"
TOKEN = re.compile(r"[A-Za-z0-9_]+")

# --- numpydoc parsing (our own, small) -----------------------------------------------------------


def _sections(doc: str) -> tuple[list[str], dict[str, list[str]]]:
    """(lines before the first section, {section title: its lines}) of a cleaned docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    head: list[str] = []
    secs: dict[str, list[str]] = {}
    cur: list[str] | None = None
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) and lines[i].strip():
            cur = secs.setdefault(lines[i].strip(), [])
            i += 2
            continue
        (head if cur is None else cur).append(lines[i])
        i += 1
    return head, secs


def docstring_parameters(doc: str) -> list[str]:
    """Parameter names listed in the Parameters / Other Parameters sections (``a, b : int`` gives
    both; ``*args`` and ``**kwargs`` lose their stars)."""
    _, secs = _sections(doc)
    out = []
    for title in ("Parameters", "Other Parameters"):
        for line in secs.get(title, []):
            if not line or line[0].isspace():
                continue
            for p in line.split(" : ")[0].split(","):
                p = p.strip().lstrip("*")
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p):
                    out.append(p)
    return out


def summary_text(doc: str) -> str:
    """Summary + extended summary with code removed (labels are removed later)."""
    head, _ = _sections(doc)
    keep, literal = [], False
    for line in head:
        s = line.strip()
        if literal:                        # an indented literal block after "::"
            if s and not line[0].isspace():
                literal = False
            else:
                continue
        if s.startswith((">>>", "...", ".. ")) or re.fullmatch(r"[\w.]+\(.*\)\s*(->.*)?", s):
            continue                        # doctest lines, directives, signature lines
        if s.endswith("::"):
            literal = True
            s = s[:-2]
        keep.append(s)
    text = " ".join(keep)
    text = re.sub(r":\w+:`[^`]*`", " ", text)                 # :func:`x` roles
    text = re.sub(r"``[^`]*``|`[^`]*`_?", " ", text)           # inline code and links
    text = re.sub(r"\$[^$]*\$|\\\w+\{[^}]*\}", " ", text)      # math
    text = re.sub(r"\S*(?:[_.]\w|\(|\)|\[|\]|=|\{|\}|<|>|\\)\S*", " ", text)  # code-like tokens
    text = text.replace("`", " ")
    return " ".join(text.split())


def strip_words(text: str, words: set[str]) -> str:
    """Remove every token whose lower case is in ``words``."""
    out = TOKEN.sub(lambda m: " " if m.group(0).lower() in words else m.group(0), text)
    out = re.sub(r"\s+([,.;:])", r"\1", " ".join(out.split()))
    return out


# --- the build -----------------------------------------------------------------------------------


def _modules(pkg: str) -> list[str]:
    if pkg == "numpy":
        return list(NUMPY_MODULES)
    mod = importlib.import_module(pkg)
    out = [pkg]
    for m in pkgutil.walk_packages(mod.__path__, pkg + "."):
        parts = m.name.split(".")
        if len(parts) <= 3 and not any(p.startswith("_") or p in ("tests", "conftest", "testing")
                                       for p in parts[1:]):
            out.append(m.name)
    return sorted(out)


def _callables() -> list[tuple[str, object, str]]:
    """(qualified name, object, docstring) of every public callable, each object once."""
    seen: set[int] = set()
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pkg in SOURCES:
            for mn in _modules(pkg):
                try:
                    m = importlib.import_module(mn)
                except Exception:  # noqa: BLE001 - optional submodules that need extra packages
                    continue
                names = getattr(m, "__all__", None) or dir(m)
                for n in sorted(set(names)):
                    if n.startswith("_"):
                        continue
                    try:
                        o = getattr(m, n)
                    except Exception:  # noqa: BLE001
                        continue
                    doc = getattr(o, "__doc__", None)
                    if (not callable(o) or inspect.ismodule(o) or id(o) in seen
                            or not isinstance(doc, str) or len(doc) < 40):
                        continue
                    seen.add(id(o))
                    out.append((f"{mn}.{n}", o, doc))
    return out


def _parameters(o: object, doc: str) -> set[str]:
    ps = set(docstring_parameters(doc))
    try:
        sig = inspect.signature(o)  # type: ignore[arg-type]
        ps |= {p.name for p in sig.parameters.values()
               if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    except (TypeError, ValueError):
        pass
    return ps - {"self", "args", "kwargs", "cls"}


def build() -> tuple[list[dict], dict, str]:
    """(records, meta, notices) from the installed numpy / scipy / scikit-learn / pandas."""
    from importlib.metadata import distribution

    items = [(name, _parameters(o, doc), summary_text(doc)) for name, o, doc in _callables()]
    uses = Counter(p for _, ps, _ in items for p in ps)
    labels = {p for p, c in uses.items() if len(p) >= MIN_LEN and c >= MIN_USES}
    lower = {x.lower() for x in labels}
    records, texts = [], set()
    for name, ps, text in items:
        text = strip_words(text, lower)
        ys = sorted(ps & labels)
        if not ys or len(text.split()) < 3 or text in texts:
            continue
        texts.add(text)
        records.append({"id": name, "text": text, "labels": ys})
    freq = Counter(x for r in records for x in r["labels"])
    versions = {d: distribution(d).version for d in DISTS.values()}
    notices = []
    for d, f in LICENSE_FILES.items():
        dist = distribution(d)
        hit = [p for p in (dist.files or []) if p.name == f]
        text = dist.read_text(str(hit[0]).split(".dist-info/", 1)[-1]) if hit else None
        notices.append(f"===== {d} {versions[d]} ({f}) =====\n{text or '(licence file not found)'}\n")
    meta = {"name": "pyapi", "sources": versions, "sha256": records_hash(records),
            "n_documents": len(records), "n_labels": len(freq),
            "label_frequency": dict(sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))),
            "rule": f"labels = parameter names of >= {MIN_LEN} characters used by >= {MIN_USES} "
                    "public callables; text = summary + extended summary, code and label names removed",
            "licence": "text derived from BSD-3-Clause-licensed docstrings; notices in pyapi_NOTICES.txt"}
    return records, meta, "\n".join(notices)


def records_jsonl(records: list[dict]) -> bytes:
    return "".join(dumps_json(r, indent=None, sort_keys=True) + "\n" for r in records).encode("utf-8")


def records_hash(records: list[dict]) -> str:
    return hashlib.sha256(records_jsonl(records)).hexdigest()


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)   # mtime=0: byte-identical rebuilds


def load_pyapi(verify: bool = True) -> tuple[list[dict], dict]:
    """The shipped set (records, meta); ``UserError`` when it is missing or its hash differs."""
    try:
        raw = gzip.decompress(SHIPPED.read_bytes())
        meta = json.loads(META.read_text())
    except (OSError, EOFError, json.JSONDecodeError) as exc:
        raise UserError(f"the shipped pyapi set is missing or corrupt ({type(exc).__name__}); "
                        "reinstall nbcg") from None
    if verify and hashlib.sha256(raw).hexdigest() != meta["sha256"]:
        raise UserError("the shipped pyapi set does not match its recorded hash; reinstall nbcg")
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()], meta
