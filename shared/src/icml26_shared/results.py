"""One results schema for every package: rows, claim checks and the run's environment.

Everything here is plain dataclasses that round-trip through JSON (``Results.to_json`` /
``Results.from_json``) and validate (``Results.validate``), so that reports can be re-rendered
from disk and the contract tests can check any package's output.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 2
Direction = Literal["higher", "lower"]
Kind = Literal["claim", "check"]
#: ``long`` is optional: a CPU run of an hour or two, run once and committed, for what does not fit
#: ``quick``; a package offers it by naming it in its descriptor's ``scales``
SCALES = ("smoke", "quick", "long", "full")
#: the scales whose verdicts ``reproduce --record`` commits beside the package
RECORDED_SCALES = ("quick", "long")
#: a curve whose best point lies in the last 10% of its budget is flagged "still improving"
STILL_IMPROVING_TAIL = 0.10
#: early stopping that fired before 25% of the budget is flagged "stopped early"
STOPPED_EARLY_BEFORE = 0.25


@dataclass
class Row:
    """One measured figure: ``value`` (mean over ``seeds``) with its ``spread`` (std over seeds)."""

    experiment: str
    method: str
    metric: str
    value: float
    spread: float | None = None
    seeds: list[int] = field(default_factory=list)
    unit: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Curve:
    """A learning curve: ``values`` of ``metric`` after ``steps`` (epochs, updates, samples) of one
    method's training on one ``split`` and seed.

    ``budget`` is the planned number of steps (default: the last step recorded); ``stopped_at`` the
    step where early stopping fired (None when the run used its whole budget). ``direction`` says
    which way the metric improves. ``flags()`` names what a reader must know before comparing."""

    experiment: str
    method: str
    metric: str
    steps: list[float]
    values: list[float]
    split: str = "dev"
    seed: int | None = None
    direction: Direction = "higher"
    budget: float | None = None
    stopped_at: float | None = None

    def best_step(self) -> float | None:
        pts = [(s, v) for s, v in zip(self.steps, self.values)
               if v is not None and not _isnan(float(v))]
        if not pts:
            return None
        sign = 1.0 if self.direction == "higher" else -1.0
        # the earliest step reaching the best value: a plateau is not "still improving"
        return max(pts, key=lambda sv: (sign * float(sv[1]), -float(sv[0])))[0]

    def flags(self) -> list[str]:
        """``"still improving"`` when the best point lies in the last 10% of the budget (the
        model was stopped while it was still learning); ``"stopped early"`` when early stopping
        fired, or kept its best point, before 25% of the budget (often a transient dip, not a
        plateau)."""
        if not self.steps:
            return []
        budget = float(self.budget if self.budget is not None else max(self.steps))
        out = []
        best = self.best_step()
        if best is not None and budget > 0 and len(self.steps) >= 3 \
                and float(best) >= (1 - STILL_IMPROVING_TAIL) * budget:
            out.append("still improving")
        # a run that early stopping ended with its kept (best) point in the first quarter of the
        # budget was judged on a transient dip, however long patience let it run afterwards
        if self.stopped_at is not None and budget > 0 and (
                float(self.stopped_at) < STOPPED_EARLY_BEFORE * budget
                or (best is not None and float(best) < STOPPED_EARLY_BEFORE * budget)):
            out.append("stopped early")
        return out


@dataclass
class ClaimCheck:
    """A paper's claim against our measurement: the paper's figure, ours, the baseline's, and whether
    the claimed direction held (``None`` when it could not be checked at this scale).

    ``kind`` is ``"claim"`` (what the paper credits to its method: counted in held / not held) or
    ``"check"`` (a property the design guarantees: byte arithmetic, an oracle on the scored rows,
    a toy trained to have it, an identity; reported apart and never counted as a claim).
    ``evaluated=False`` marks a claim "not evaluated at this scale" (every claim at ``smoke``, and
    a claim whose interval has too few units)."""

    claim_id: str
    description: str
    metric: str
    direction: Direction
    paper_value: float | None
    ours: float | None
    baseline: float | None = None
    baseline_name: str = ""
    held: bool | None = None
    note: str = ""
    #: 95% interval: of ``ours - baseline`` when there is a baseline, else of ``ours``
    interval: list[float] | None = None
    kind: Kind = "claim"
    evaluated: bool = True

    @property
    def status(self) -> str:
        """``held`` / ``not held`` / ``not evaluated`` (at this scale, or too few units for an
        interval) / ``not run`` (no figure: the run failed or the package skipped it)."""
        if not self.evaluated:
            return "not evaluated"
        return {True: "held", False: "not held", None: "not run"}[self.held]

    def mark_not_evaluated(self, reason: str) -> ClaimCheck:
        """Withdraw the verdict (``held = None``), keeping the figures, and say why."""
        self.held = None
        self.evaluated = False
        if reason and reason not in self.note:
            self.note = f"{reason}; {self.note}" if self.note else reason
        return self

    @classmethod
    def compare(
        cls,
        claim: Claim,
        ours: float | None,
        baseline: float | None = None,
        baseline_name: str = "",
        *,
        margin: float = 0.0,
        threshold: float | None = None,
        note: str = "",
        interval: Sequence[float] | None = None,
    ) -> ClaimCheck:
        """Decide ``held``: ours beats the baseline by ``margin`` in the claim's direction, or,
        with ``threshold`` and no baseline, ours is on the right side of the threshold.

        With ``interval`` = (low, high) or an ``eval.PairedInterval``, a 95% interval of
        ``ours - baseline`` (paired) or, without a baseline, of ``ours``, the whole interval must
        clear the target: a mean that clears it by noise alone does not hold. An interval with
        NaN ends (``paired_interval`` on fewer than 3 units) gives no verdict: the claim is
        "not evaluated"."""
        held: bool | None = None
        if interval is not None and hasattr(interval, "low") and hasattr(interval, "high"):
            interval = (interval.low, interval.high)
        iv = None if interval is None else [float(interval[0]), float(interval[1])]
        if iv is not None and any(map(_isnan, iv)):
            check = cls.compare(claim, ours, baseline, baseline_name, margin=margin,
                                threshold=threshold, note=note)
            return check.mark_not_evaluated("fewer than 3 units: no interval")
        if iv is not None and iv[0] > iv[1]:
            raise ValueError(f"bad interval {iv}")
        if ours is not None and not _isnan(ours):
            sign = 1.0 if claim.direction == "higher" else -1.0
            if baseline is not None and not _isnan(baseline):
                diff = (iv[0] if sign > 0 else iv[1]) if iv else ours - baseline
                held = sign * diff >= margin
            elif threshold is not None:
                val = (iv[0] if sign > 0 else iv[1]) if iv else ours
                held = sign * (val - threshold) >= 0
        return cls(
            claim_id=claim.id,
            description=claim.description,
            metric=claim.metric,
            direction=claim.direction,
            paper_value=claim.paper_value,
            ours=ours,
            baseline=baseline,
            baseline_name=baseline_name,
            held=held,
            note=note,
            interval=iv,
            kind=claim.kind,
        )


@dataclass(frozen=True)
class Claim:
    """A claim a package reproduces. ``paper_value`` is the paper's own figure, with ``source``
    naming where it comes from (table, figure or abstract)."""

    id: str
    description: str
    metric: str
    direction: Direction = "higher"
    paper_value: float | None = None
    unit: str = ""
    source: str = ""
    #: "claim": the paper's mechanism against a baseline; "check": a property the design
    #: guarantees (arithmetic, an oracle, a toy trained to have it), reported apart
    kind: Kind = "claim"


@dataclass
class EnvInfo:
    python: str
    platform: str
    packages: dict[str, str]
    git_commit: str | None
    cpu: str
    cpu_count: int
    threads: int | None
    gpu: str | None
    #: whether the git tree holding the package's source had uncommitted changes there
    git_dirty: bool | None = None
    #: the BLAS libraries loaded (threadpoolctl): internal_api, prefix, version, num_threads,
    #: threading_layer, architecture; None when threadpoolctl is missing (older results.json)
    blas: list[dict[str, Any]] | None = None

    @classmethod
    def capture(cls, extra_packages: Iterable[str] = (), source: str | Path | None = None) -> EnvInfo:
        """Describe this run. ``source`` is the package's source folder: the commit and the dirty
        flag are read from the git checkout holding it (none for an installed wheel)."""
        names = {"icml26-shared", "icml26-kernels", "numpy", "torch", "triton", "jax",
                 "transformers", "peft", *extra_packages}
        packages = {}
        for name in sorted(names):
            try:
                packages[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        threads = None
        gpu = None
        if "torch" in sys.modules:  # never import torch or jax just to describe the run
            torch = sys.modules["torch"]
            threads = torch.get_num_threads()
            if torch.cuda.is_available():
                gpu = torch.cuda.get_device_name(0)
        if gpu is None and "jax" in sys.modules:
            accel = [d for d in sys.modules["jax"].devices() if d.platform != "cpu"]
            if accel:
                gpu = f"{accel[0].device_kind} (x{len(accel)}, jax)"
        commit, dirty = _git_state(Path(source) if source is not None else None)
        return cls(
            python=platform.python_version(),
            platform=platform.platform(),
            packages=packages,
            git_commit=commit,
            cpu=platform.processor() or platform.machine(),
            cpu_count=os.cpu_count() or 1,
            threads=threads,
            gpu=gpu,
            git_dirty=dirty,
            blas=_blas_info(),
        )


def _blas_info() -> list[dict[str, Any]] | None:
    """The BLAS/LAPACK libraries loaded in this process and their thread counts (numpy's is
    loaded first so that there is one to see); file paths are left out."""
    try:
        import numpy  # noqa: F401 - loads its BLAS
        from threadpoolctl import threadpool_info

        libs = threadpool_info()
    except Exception:  # noqa: BLE001 - describing the run must never fail it
        return None
    keys = ("internal_api", "prefix", "version", "num_threads", "threading_layer", "architecture")
    return [{k: lib.get(k) for k in keys} for lib in libs if lib.get("user_api") == "blas"]


@dataclass
class Results:
    """Everything a package's reproduction returns and writes as ``results.json``."""

    package: str
    version: str
    scale: str
    seed: int
    rows: list[Row] = field(default_factory=list)
    claims: list[ClaimCheck] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    env: EnvInfo | None = None
    figures: list[str] = field(default_factory=list)  # paths relative to the results.json folder
    notes: list[str] = field(default_factory=list)
    elapsed_s: float | None = None
    #: ok; failed (an exception: ``error`` holds it); skipped (the package refused this scale
    #: here, e.g. full without a GPU: ``error`` holds its reason)
    status: Literal["ok", "failed", "skipped"] = "ok"
    error: str | None = None
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION

    def add(self, experiment: str, method: str, metric: str, values: float | Sequence[float],
            *, seeds: Sequence[int] = (), unit: str = "", **extra: Any) -> Row:
        """Add a row; a sequence of per-seed values becomes its mean and standard deviation."""
        value, spread = mean_spread(values)
        row = Row(experiment, method, metric, value, spread, list(seeds), unit, dict(extra))
        self.rows.append(row)
        return row

    def add_curve(self, experiment: str, method: str, metric: str, steps: Sequence[float],
                  values: Sequence[float], split: str = "dev", seed: int | None = None, *,
                  direction: Direction = "higher", budget: float | None = None,
                  stopped_at: float | None = None) -> Curve:
        """Record a learning curve (saved in ``results.json``, drawn and flagged by the report).

        ``budget``: the steps the run was allowed (default the last step); ``stopped_at``: the
        step where early stopping fired, if it did."""
        steps, values = [float(x) for x in steps], [float(v) for v in values]
        if len(steps) != len(values):
            raise ValueError(f"curve {experiment}/{method}/{metric}: {len(steps)} steps but "
                             f"{len(values)} values")
        if direction not in ("higher", "lower"):
            raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
        curve = Curve(experiment, method, metric, steps, values, split, seed, direction,
                      None if budget is None else float(budget),
                      None if stopped_at is None else float(stopped_at))
        self.curves.append(curve)
        return curve

    def claim_checks(self, kind: Kind = "claim") -> list[ClaimCheck]:
        """The claims (``kind="claim"``) or the checks (``kind="check"``)."""
        return [c for c in self.claims if c.kind == kind]

    def get(self, experiment: str, method: str, metric: str) -> Row:
        for row in self.rows:
            if (row.experiment, row.method, row.metric) == (experiment, method, metric):
                return row
        raise KeyError((experiment, method, metric))

    def to_dict(self) -> dict[str, Any]:
        from .io import to_jsonable  # JSON has no NaN/inf: written as null

        return to_jsonable(asdict(self))

    def to_json(self, path: str | Path) -> Path:
        from .io import write_json

        return write_json(path, self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        data = dict(data)
        # JSON has no NaN: a figure that could not be measured is written as null and read back as NaN
        data["rows"] = [Row(**{**r, "value": math.nan if r.get("value") is None else r["value"]})
                        for r in data.get("rows", [])]
        data["claims"] = [ClaimCheck(**c) for c in data.get("claims", [])]
        nan = lambda v: math.nan if v is None else v  # noqa: E731
        data["curves"] = [Curve(**{**c, "values": [nan(v) for v in c["values"]]})
                          for c in data.get("curves", [])]
        if data.get("schema_version") == 1:  # version 1 had no curves, claim kinds or evaluated
            data["schema_version"] = SCHEMA_VERSION
        if data.get("env") is not None:
            data["env"] = EnvInfo(**data["env"])
        return cls(**data)

    @classmethod
    def from_json(cls, path: str | Path) -> Results:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first problem; the contract tests call this."""
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} != {SCHEMA_VERSION}")
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r} not in {SCALES}")
        if self.status not in ("ok", "failed", "skipped"):
            raise ValueError(f"status {self.status!r} is not ok, failed or skipped")
        if self.status == "ok" and not self.rows:
            raise ValueError("a successful run must report at least one row")
        for row in self.rows:
            if not all(isinstance(s, str) and s for s in (row.experiment, row.method, row.metric)):
                raise ValueError(f"row with empty experiment/method/metric: {row}")
            if not isinstance(row.value, (int, float)):
                raise ValueError(f"row value is not a number: {row}")
        for claim in self.claims:
            if claim.direction not in ("higher", "lower"):
                raise ValueError(f"claim {claim.claim_id}: bad direction {claim.direction!r}")
            if claim.kind not in ("claim", "check"):
                raise ValueError(f"claim {claim.claim_id}: kind {claim.kind!r} is not claim or check")
        for c in self.curves:
            if len(c.steps) != len(c.values):
                raise ValueError(f"curve {c.experiment}/{c.method}/{c.metric}: steps and values "
                                 "differ in length")


def mean_spread(values: float | Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof=1) of per-seed values; a scalar has no spread."""
    if isinstance(values, (int, float)):
        return float(values), None
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values")
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        return mean, None
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var)


def _isnan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _git(args: list[str], cwd: Path | None) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5,
                             check=False, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _git_state(source: Path | None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``source`` (the current folder when None);
    (None, None) outside a checkout. ``dirty`` looks only below ``source``."""
    if source is not None:
        source = source if source.is_dir() else source.parent
        if not source.is_dir():
            return None, None
    commit = _git(["rev-parse", "HEAD"], source)
    if not commit or not commit.strip():
        return None, None
    status = _git(["status", "--porcelain", "--", "."], source)
    return commit.strip(), (None if status is None else bool(status.strip()))
