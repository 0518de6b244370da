"""The paper's tasks from reasoning-gym (generated offline, scored by reasoning-gym's own scorers).

The paper trains on reasoning-gym Countdown / Zebra puzzles / ARC-1D [P §5.1, as released with
SEC]; any other reasoning-gym dataset works by name. Rows written by ``write_reasoning_gym`` keep
the metadata reasoning-gym's scorer needs, so ``reasoning_gym_verifier`` can score a completion
from the row alone: the text inside the last ``<answer>…</answer>`` tags is the answer [P, C].

Rewards follow the paper's convention: 1.0 when reasoning-gym scores the answer fully correct,
0.1 when an answer in tags is present but wrong (well formatted), 0.0 without tags [P §5.1; the
mapping of reasoning-gym's partial scores onto 0.1 is ours, R].
"""

from __future__ import annotations

import json
import re
import warnings
from functools import cache
from pathlib import Path

from icml26_shared import UserError
from icml26_shared.io import atomic_write_text, dumps_json

PAPER_TASKS = ("countdown", "zebra_puzzles", "arc_1d")
INSTRUCTION = ("\n\nThink step by step, then give your final answer inside <answer> </answer> "
               "tags, for example <answer>your answer</answer>.")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _rg():
    try:
        with warnings.catch_warnings():  # some of its dependencies warn at import
            warnings.simplefilter("ignore")
            import reasoning_gym
    except ImportError:
        raise UserError("reasoning-gym is not installed: `pip install reasoning-gym`") from None
    return reasoning_gym


def task_names() -> list[str]:
    from reasoning_gym.factory import DATASETS

    _rg()
    return sorted(DATASETS)


def generate(task: str, n: int, seed: int = 0, options: dict | None = None) -> list[dict]:
    """``n`` rows of reasoning-gym dataset ``task`` (deterministic in ``seed``):
    ``prompt`` (question + the answer-tag instruction), ``answer``, ``question``,
    ``source_dataset`` and ``metadata``."""
    if n < 1:
        raise UserError(f"--n must be >= 1 (got {n})")
    rg = _rg()
    names = task_names()
    if task not in names:
        raise UserError(f"unknown reasoning-gym task {task!r} (e.g. {', '.join(PAPER_TASKS)}; "
                        f"{len(names)} tasks in all)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = rg.create_dataset(task, size=n, seed=seed, **(options or {}))
            entries = [ds[i] for i in range(n)]
    except (TypeError, ValueError, AssertionError) as exc:
        raise UserError(f"reasoning-gym {task}: {type(exc).__name__}: {exc}") from None
    rows = []
    for e in entries:
        meta = dict(e.get("metadata") or {})
        rows.append({"prompt": e["question"] + INSTRUCTION, "answer": str(e["answer"]),
                     "question": e["question"], "source_dataset": meta.get("source_dataset", task),
                     "metadata": meta})
    return rows


def write_reasoning_gym(task: str, n: int, seed: int, out: Path, n_test: int = 0, n_dev: int = 0,
                        options: dict | None = None, overwrite: bool = False) -> Path:
    """Write ``n`` train rows (+ ``n_dev`` dev, ``n_test`` test: one generator stream, split in
    that order, so the splits are disjoint draws) to ``out`` as JSONL with a ``split`` column;
    atomic (temp file, then rename)."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists (pass --overwrite to replace it)")
    if n_test < 0 or n_dev < 0:
        raise UserError("--test and --dev must be >= 0")
    if n < 1:
        raise UserError(f"--n must be >= 1 (got {n})")
    rows = generate(task, n + n_dev + n_test, seed, options)
    for i, r in enumerate(rows):
        r["split"] = "train" if i < n else ("dev" if i < n + n_dev else "test")
    atomic_write_text(out, "".join(dumps_json(r, indent=None, default=_jsonable) + "\n" for r in rows))
    return out


def _jsonable(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def extract_answer(response: str) -> str | None:
    found = _ANSWER.findall(response)
    return found[-1].strip() if found else None


@cache
def _scorer(source: str):
    rg = _rg()
    try:
        return rg.get_score_answer_fn(source)
    except Exception:
        raise UserError(f"reasoning-gym has no scorer for {source!r}") from None


def reasoning_gym_verifier(response: str, example: dict) -> float:
    """1.0 if reasoning-gym's scorer gives the tagged answer full marks, 0.1 for a wrong tagged
    answer, 0.0 without tags. ``example`` is a row written by ``write_reasoning_gym``."""
    source = example.get("source_dataset")
    if not source:
        raise UserError("the reasoning-gym verifier needs rows written by `mtgrpo data "
                        "reasoning-gym` (no source_dataset field)")
    ans = extract_answer(response)
    if ans is None:
        return 0.0
    meta = example.get("metadata") or {}
    if isinstance(meta, str):
        meta = json.loads(meta)
    entry = {"question": example.get("question", example["prompt"]), "answer": example["answer"],
             "metadata": meta}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        score = float(_scorer(source)(ans, entry))
    return 1.0 if score >= 1.0 - 1e-9 else 0.1
