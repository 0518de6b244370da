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

SCHEMA_VERSION = 1
Direction = Literal["higher", "lower"]
SCALES = ("smoke", "quick", "full")


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
class ClaimCheck:
    """A paper's claim against our measurement: the paper's figure, ours, the baseline's, and whether
    the claimed direction held (``None`` when it could not be checked at this scale)."""

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
    ) -> ClaimCheck:
        """Decide ``held``: ours beats the baseline by ``margin`` in the claim's direction, or,
        with ``threshold`` and no baseline, ours is on the right side of the threshold."""
        held: bool | None = None
        if ours is not None and not _isnan(ours):
            sign = 1.0 if claim.direction == "higher" else -1.0
            if baseline is not None and not _isnan(baseline):
                held = sign * (ours - baseline) >= margin
            elif threshold is not None:
                held = sign * (ours - threshold) >= 0
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

    @classmethod
    def capture(cls, extra_packages: Iterable[str] = ()) -> EnvInfo:
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
        return cls(
            python=platform.python_version(),
            platform=platform.platform(),
            packages=packages,
            git_commit=_git_commit(),
            cpu=platform.processor() or platform.machine(),
            cpu_count=os.cpu_count() or 1,
            threads=threads,
            gpu=gpu,
        )


@dataclass
class Results:
    """Everything a package's reproduction returns and writes as ``results.json``."""

    package: str
    version: str
    scale: str
    seed: int
    rows: list[Row] = field(default_factory=list)
    claims: list[ClaimCheck] = field(default_factory=list)
    env: EnvInfo | None = None
    figures: list[str] = field(default_factory=list)  # paths relative to the results.json folder
    notes: list[str] = field(default_factory=list)
    elapsed_s: float | None = None
    status: Literal["ok", "failed"] = "ok"
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

    def get(self, experiment: str, method: str, metric: str) -> Row:
        for row in self.rows:
            if (row.experiment, row.method, row.metric) == (experiment, method, metric):
                return row
        raise KeyError((experiment, method, metric))

    def to_dict(self) -> dict[str, Any]:
        return _clean(asdict(self))

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        data = dict(data)
        # JSON has no NaN: a figure that could not be measured is written as null and read back as NaN
        data["rows"] = [Row(**{**r, "value": math.nan if r.get("value") is None else r["value"]})
                        for r in data.get("rows", [])]
        data["claims"] = [ClaimCheck(**c) for c in data.get("claims", [])]
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


def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null; numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "shape", None) == ():
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
