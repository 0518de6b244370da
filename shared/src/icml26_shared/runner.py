"""Running reproductions: one package or many, each into ``OUT/<package>/results.json``.

``run_many`` never lets one package stop the others: a refusal (``UserError``, e.g. ``full``
without a GPU) is recorded as ``skipped`` with its reason, an exception as ``failed``, and
``REPORT.md`` is written at the end, after Ctrl-C too. ``resume=True`` reuses every package whose
``results.json`` is ok for the same scale, seed and version.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import UserError
from .registry import MethodDescriptor
from .report import write_report
from .results import SCALES, ClaimCheck, EnvInfo, Results

RESULTS = "results.json"


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


def _source_dir(desc: MethodDescriptor) -> Path | None:
    """The folder of the module that holds ``desc.reproduce`` (imported by then), if any."""
    module = sys.modules.get(desc.reproduce.partition(":")[0])
    path = getattr(module, "__file__", None)
    return Path(path).parent if path else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_one(desc: MethodDescriptor, scale: str, out_root: Path, seed: int = 0,
            *, catch: bool = True) -> Results:
    """Run ``desc``'s reproduction into ``out_root/desc.name``; write its ``results.json``.

    With ``catch`` a failing reproduction is recorded as ``status="failed"`` (traceback in
    ``error.txt``) instead of raising, so the other packages still run. A refusal
    (``UserError``) always raises and leaves no folder behind; ``run_many`` records it.
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
    res.env = EnvInfo.capture([desc.name], source=_source_dir(desc))
    res.to_json(out_dir / RESULTS)
    return res


def reusable(desc: MethodDescriptor, scale: str, out_root: Path, seed: int) -> Results | None:
    """The package's earlier results in ``out_root`` if they are ok for this scale, seed and
    version (a resumed run reuses them), else None."""
    path = Path(out_root) / desc.name / RESULTS
    if not path.is_file():
        return None
    try:
        res = Results.from_json(path)
        res.validate()
    except (ValueError, TypeError, KeyError, OSError):
        return None
    same = (res.package, res.version, res.scale, res.seed) == (desc.name, desc.version, scale, seed)
    return res if same and res.status == "ok" else None


def _is_run_folder(out: Path) -> bool:
    """Does ``out`` hold only what a reproduction writes (so ``--force`` may replace it)?"""
    for p in out.iterdir():
        if p.is_file() and p.name not in ("REPORT.md",):
            return False
        if p.is_dir() and not ((p / RESULTS).is_file() or (p / "error.txt").is_file()
                               or not any(p.iterdir())):
            return False
    return True


def prepare_out(out: Path, *, resume: bool = False, force: bool = False) -> tuple[Path, bool]:
    """Check ``--out``; return it and whether this call created it. An existing non-empty
    folder is refused unless ``resume`` (keep it) or ``force`` (replace it: only a folder that
    holds nothing but an earlier reproduction's output)."""
    out = Path(out)
    created = not out.exists()
    if resume and force:
        raise UserError("choose one of --resume and --force")
    if out.is_dir() and any(out.iterdir()) and not resume:
        if not force:
            raise UserError(f"--out {out} exists and is not empty (pass --resume to continue that "
                            "run or --force to replace it)")
        if not _is_run_folder(out):
            raise UserError(f"--out {out} holds files that no reproduction wrote; --force only "
                            "replaces an earlier run's folder")
        shutil.rmtree(out)
        created = True
    return check_out_dir(out), created


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _estimate_left(descs: Sequence[MethodDescriptor], scale: str, done: dict[str, float]) -> str:
    """Time left from the descriptors' declared quick minutes, rescaled by how the finished
    packages compared with their own declarations (quick scale only)."""
    if scale != "quick":
        return ""
    left = [d for d in descs if d.name not in done]
    if not left:
        return ""
    known = [d.quick_minutes for d in left if d.quick_minutes]
    ran = [(done[d.name], d.quick_minutes * 60) for d in descs if d.name in done and d.quick_minutes]
    rate = sum(a for a, _ in ran) / sum(b for _, b in ran) if ran else 1.0
    est = f"about {_fmt_s(sum(known) * 60 * rate)} left"
    unknown = len(left) - len(known)
    return est + (f" (+{unknown} without an estimate)" if unknown else "")


def run_many(descs: Sequence[MethodDescriptor], scale: str, out_root: Path, seed: int = 0, *,
             resume: bool = False, force: bool = False, refusal: str = "skip",
             log: Callable[[str], None] | None = None) -> list[Results]:
    """Run every descriptor into ``out_root``; write ``REPORT.md``; return the results.

    ``refusal="skip"`` records a package's ``UserError`` as ``status="skipped"`` (its reason in
    ``error``, a results.json written) and goes on; ``"raise"`` re-raises it (one named package:
    the refusal is the answer to the user's request). On Ctrl-C the report lists the packages
    finished so far and the rest as not run, then ``KeyboardInterrupt`` propagates.
    """
    log = log or (lambda line: print(line, flush=True))
    check_scale(scale)
    out_root, created = prepare_out(out_root, resume=resume, force=force)
    results: list[Results] = []
    done: dict[str, float] = {}
    t_start = time.perf_counter()
    n = len(descs)
    try:
        for i, desc in enumerate(descs, 1):
            head = f"[{i}/{n}] {desc.name} {desc.version}"
            old = reusable(desc, scale, out_root, seed) if resume else None
            if old is not None:
                results.append(old)
                done[desc.name] = old.elapsed_s or 0.0
                log(f"{head}: reused {out_root / desc.name / RESULTS}")
                continue
            target = out_root / desc.name
            if target.exists():  # an earlier run's leftovers (interrupted, failed, other seed)
                shutil.rmtree(target)
            log(f"{head}: reproduce --scale {scale} --seed {seed} ...")
            t0 = time.perf_counter()
            try:
                res = run_one(desc, scale, out_root, seed)
            except UserError as exc:
                if refusal == "raise":
                    raise
                res = Results(package=desc.name, version=desc.version, scale=scale, seed=seed,
                              status="skipped", error=_first_line(exc),
                              elapsed_s=time.perf_counter() - t0)
                res.env = EnvInfo.capture([desc.name], source=_source_dir(desc))
                res.to_json(target / RESULTS)
            if res.status != "ok" and not res.claims:  # every declared claim: not run
                res.claims = [ClaimCheck.compare(c, None, note=f"not run: {res.status}")
                              for c in desc.claims]
                res.to_json(target / RESULTS)
            results.append(res)
            done[desc.name] = res.elapsed_s or 0.0
            state = {"ok": "ok", "skipped": f"skipped ({res.error})"}.get(
                res.status, f"FAILED ({res.error})")
            left = _estimate_left(descs, scale, done)
            log(f"    {state} in {_fmt_s(res.elapsed_s or 0)}; elapsed "
                f"{_fmt_s(time.perf_counter() - t_start)}" + (f"; {left}" if left else ""))
    except KeyboardInterrupt:
        not_run = [d.name for d in descs if d.name not in done]
        write_report(results, out_root, not_run=not_run)
        log(f"interrupted: {len(not_run)} package(s) not run; resume with --resume")
        raise
    except UserError:
        if created and out_root.is_dir() and not any(out_root.iterdir()):
            out_root.rmdir()
        raise
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
        except (ValueError, TypeError, KeyError, OSError) as exc:
            raise UserError(f"{f} is not a valid results file: {exc}") from None
        out.append(res)
    return out
