"""Running reproductions: one package or many, each into ``OUT/<package>/results.json``."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from .errors import UserError
from .registry import MethodDescriptor
from .report import write_report
from .results import SCALES, EnvInfo, Results


def check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")


def check_out_dir(out: Path) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create --out {out}: {exc.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UserError(f"--out {out} is not writable")
    return out


def run_one(desc: MethodDescriptor, scale: str, out_root: Path, seed: int = 0,
            *, catch: bool = True) -> Results:
    """Run ``desc``'s reproduction into ``out_root/desc.name``; write its ``results.json``.

    With ``catch`` a failing reproduction is recorded as ``status="failed"`` (traceback in
    ``error.txt``) instead of raising, so the other packages still run.
    """
    check_scale(scale)
    target = Path(out_root) / desc.name
    existed = target.exists()
    out_dir = check_out_dir(target)
    t0 = time.perf_counter()
    try:
        res = desc.load_reproduce()(scale, out_dir, seed)
        if not isinstance(res, Results):
            raise TypeError(f"{desc.reproduce} returned {type(res).__name__}, not Results")
    except UserError:
        if not existed and not any(out_dir.iterdir()):
            out_dir.rmdir()  # a refused run leaves nothing behind
        raise
    except Exception as exc:
        if not catch:
            raise
        (out_dir / "error.txt").write_text(traceback.format_exc())
        res = Results(package=desc.name, version=desc.version, scale=scale, seed=seed,
                      status="failed", error=f"{type(exc).__name__}: {exc}")
    res.elapsed_s = time.perf_counter() - t0
    res.env = EnvInfo.capture([desc.name])
    res.to_json(out_dir / "results.json")
    return res


def run_many(descs: Sequence[MethodDescriptor], scale: str, out_root: Path, seed: int = 0) -> list[Results]:
    check_scale(scale)
    out_root = check_out_dir(out_root)
    results = []
    for desc in descs:
        print(f"==> {desc.name} {desc.version}: reproduce --scale {scale} --seed {seed}", flush=True)
        res = run_one(desc, scale, out_root, seed)
        state = "ok" if res.status == "ok" else f"FAILED ({res.error})"
        print(f"    {state} in {res.elapsed_s:.1f} s -> {out_root / desc.name / 'results.json'}", flush=True)
        results.append(res)
    write_report(results, out_root)
    return results


def load_results_dir(path: Path) -> list[Results]:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory")
    files = sorted(path.glob("*/results.json")) or sorted(path.glob("results.json"))
    if not files:
        raise UserError(f"no results.json under {path}")
    out = []
    for f in files:
        try:
            res = Results.from_json(f)
            res.validate()
        except (ValueError, TypeError, KeyError) as exc:
            raise UserError(f"{f} is not a valid results file: {exc}") from None
        out.append(res)
    return out
