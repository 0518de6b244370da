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
from .results import RECORDED_SCALES, SCALES, ClaimCheck, EnvInfo, Results

RESULTS = "results.json"


def check_scale(scale: str, desc: MethodDescriptor | None = None) -> None:
    """Refuse an unknown scale, and ``long`` for a package whose descriptor does not offer it."""
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")
    if scale == "long" and desc is not None and "long" not in desc.scales:
        offered = ", ".join(s for s in SCALES if s != "long")
        raise UserError(f"{desc.name} has no long scale (it offers {offered})")


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
    check_scale(scale, desc)
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
    if scale == "smoke":  # smoke proves the code path runs, not the paper's claim
        for check in res.claims:
            check.mark_not_evaluated("not evaluated at smoke scale")
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


def _owned(out_root: Path, target: Path) -> bool:
    """Did a run write every file below ``target`` (listed in ``out_root``'s manifest)?"""
    from .io import MANIFEST, _files, _manifest_files

    listed = _manifest_files(out_root) or set()
    rel = target.relative_to(out_root).as_posix()
    return all(f"{rel}/{f}" in listed for f in _files(target) if f != MANIFEST)


def _record(out_root: Path, *paths: Path) -> None:
    """List every file below ``paths`` in ``out_root``'s manifest: this run wrote them, so a later
    ``--force`` may replace them (and nothing else)."""
    from .io import _files, add_to_manifest

    files = []
    for p in paths:
        if p.is_dir():
            files += [p / f for f in _files(p)]
        elif p.exists():
            files.append(p)
    add_to_manifest(out_root, *files, writer="icml26 reproduce")


def prepare_out(out: Path, *, resume: bool = False, force: bool = False) -> tuple[Path, bool]:
    """Check ``--out``; return it and whether this call created it. An existing non-empty
    folder is refused unless ``resume`` (keep it) or ``force`` (replace it: only a folder whose
    every file an earlier reproduction wrote, as its manifest lists)."""
    from .io import MANIFEST, check_replaceable

    out = Path(out)
    created = not out.exists()
    if resume and force:
        raise UserError("choose one of --resume and --force")
    if out.is_dir() and any(out.iterdir()) and not resume:
        if not force:
            raise UserError(f"--out {out} exists and is not empty (pass --resume to continue that "
                            "run or --force to replace it)")
        if not (out / MANIFEST).is_file():
            raise UserError(f"--out {out} has no record of what a reproduction wrote there; "
                            "--force only replaces an earlier run's folder (move it or choose "
                            "another --out)")
        check_replaceable(out)
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
             record: bool = False, log: Callable[[str], None] | None = None) -> list[Results]:
    """Run every descriptor into ``out_root``; write ``REPORT.md``; return the results.

    ``refusal="skip"`` records a package's ``UserError`` as ``status="skipped"`` (its reason in
    ``error``, a results.json written) and goes on; ``"raise"`` re-raises it (one named package:
    the refusal is the answer to the user's request). On Ctrl-C the report lists the packages
    finished so far and the rest as not run, then ``KeyboardInterrupt`` propagates.
    """
    log = log or (lambda line: print(line, flush=True))
    check_scale(scale)
    if record:
        if scale not in RECORDED_SCALES:
            raise UserError("--record keeps a quick or long run's verdicts: use it with "
                            "--scale quick or --scale long")
        for desc in descs:
            if scale == "long" and "long" not in desc.scales:
                continue  # skipped below, nothing to record
            record_path(desc, scale)  # refuse before running anything
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
                if not _owned(out_root, target):
                    raise UserError(f"{target} holds files that no reproduction wrote; move them "
                                    "or choose another --out")
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
            _record(out_root, target)
            results.append(res)
            done[desc.name] = res.elapsed_s or 0.0
            if record and res.status == "ok":
                log(f"    recorded {write_record(desc, res, scale)}")
            state = {"ok": "ok", "skipped": f"skipped ({res.error})"}.get(
                res.status, f"FAILED ({res.error})")
            left = _estimate_left(descs, scale, done)
            log(f"    {state} in {_fmt_s(res.elapsed_s or 0)}; elapsed "
                f"{_fmt_s(time.perf_counter() - t_start)}" + (f"; {left}" if left else ""))
    except KeyboardInterrupt:
        not_run = [d.name for d in descs if d.name not in done]
        write_report(results, out_root, not_run=not_run)
        _record(out_root, *(out_root / r.package for r in results), out_root / "REPORT.md")
        log(f"interrupted: {len(not_run)} package(s) not run; resume with --resume")
        raise
    except UserError:
        if created and out_root.is_dir() and not any(out_root.iterdir()):
            out_root.rmdir()
        raise
    write_report(results, out_root)
    _record(out_root, *(out_root / r.package for r in results), out_root / "REPORT.md")
    return results


