"""Verifiable tasks: synthetic CPU-scale tasks [R], the reward convention of the paper [P], and the
verifiers users pick for their own data.

Rewards follow the paper: 1.0 correct, 0.1 wrong but well formatted, 0.0 otherwise [P §5.1].
A task is a name, train / test examples (``{"prompt": str, "answer": str, ...}``) and a verifier
``verifier(response: str, example: dict) -> float``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from icml26_shared import UserError

Verifier = Callable[[str, dict], float]
EOS = ";"


@dataclass
class Task:
    name: str
    train: list[dict]
    test: list[dict]
    verifier: Verifier
    meta: dict = field(default_factory=dict)
    dev: list[dict] = field(default_factory=list)  # for choices made by looking at a number

    def __post_init__(self) -> None:
        if not self.train:
            raise UserError(f"task {self.name!r}: empty training set")
        for ex in self.train[:1] + self.test[:1]:
            if "prompt" not in ex or "answer" not in ex:
                raise UserError(f"task {self.name!r}: examples need 'prompt' and 'answer' fields "
                                f"(got {sorted(ex)})")


# --- verifiers ---------------------------------------------------------------------------------

_DIGITS = re.compile(r"^\d+;?$")


def digits_verifier(response: str, example: dict) -> float:
    """Synthetic tasks: the response must be the answer's digits then ``;`` (the EOS) [R]."""
    resp = response.split(EOS)[0] + EOS if EOS in response else response
    if resp == example["answer"] + EOS:
        return 1.0
    return 0.1 if _DIGITS.match(resp) and resp.endswith(EOS) else 0.0


def exact_verifier(response: str, example: dict) -> float:
    """Stripped response equals the answer → 1.0; non-empty → 0.1; else 0.0."""
    r = response.strip()
    return 1.0 if r == str(example["answer"]).strip() else (0.1 if r else 0.0)


def _last_number(text: str) -> str | None:
    nums = re.findall(r"-?\d+(?:\.\d+)?", text)
    return nums[-1] if nums else None


def number_verifier(response: str, example: dict) -> float:
    """The last number in the response equals the answer → 1.0; some number → 0.1; else 0.0."""
    got = _last_number(response)
    if got is None:
        return 0.0
    try:
        return 1.0 if float(got) == float(example["answer"]) else 0.1
    except ValueError:
        return 0.1


def contains_verifier(response: str, example: dict) -> float:
    return 1.0 if str(example["answer"]).strip() in response else (0.1 if response.strip() else 0.0)


VERIFIERS: dict[str, Verifier] = {"digits": digits_verifier, "exact": exact_verifier,
                                  "number": number_verifier, "contains": contains_verifier}


def get_verifier(spec: str | Verifier) -> Verifier:
    """A verifier by name (``digits|exact|number|contains|reasoning-gym``) or ``module:function``."""
    if callable(spec):
        return spec
    if spec in VERIFIERS:
        return VERIFIERS[spec]
    if spec in ("reasoning-gym", "reasoning_gym"):
        from .gym import reasoning_gym_verifier

        return reasoning_gym_verifier
    if ":" in spec:
        import importlib

        mod, _, fn = spec.partition(":")
        try:
            f = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"cannot load verifier {spec!r}: {exc}") from None
        if not callable(f):
            raise UserError(f"verifier {spec!r} is not callable")
        return f
    raise UserError(f"unknown verifier {spec!r} (use {', '.join(VERIFIERS)}, reasoning-gym or "
                    "module:function)")


