"""Six offline forced-choice tasks, generated from a seed [R] (the paper's pool is GSM8K, ARC-C,
BoolQ, ...; see the README). Each item is ``{"id", "task", "prompt", "options", "answer"}`` with
``answer`` the index of the correct option, the format ``decodeshare`` reads from JSONL."""

from __future__ import annotations

import random

WORDS = ("apple", "river", "candle", "monkey", "garden", "pencil", "tiger", "window", "button",
         "forest", "rocket", "violin", "lemon", "castle", "dragon", "bottle", "jacket", "planet",
         "silver", "turtle", "cookie", "mirror", "island", "banana", "zebra", "orange", "hammer",
         "cat", "dog", "sun", "moon", "star", "tree", "book", "door", "lamp", "ship", "bird", "fish",
         "horse", "cloud", "stone", "bread", "chair", "table", "glass", "plant", "music", "paper",
         "spoon", "train", "beach", "clock", "house", "snake", "grape", "piano", "tomato", "pepper",
         "rabbit", "carrot", "flower", "basket", "blanket", "kitchen", "teacher", "library", "picture",
         "mountain", "elephant", "umbrella", "computer", "sandwich", "keyboard", "airplane")


LETTERS = [" A", " B", " C", " D"]


def _addition(rng: random.Random) -> tuple[str, list[str], int]:
    a, b = rng.randint(10, 49), rng.randint(10, 49)
    s = a + b
    wrong = rng.sample([s - 10, s + 10, s - 1, s + 1, s + 2, s - 2], 3)
    opts = [s, *wrong]
    rng.shuffle(opts)
    return (f"What is {a} + {b}? " + " ".join(f"{L}) {o}" for L, o in zip("ABCD", opts))
            + " Reply with the letter.", LETTERS, opts.index(s))


def _larger(rng: random.Random) -> tuple[str, list[str], int]:
    a, b = rng.sample(range(10, 100), 2)
    return (f"Which number is larger, the first or the second: {a} or {b}?", [" first", " second"],
            0 if a > b else 1)


def _alphabetical(rng: random.Random) -> tuple[str, list[str], int]:
    a, b = rng.sample(WORDS, 2)
    return (f"In alphabetical order, which word comes first, the first or the second: {a} or {b}?",
            [" first", " second"], 0 if a < b else 1)


def _parity(rng: random.Random) -> tuple[str, list[str], int]:
    n = rng.randint(10, 999)
    return f"Is the number {n} even or odd?", [" even", " odd"], n % 2


def _letters(rng: random.Random) -> tuple[str, list[str], int]:
    w = rng.choice(WORDS)
    n = len(w)
    opts = [n, *rng.sample([n - 2, n - 1, n + 1, n + 2], 3)]
    rng.shuffle(opts)  # the answer's position is uniform over A-D (0.2.x always put it at B)
    return (f"How many letters are in the word \"{w}\"? "
            + " ".join(f"{L}) {o}" for L, o in zip("ABCD", opts)) + " Reply with the letter.",
            LETTERS, opts.index(n))


def _truefalse(rng: random.Random) -> tuple[str, list[str], int]:
    a, b = rng.randint(1, 20), rng.randint(1, 20)
    true = rng.random() < 0.5
    c = a + b if true else a + b + rng.choice([-3, -2, -1, 1, 2, 3])
    return f"True or false: {a} + {b} = {c}.", [" true", " false"], 0 if true else 1


GENERATORS = {"addition": _addition, "larger": _larger, "alphabetical": _alphabetical,
              "parity": _parity, "letters": _letters, "truefalse": _truefalse}


def make_tasks(per_task: int, seed: int = 0, tasks=tuple(GENERATORS)) -> list[dict]:
    """``per_task`` items for each task, deterministic in ``seed``, no duplicate prompts."""
    items = []
    for t_i, name in enumerate(tasks):
        rng = random.Random(seed * 7919 + t_i)
        seen: set[str] = set()
        for _ in range(100 * per_task):
            if len(seen) == per_task:
                break
            prompt, options, answer = GENERATORS[name](rng)
            if prompt in seen:
                continue
            seen.add(prompt)
            items.append({"id": f"{name}-{len(seen) - 1}", "task": name, "prompt": prompt,
                          "options": options, "answer": answer})
        else:
            if len(seen) < per_task:
                raise ValueError(f"task {name!r} cannot generate {per_task} distinct prompts")
    return items


