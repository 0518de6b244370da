"""Model B's prompts: chat prompts built from text that ships with Python (stdlib docstrings,
``pydoc_data`` topics, stdlib source), in three regimes [R]: ``rewrite`` (copy-heavy),
``open`` (open-ended), ``code`` (code continuation). Deterministic; dev and test are disjoint."""

from __future__ import annotations

import importlib
import inspect

MODULES = ("json", "textwrap", "string", "shutil", "functools", "itertools", "collections", "random",
           "statistics", "fractions", "heapq", "bisect", "difflib", "calendar", "base64", "glob",
           "fnmatch", "copy", "pprint", "csv", "zipfile", "tempfile", "argparse", "logging")
OPEN_TOPICS = ("a lighthouse keeper", "a lost umbrella", "the first day of spring", "a robot gardener",
               "an old library", "a night train", "a city under the sea", "a forgotten song",
               "a chess tournament", "a mountain village", "a broken clock", "a friendly dragon",
               "a summer storm", "a space station", "a market at dawn", "a letter never sent")


def _docstrings() -> list[str]:
    out = []
    for name in MODULES:
        mod = importlib.import_module(name)
        for attr in sorted(dir(mod)):
            obj = getattr(mod, attr, None)
            if attr.startswith("_") or not callable(obj):
                continue
            doc = inspect.getdoc(obj) or ""
            para = doc.split("\n\n")[0].strip()
            if 150 <= len(para) <= 600:
                out.append(para)
                break
    return out


def _topics() -> list[str]:
    from pydoc_data.topics import topics

    out = []
    for key in sorted(topics):
        para = topics[key].strip().split("\n\n")[0].strip()
        if 150 <= len(para) <= 600:
            out.append(para)
    return out


def _sources() -> list[str]:
    out = []
    for name in MODULES:
        mod = importlib.import_module(name)
        for attr in sorted(dir(mod)):
            obj = getattr(mod, attr, None)
            if attr.startswith("_") or not inspect.isfunction(obj) or getattr(obj, "__module__", "") != name:
                continue
            try:
                src = inspect.getsource(obj)
            except (OSError, TypeError):
                continue
            lines = src.splitlines()
            if len(lines) >= 12:
                out.append("\n".join(lines[:10]))
                break
    return out


def build_prompts(regime: str) -> list[str]:
    """All prompts of a regime, in a fixed order (the caller splits dev / test)."""
    if regime == "rewrite":
        texts = _docstrings() + _topics()
        return [f"Repeat the following text exactly, then explain it in one sentence:\n\n{t}" for t in texts]
    if regime == "open":
        return [f"Write a short story about {t}." for t in OPEN_TOPICS]
    if regime == "code":
        return [f"Continue this Python function:\n\n```python\n{s}\n" for s in _sources()]
    raise ValueError(regime)


REGIMES = ("rewrite", "open", "code")


def split(regime: str, n_dev: int, n_test: int) -> tuple[list[str], list[str]]:
    """Dev prompts are taken from the end, test prompts from the start: disjoint by construction."""
    allp = build_prompts(regime)
    if n_dev + n_test > len(allp):
        raise ValueError(f"{regime}: only {len(allp)} prompts for {n_dev} dev + {n_test} test")
    return allp[len(allp) - n_dev:] if n_dev else [], allp[:n_test]


# --- the ``full`` scale's larger pools (quick's prompts above are unchanged) -------------------------

FULL_MODULES = MODULES + ("os", "posixpath", "inspect", "ast", "dataclasses", "enum", "operator",
                          "pathlib", "re", "subprocess", "threading", "queue", "socket", "urllib.parse",
                          "email.utils", "http.client", "decimal", "datetime", "gzip", "tarfile", "configparser",
                          "contextlib", "abc", "typing", "weakref", "pickle", "shlex", "locale", "gettext",
                          "sched", "selectors", "imaplib", "ftplib", "smtplib", "uuid", "hashlib", "hmac",
                          "secrets", "numbers", "types", "traceback", "warnings", "unittest", "doctest")
FULL_DEV = 10     # dev prompts per regime at full scale (taken from the end of the pool)
FULL_TEST = 50    # reported prompts per regime (from the start)


def _public(names=FULL_MODULES):
    """``(module name, attribute name, object)`` for every public attribute, in a fixed order (the
    pools follow the running Python's stdlib; deprecated aliases warn on access: silenced)."""
    import warnings

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                mod = importlib.import_module(name)
            except ImportError:   # a stdlib module this build lacks: skipped
                continue
            out += [(name, attr, getattr(mod, attr, None)) for attr in sorted(dir(mod)) if not attr.startswith("_")]
    return out


def _first_para(obj) -> str:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            doc = inspect.getdoc(obj) or ""
    except Exception:  # noqa: BLE001 - odd objects
        return ""
    return doc.split("\n\n")[0].strip()


def _unique(xs):
    seen, out = set(), []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def build_full_prompts(regime: str) -> list[str]:
    """The ``full`` scale's pool of a regime: distinct prompts from every public docstring / function
    of ``FULL_MODULES`` (not only the first per module, as in ``build_prompts``) [R]."""
    if regime == "rewrite":
        texts = [p for _, _, o in _public() if callable(o) and 150 <= len(p := _first_para(o)) <= 600]
        return _unique(f"Repeat the following text exactly, then explain it in one sentence:\n\n{t}" for t in texts)
    if regime == "open":
        lines = []
        for _name, attr, o in _public():
            first = _first_para(o).split(". ")[0].strip().rstrip(".")
            if callable(o) and 30 <= len(first) <= 160 and "\n" not in first:
                lines.append(f"Write a short story in which a character discovers {attr!r}, something that "
                             f"does this: \"{first}.\"")
        return _unique([f"Write a short story about {t}." for t in OPEN_TOPICS] + lines)
    if regime == "code":
        srcs = []
        for name, _, o in _public():
            if not inspect.isfunction(o) or getattr(o, "__module__", "") != name:
                continue
            try:
                lines = inspect.getsource(o).splitlines()
            except (OSError, TypeError):
                continue
            if len(lines) >= 12:
                srcs.append("\n".join(lines[:10]))
        return _unique(f"Continue this Python function:\n\n```python\n{s}\n" for s in srcs)
    raise ValueError(regime)


def full_split(regime: str, n_dev: int = FULL_DEV, n_test: int = FULL_TEST) -> tuple[list[str], list[str]]:
    """As ``split``, on the full pool: dev from the end, reported prompts from the start (disjoint)."""
    allp = build_full_prompts(regime)
    if n_dev + n_test > len(allp):
        raise ValueError(f"{regime}: only {len(allp)} full-scale prompts for {n_dev} dev + {n_test} test")
    return allp[len(allp) - n_dev:] if n_dev else [], allp[:n_test]
