"""An offline retrieval task built from real text that ships with Python [R].

Queries are the summary sentences of standard-library docstrings; the relevant document of each is
the rest of that docstring with the object's qualified name and signature. Topics of
``pydoc_data.topics`` (the language reference) are added as distractor documents. Deterministic:
a fixed module list, sorted members, de-duplicated texts.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass

import numpy as np

MODULES = (
    "abc argparse array ast asyncio.base_events asyncio.events asyncio.locks asyncio.queues "
    "asyncio.streams asyncio.tasks base64 bdb binascii bisect bz2 calendar cmd codecs codeop "
    "collections colorsys concurrent.futures configparser contextlib copy csv dataclasses datetime "
    "decimal difflib dis doctest email.message email.parser email.utils enum filecmp fileinput "
    "fnmatch fractions ftplib functools getopt gettext glob graphlib gzip hashlib heapq hmac "
    "html html.parser http.client http.cookiejar http.cookies http.server imaplib importlib "
    "importlib.metadata importlib.resources inspect io ipaddress itertools json json.decoder "
    "json.encoder keyword linecache locale logging logging.handlers lzma mailbox mimetypes "
    "multiprocessing.pool multiprocessing.process netrc numbers operator optparse os os.path "
    "pathlib pdb pickle pickletools pkgutil platform plistlib poplib pprint profile pstats "
    "py_compile pydoc queue quopri random re reprlib rlcompleter runpy sched secrets selectors "
    "shelve shlex shutil signal site smtplib socket socketserver sqlite3 ssl stat statistics "
    "string struct subprocess symtable sysconfig tabnanny tarfile tempfile textwrap threading "
    "timeit token tokenize tomllib trace traceback tracemalloc types typing unittest.case "
    "unittest.mock unittest.loader unittest.result urllib.parse urllib.request urllib.robotparser "
    "uuid warnings wave weakref xml.dom.minidom xml.etree.ElementTree xml.sax.saxutils "
    "zipfile zipimport zoneinfo"
).split()

_SENT = re.compile(r"^(.+?[.!?])(\s|$)", re.S)


@dataclass
class RetrievalTask:
    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]


def _signature(obj) -> str:
    """Parameter names only: default values' reprs can depend on hash randomisation (sets)."""
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return "(...)"
    star = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return "(" + ", ".join(star.get(p.kind, "") + p.name for p in params) + ")"


def _members(mod):
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        if inspect.isclass(obj):
            yield f"{mod.__name__}.{name}", obj
            for mname, meth in sorted(vars(obj).items()):
                if not mname.startswith("_") and inspect.isfunction(meth):
                    yield f"{mod.__name__}.{name}.{mname}", meth
        elif inspect.isfunction(obj):
            yield f"{mod.__name__}.{name}", obj


def split_docstring(doc: str) -> tuple[str, str] | None:
    """``(summary sentence, rest)`` or None when either part is too short to be useful."""
    doc = inspect.cleandoc(doc)
    m = _SENT.match(doc)
    if not m:
        return None
    query = " ".join(m.group(1).split())
    rest = " ".join(doc[m.end():].split())
    if len(query.split()) < 4 or len(rest.split()) < 8:
        return None
    return query, rest


def stdlib_pairs() -> list[tuple[str, str, str]]:
    """``(object name, query, document)`` for every usable docstring, deterministic order."""
    out, seen_q, seen_d = [], set(), set()
    for modname in MODULES:
        try:
            mod = importlib.import_module(modname)
        except Exception:  # a module missing on this platform is skipped
            continue
        for qual, obj in _members(mod):
            doc = obj.__doc__
            if not isinstance(doc, str):
                continue
            parts = split_docstring(doc)
            if parts is None:
                continue
            query, rest = parts
            document = f"{qual.rsplit('.', 1)[-1]}{_signature(obj)}: {rest}"
            if query in seen_q or rest in seen_d:
                continue
            seen_q.add(query)
            seen_d.add(rest)
            out.append((qual, query, document))
    return out


def pydoc_topics(max_words: int = 120) -> list[tuple[str, str]]:
    from pydoc_data.topics import topics

    return [(f"topic:{k}", " ".join(v.split()[:max_words])) for k, v in sorted(topics.items())]


def build_task(n_docs: int, n_queries: int, seed: int = 0, distractors: bool = True) -> RetrievalTask:
    """``n_docs`` docstring documents (+ pydoc topics as distractors) and ``n_queries`` of their
    queries, sampled with ``seed``; qrels mark each query's own document."""
    pairs = stdlib_pairs()
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(pairs), size=min(n_docs, len(pairs)), replace=False))
    chosen = [pairs[i] for i in pick]
    doc_ids = [p[0] for p in chosen]
    doc_texts = [p[2] for p in chosen]
    if distractors:
        topics = pydoc_topics()
        doc_ids += [t[0] for t in topics]
        doc_texts += [t[1] for t in topics]
    qpick = rng.choice(len(chosen), size=min(n_queries, len(chosen)), replace=False)
    qids = [f"q{i}" for i in range(len(qpick))]
    qtexts = [chosen[j][1] for j in qpick]
    qrels = {q: {chosen[j][0]: 1} for q, j in zip(qids, qpick, strict=True)}
    return RetrievalTask(doc_ids, doc_texts, qids, qtexts, qrels)
