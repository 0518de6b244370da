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
