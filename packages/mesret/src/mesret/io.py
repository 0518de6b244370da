"""Users' formats: run folders holding ``results.json`` (an ``icml26_shared.Results``), written
atomically (a private temporary folder, renamed into place), and user suites ``FILE.py:FUNC``."""

from __future__ import annotations

import json
from pathlib import Path

from icml26_shared import Results, UserError
from icml26_shared.io import atomic_dir, check_replaceable


def check_new_dir(out: Path, force: bool = False) -> None:
    """Refuse an existing output path unless ``force`` (nothing is overwritten by accident)."""
    out = Path(out)
    if out.exists() and not force:
        raise UserError(f"{out} already exists (pass --force to replace it, or choose another --out)")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    check_replaceable(out)  # --force replaces only a folder a run wrote, never a user's files


def write_run_dir(out: Path, res: Results, extra: dict[str, str] | None = None, force: bool = False) -> Path:
    """Write ``out/results.json`` (+ ``extra`` text files) into a temporary sibling folder and
    rename it to ``out``: an error part-way leaves no partial folder behind."""
    out = Path(out)
    check_new_dir(out, force)
    with atomic_dir(out, replace=force, exists_error="{path} already exists (pass --force to "
                    "replace it, or choose another --out)") as tmp:
        res.to_json(tmp / "results.json")
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
    return out / "results.json"


def read_run_dir(path: Path) -> Results:
    """``Results`` from a run folder (or a results.json); missing or corrupt files raise UserError."""
    path = Path(path)
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{file} does not exist (expected a folder written by `mesret bench` or `mesret policy`)")
    try:
        res = Results.from_json(file)
        res.validate()
    except (json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{file} is not a valid results file: {first}") from None
    return res


def summary_table(res: Results, metrics=("geomean_error", "mean_rank", "normalised_return", "total_fe",
                                         "env_steps")) -> str:
    """A plain-text table of the summary rows (one line per experiment, method and metric)."""
    rows = [r for r in res.rows if r.metric in metrics and "task" not in r.extra]
    if not rows:
        return "(no summary rows)"
    w = max(len(r.method) for r in rows)
    lines = [f"{'experiment':<24} {'method':<{w}} {'metric':<18} {'mean':>12} {'std':>10}"]
    for r in rows:
        sd = "" if r.spread is None else f"{r.spread:.3g}"
        lines.append(f"{r.experiment:<24} {r.method:<{w}} {r.metric:<18} {r.value:>12.4g} {sd:>10}")
    return "\n".join(lines)
