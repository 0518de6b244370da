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
