"""Synthetic long-context tasks (no download): passkey retrieval in a haystack of filler text.

``needle_prompt`` builds a document of about ``n_tokens`` tokens with a random 5-digit pass key at a
random depth and the question at the end; the answer is correct when the greedy continuation
starts with the key's digits. Haystacks: ``repeat`` (the classic periodic passkey filler of
Mohtashami & Jaggi 2023 / LongLoRA), ``varied`` (templated random sentences) and ``prose``
(consecutive prose paragraphs of the Python reference manual that ships with the interpreter,
``pydoc_data.topics``, digits removed; the text depends on the Python version) and ``zen`` (the
Zen of Python's 19 aphorisms from the ``this`` module, reshuffled on every pass).
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
          "There and back again. ")  # the classic passkey haystack (periodic: "repeat" style)
_NAMES = ("Anna", "Ben", "Clara", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
          "Kira", "Leo", "Maya", "Nils", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara")
_VERBS = ("painted", "found", "carried", "described", "repaired", "visited", "studied", "sold",
          "cleaned", "measured", "borrowed", "photographed", "planted", "counted", "opened")
_ADJ = ("old", "quiet", "red", "narrow", "famous", "wooden", "bright", "small", "heavy", "strange",
        "green", "empty", "distant", "careful", "tall")
_NOUNS = ("bridge", "garden", "letter", "boat", "library", "window", "river", "lamp", "market",
          "clock", "forest", "harbor", "piano", "tower", "basket", "map", "kitchen", "statue")
_PLACES = ("near the station", "after the storm", "in the village", "before dinner",
           "by the lake", "during the festival", "at the old mill", "on a cold morning")


def varied_filler(rng: random.Random, n_sentences: int) -> str:
    """Templated sentences with random names, verbs and objects (no digits, aperiodic)."""
    out = []
    for _ in range(n_sentences):
        c = rng.choice
        form = rng.randrange(3)
        if form == 0:
            out.append(f"{c(_NAMES)} {c(_VERBS)} the {c(_ADJ)} {c(_NOUNS)} {c(_PLACES)}.")
        elif form == 1:
            out.append(f"The {c(_NOUNS)} that {c(_NAMES)} {c(_VERBS)} was {c(_ADJ)} and {c(_ADJ)}.")
        else:
            out.append(f"{c(_PLACES).capitalize()}, {c(_NAMES)} and {c(_NAMES)} {c(_VERBS)} a "
                       f"{c(_ADJ)} {c(_NOUNS)}.")
    return " ".join(out) + " "
QUESTION = "\nWhat is the pass key? The pass key is"
HAYSTACKS = ("repeat", "varied", "prose", "zen")


@lru_cache(maxsize=1)
def _zen_lines() -> tuple[str, ...]:
    """The 19 aphorisms of the Zen of Python (the ``this`` module, which prints them on import)."""
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        import this
    text = codecs.decode(this.s, "rot13")
    return tuple(line.strip() for line in text.splitlines()[1:] if line.strip())


def zen_filler(rng: random.Random, n_words: int) -> str:
    """The Zen of Python's aphorisms, each pass in a fresh random order (aperiodic), at least
    ``n_words`` words."""
    lines, out, words = list(_zen_lines()), [], 0
    while words < n_words:
        rng.shuffle(lines)
        out.extend(lines)
        words += sum(len(x.split()) for x in lines)
    return " ".join(out) + " "


@lru_cache(maxsize=1)
def _prose_paragraphs() -> tuple[str, ...]:
    """The prose paragraphs of ``pydoc_data.topics`` (no code, grammar, headings or digits)."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for par in re.split(r"\n\s*\n", topics[name]):
            lines = par.strip().splitlines()
            if (par.startswith((" ", "*")) or "::=" in par or ">>>" in par
                    or (len(lines) > 1 and set(lines[1]) <= set("*=-"))):
                continue
            text = re.sub(r"\[\d+\] ?|\d", "", " ".join(line.strip() for line in lines))
            if len(text.split()) >= 12 and text.endswith("."):
                out.append(text)
    return tuple(out)


def prose_filler(rng: random.Random, n_words: int) -> str:
    """Consecutive prose paragraphs from a random start (wrapping), at least ``n_words`` words."""
    pars = _prose_paragraphs()
    i, out, words = rng.randrange(len(pars)), [], 0
    while words < n_words:
        out.append(pars[i % len(pars)])
        words += len(out[-1].split())
        i += 1
    return " ".join(out) + " "


def needle_prompt(tokenizer, n_tokens: int, seed: int, depth: float | None = None,
                  haystack: str = "varied", return_span: bool = False):
    """(token ids, key): filler, ``"The pass key is K. Remember it. K is the pass key."`` at
    ``depth`` (random in [0.1, 0.9] when None), more filler, the question. ``haystack`` is
    "varied" (templated random sentences), "repeat" (the classic periodic passkey filler) or
    "prose" (the Python reference manual's prose). The needle starts after a whole sentence."""
    if haystack not in HAYSTACKS:
        raise ValueError(f"unknown haystack {haystack!r} (one of {', '.join(HAYSTACKS)})")
    rng = random.Random(seed)
    key = str(rng.randint(10000, 99999))
    depth = rng.uniform(0.1, 0.9) if depth is None else depth
    needle = f" The pass key is {key}. Remember it. {key} is the pass key. "
    text = {"repeat": lambda: FILLER, "prose": lambda: prose_filler(rng, n_tokens),
            "varied": lambda: varied_filler(rng, max(8, n_tokens // 8)),
            "zen": lambda: zen_filler(rng, n_tokens)}[haystack]()
    filler_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    head = tokenizer("There is important information hidden in this long text; find it and "
                     "remember it.", add_special_tokens=False)["input_ids"]
    needle_ids = tokenizer(needle, add_special_tokens=False)["input_ids"]
    q_ids = tokenizer(QUESTION, add_special_tokens=False)["input_ids"]
    room = max(0, n_tokens - len(head) - len(needle_ids) - len(q_ids))
    reps = room // len(filler_ids) + 1
    hay = (filler_ids * reps)[:room]
    cut = int(len(hay) * depth)
    if haystack == "repeat":
        cut -= cut % len(filler_ids)  # keep sentences whole
    else:
        while cut > 0 and not tokenizer.decode(hay[cut - 1:cut]).rstrip().endswith("."):
            cut -= 1
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    ids = bos + head + hay[:cut] + needle_ids + hay[cut:] + q_ids
    if return_span:
        start = len(bos) + len(head) + cut
        return ids, key, (start, start + len(needle_ids))
    return ids, key


def is_correct(tokenizer, generated_ids: list[int], key: str) -> bool:
    text = tokenizer.decode(generated_ids, skip_special_tokens=True)
    digits = "".join(ch for ch in text if ch.isdigit())
    return digits.startswith(key)