def split_items(items: list[dict], n_calib: int) -> tuple[list[dict], list[dict]]:
    """Per task: the first ``n_calib`` items calibrate (basis, energy matching, steering
    validation), the rest evaluate (accuracies, held-out steering utility)."""
    calib, evals, count = [], [], {}
    for it in items:
        k = count.get(it["task"], 0)
        (calib if k < n_calib else evals).append(it)
        count[it["task"]] = k + 1
    return calib, evals


def by_task(items: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for it in items:
        out.setdefault(it["task"], []).append(it)
    return out


# --- multi-token-answer generation tasks (issue 51: each needs several decoded tokens) ----------
#: letters of the string tasks; ``next`` shifts each by one, so its inputs stop at "i"
ALPHABET = "abcdefghij"


def _word(rng: random.Random, letters: str = ALPHABET) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(4, 7)))


def _reverse(rng: random.Random) -> tuple[str, str]:
    w = _word(rng)
    return f"reverse {w}", w[::-1]


def _sort(rng: random.Random) -> tuple[str, str]:
    w = _word(rng)
    return f"sort {w}", "".join(sorted(w))


def _rotate(rng: random.Random) -> tuple[str, str]:
    # (the dev probe's ``upper`` was dropped: exact match compares lower-cased text, so an
    # unchanged copy of the input would have scored as right)
    w = _word(rng)
    return f"rotate {w}", w[1:] + w[0]


def _next(rng: random.Random) -> tuple[str, str]:
    w = _word(rng, ALPHABET[:-1])
    return f"next {w}", "".join(chr(ord(c) + 1) for c in w)


def _add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(100, 499), rng.randint(100, 499)
    return f"add {a}+{b}", str(a + b)


GEN_GENERATORS = {"reverse": _reverse, "sort": _sort, "rotate": _rotate, "next": _next, "add": _add}
#: the split a generation prompt belongs to, by a stable hash of its text: the tiny model trains
#: only on ``train`` prompts, its step count is chosen on ``dev`` prompts, and calibration /
#: evaluation items come from ``heldout`` prompts (no prompt is in two of them)
SPLITS = ("dev", "heldout", "heldout", *("train",) * 7)


def split_of(prompt: str) -> str:
    import zlib

    return SPLITS[zlib.crc32(prompt.encode()) % len(SPLITS)]


def gen_example(task: str, rng: random.Random) -> tuple[str, str]:
    """One ``(prompt, target)`` of generation task ``task`` (any split)."""
    return GEN_GENERATORS[task](rng)


def make_gen_tasks(per_task: int, seed: int = 0, tasks=tuple(GEN_GENERATORS),
                   split: str = "heldout") -> list[dict]:
    """``per_task`` distinct generation items (``{"id", "task", "prompt", "target"}``) per task from
    the hash split ``split``, deterministic in ``seed``."""
    if split not in set(SPLITS):
        raise ValueError(f"unknown split {split!r} (choose {', '.join(sorted(set(SPLITS)))})")
    items = []
    for t_i, name in enumerate(tasks):
        rng = random.Random(seed * 7919 + 104729 + t_i)
        seen: set[str] = set()
        for _ in range(1000 * per_task):
            if len(seen) == per_task:
                break
            prompt, target = GEN_GENERATORS[name](rng)
            if prompt in seen or split_of(prompt) != split:
                continue
            seen.add(prompt)
            items.append({"id": f"{name}-{len(seen) - 1}", "task": name, "prompt": prompt,
                          "target": target})
        if len(seen) < per_task:
            raise ValueError(f"task {name!r} cannot generate {per_task} distinct {split} prompts")
    return items