RECORD = Path("results") / "quick.json"


def record_file(scale: str = "quick") -> Path:
    """``results/quick.json`` or ``results/long.json``: where a recorded run's verdicts live."""
    return Path("results") / f"{scale}.json"


def package_root(desc: MethodDescriptor) -> Path | None:
    """The source checkout of ``desc``'s package (the folder holding its ``pyproject.toml``), or
    None when it is installed from a wheel. Imports only the package's top module."""
    import importlib.util
    import tomllib

    module = desc.reproduce.partition(":")[0].split(".")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    src = Path(list(spec.submodule_search_locations)[0]).resolve()
    for root in (src.parent.parent, src.parent):  # src/<module> layout, then flat
        try:
            name = tomllib.loads((root / "pyproject.toml").read_text())["project"]["name"]
        except (OSError, KeyError, ValueError):
            continue
        if name == desc.name:
            return root
    return None


def record_path(desc: MethodDescriptor, scale: str = "quick") -> Path:
    """Where ``reproduce --record`` writes the package's summary of a quick (or long) run; a
    ``UserError`` when the package is not a source checkout (a wheel has nowhere to commit it)."""
    import tomllib

    rel = record_file(scale)
    root = package_root(desc)
    if root is None:
        raise UserError(f"--record writes into {desc.name}'s source checkout "
                        f"(packages/{desc.name}/{rel}); {desc.name} is installed from a wheel")
    source = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    if source != desc.version:
        raise UserError(f"--record: {desc.name}'s source says version {source} but the installed "
                        f"metadata says {desc.version}; run `uv sync` first, so the record names "
                        "the code it measured")
    return root / rel


def quick_record(res: Results) -> dict:
    """The compact summary of a run that ``--record`` commits beside the package: its claims'
    verdicts and figures, no rows (those stay in the run's results.json)."""
    from .report import check_counts, claim_counts

    env = res.env
    return {
        "package": res.package, "version": res.version, "scale": res.scale, "seed": res.seed,
        "created": res.created, "status": res.status, "elapsed_s": res.elapsed_s,
        "git_commit": env.git_commit if env else None, "git_dirty": env.git_dirty if env else None,
        "cpu_count": env.cpu_count if env else None, "gpu": env.gpu if env else None,
        "claims": dict(zip(("held", "not_held", "not_evaluated"), claim_counts(res))),
        "checks": dict(zip(("ok", "failed", "not_evaluated"), check_counts(res))),
        "verdicts": [{"id": c.claim_id, "kind": c.kind, "status": c.status, "metric": c.metric,
                      "ours": c.ours, "baseline": c.baseline, "baseline_name": c.baseline_name,
                      "interval": c.interval} for c in res.claims],
        "curve_flags": sorted({f"{c.experiment} / {c.method}: {f}" for c in res.curves
                               for f in c.flags()}),
    }


def write_record(desc: MethodDescriptor, res: Results, scale: str = "quick") -> Path:
    from .io import write_json

    return write_json(record_path(desc, scale), quick_record(res))


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