def safe_reward(task: Task, response: str, example: dict) -> float:
    """Call the task's verifier; a raising verifier or a non-number is the user's error."""
    try:
        r = task.verifier(response, example)
    except Exception as exc:
        raise UserError(f"verifier of task {task.name!r} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(r, (int, float, np.floating)) or not np.isfinite(r):
        raise UserError(f"verifier of task {task.name!r} returned {r!r}, not a finite number")
    return float(r)


# --- synthetic tasks [R] -------------------------------------------------------------------------

def _copy(rng, n):
    d = "".join(map(str, rng.integers(0, 10, n)))
    return f"c{d}=", d


def _add(rng, n):
    a, b = (int(x) for x in rng.integers(0, 10 ** n, 2))
    return f"a{a:0{n}d}+{b:0{n}d}=", f"{(a + b) % 10 ** n:0{n}d}"


def _sort(rng, n):
    d = rng.integers(0, 10, n)
    return "s" + "".join(map(str, d)) + "=", "".join(map(str, np.sort(d)))


def _rev(rng, n):
    d = "".join(map(str, rng.integers(0, 10, n)))
    return f"r{d}=", d[::-1]


def _mul(rng, n):
    a, b = int(rng.integers(10 ** (n - 1), 10 ** n)), int(rng.integers(2, 10))
    return f"m{a}*{b}=", str(a * b)


FAMILIES = {"copy": _copy, "add": _add, "sort": _sort, "rev": _rev, "mul": _mul}
LEVELS = {"copy": {"easy": 3, "medium": 4, "hard": 6}, "add": {"easy": 1, "medium": 2, "hard": 3},
          "sort": {"easy": 3, "medium": 5, "hard": 6}, "rev": {"easy": 3, "medium": 4, "hard": 6},
          "mul": {"easy": 2, "medium": 3, "hard": 4}}
DEFAULT_LEVEL = {"copy": "medium", "add": "medium", "sort": "medium", "rev": "medium", "mul": "medium"}
VOCAB = ["<pad>"] + list("0123456789") + list("+*=;") + sorted({"c", "a", "s", "r", "m"})


def synthetic_names() -> list[str]:
    return [f"{f}:{lv}" for f in FAMILIES for lv in LEVELS[f]] + list(FAMILIES)


def make_synthetic(name: str, n_train: int = 2000, n_test: int = 200, seed: int = 0,
                   n_dev: int = 0) -> Task:
    """``family`` or ``family:level`` (copy / add / sort / rev / mul × easy / medium / hard);
    ``n_dev`` dev prompts, disjoint from train and test, drawn after both (so adding a dev split
    leaves train and test unchanged)."""
    fam, _, level = name.partition(":")
    level = level or DEFAULT_LEVEL.get(fam, "medium")
    if fam not in FAMILIES or level not in LEVELS.get(fam, {}):
        raise UserError(f"unknown task {name!r} (choose from {', '.join(synthetic_names())} "
                        "or give a JSONL file)")
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    gen, n = FAMILIES[fam], LEVELS[fam][level]
    seen, test = set(), []
    for _ in range(50 * n_test):  # small task spaces hold fewer distinct prompts than asked
        if len(test) >= n_test:
            break
        p, a = gen(rng, n)
        if p not in seen:
            seen.add(p)
            test.append({"prompt": p, "answer": a})
    train = []
    for _ in range(20 * n_train):
        if len(train) >= n_train:
            break
        p, a = gen(rng, n)
        if p not in seen:  # held-out prompts never appear in training
            train.append({"prompt": p, "answer": a})
    if not train:  # a tiny task space: train on all prompts, keep only a few held out
        test, train = test[: len(test) // 5], test[len(test) // 5:]
    seen |= {e["prompt"] for e in train}
    dev = []
    for _ in range(50 * n_dev):
        if len(dev) >= n_dev:
            break
        p, a = gen(rng, n)
        if p not in seen:
            seen.add(p)
            dev.append({"prompt": p, "answer": a})
    return Task(name, train, test, digits_verifier, {"family": fam, "level": level, "size": n}, dev)


class CharTokenizer:
    """Character-level tokenizer for the synthetic tasks; ``;`` is the end of a response."""

    def __init__(self, vocab: list[str] = VOCAB):
        self.vocab = list(vocab)
        self.index = {c: i for i, c in enumerate(self.vocab)}
        self.pad_id = 0
        self.eos_id = self.index[EOS]

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError as exc:
            raise UserError(f"character {exc.args[0]!r} is not in the tiny policy's vocabulary") from None

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids if int(i) != self.pad_id)
