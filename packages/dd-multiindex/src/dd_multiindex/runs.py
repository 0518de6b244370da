"""Grids and the resumable sweep: ``RUN/spec.json`` holds the spec (and the distiller's tuned lr),
``RUN/rows.jsonl`` one line per finished (cell, seed). Cells run in a process pool
(``concurrent.futures``); a row is appended only when complete, so a killed sweep resumes to the
same rows, and another spec into the same RUN is refused."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from icml26_shared import UserError

from .config import DistillConfig, SearchConfig, SweepSpec
from .io import append_row, read_rows, read_spec, write_json

STAGE1_D, STAGE1_R = (32, 64, 128), (1, 2, 3, 4)
GRIDS: dict[str, tuple[tuple[int, int, int, str], ...]] = {
    "smoke": tuple((d, r, 16, "12") for d in (16, 32) for r in (1, 2)),
    "quick": tuple((d, r, 256, "12") for d in STAGE1_D for r in STAGE1_R)
    + tuple((d, 2, L, "2") for d in STAGE1_D for L in (64, 1024)),
    # issue 54 item 3: r over 8x and d over 8x on CPU (too long for quick on 2 cores; not run here)
    "extended": tuple((d, r, 256, "12") for d in (16, 32, 64, 128) for r in (1, 2, 4, 8)),
    "full": tuple((d, r, L, "12") for d in (256, 512, 1024, 2048) for r in (2, 4, 8, 16) for L in (256, 1024)),
}
SMOKE_SEARCH = SearchConfig(m1_max=32, n_val=512, n_test=1024, real_max_factor=8)


def parse_grid(text: str) -> tuple[tuple[int, int, int, str], ...]:
    """A named grid (smoke, quick, extended, full) or "d=16,32;r=1,2;L=64" (the product, both stages in every cell)."""
    if text in GRIDS:
        return GRIDS[text]
    axes: dict[str, list[int]] = {}
    for part in text.split(";"):
        key, eq, vals = part.strip().partition("=")
        if not eq or key.strip() not in ("d", "r", "L") or key.strip() in axes:
            raise UserError(f"malformed --grid {text!r}: use smoke, quick, extended, full or 'd=16,32;r=1,2;L=64'")
        try:
            axes[key.strip()] = [int(v) for v in vals.split(",") if v.strip()]
        except ValueError:
            raise UserError(f"malformed --grid {text!r}: {key.strip()} values must be integers") from None
        if not axes[key.strip()]:
            raise UserError(f"malformed --grid {text!r}: {key.strip()} has no values")
    if set(axes) != {"d", "r", "L"}:
        raise UserError(f"malformed --grid {text!r}: give all of d, r and L")
    cells = tuple((d, r, L, "12") for d, r, L in itertools.product(axes["d"], axes["r"], axes["L"]))
    for d, r, L, _ in cells:
        if min(d, r) < 1 or r > d:
            raise UserError(f"bad cell d={d}, r={r}: need 1 <= r <= d")
        if L < 1:
            raise UserError(f"bad cell L={L}: need L >= 1")
    return cells


def make_spec(grid: str, distiller: str = "gm", link: str = "he2", seeds: int = 3, seed: int = 0,
              distill: DistillConfig | None = None, activation: str = "relu") -> SweepSpec:
    from .sweep import default_distill

    cells = parse_grid(grid)
    try:
        return SweepSpec(cells=cells, distiller=distiller, link=link, seeds=seeds, seed=seed,
                         distill=distill or default_distill(grid),
                         search=SMOKE_SEARCH if grid == "smoke" else SearchConfig(),
                         tune_lr=grid != "smoke", activation=activation)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def spec_dict(spec: SweepSpec) -> dict:
    return json.loads(json.dumps(asdict(spec)))


def _cell_task(args: tuple) -> dict:
    from .plugins import load_plugins
    from .sweep import run_cell

    load_plugins()  # a spawned worker (--device cuda) sees the user's registered pieces too
    spec, cell, k, lr, device = args
    return run_cell(spec, *cell, k, lr, device)


def _prewarm() -> None:
    """Import what workers need before forking (torch.optim pulls torch._dynamo on first use)."""
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def sweep(spec: SweepSpec, run: Path, *, workers: int = 1, device: str = "cpu",
          on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run (or resume) ``spec`` into ``run``; returns every row, sorted by (d, r, L, seed)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if device not in ("cpu", "cuda"):
        raise UserError(f"unknown --device {device!r} (choose cpu or cuda)")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda asked for, but torch sees no CUDA device")
    run = Path(run)
    want = spec_dict(spec)
    have = read_spec(run)
    if have is not None and have.get("spec") != want:
        raise UserError(f"{run} holds another sweep (spec.json differs); use a new --out")
    if have is None:
        if run.exists() and (not run.is_dir() or any(run.iterdir())):
            raise UserError(f"{run} exists and is not a sweep run; use a new --out")
        if not run.absolute().parent.is_dir():
            raise UserError(f"the folder of {run} does not exist")
        from .sweep import lr_cells, tune_distiller_lr

        lrs = tune_distiller_lr(spec) if spec.tune_lr else {d: spec.distill.lr for d in lr_cells(spec)}
        run.mkdir(exist_ok=True)
        write_json(run / "spec.json", {"spec": want, "distill_lr": {str(d): v for d, v in lrs.items()},
                                       "device": device})
    else:
        lrs = {int(d): float(v) for d, v in have["distill_lr"].items()}
    done = {(r["d"], r["r"], r["L"], r["seed"]) for r in read_rows(run, repair=True)}
    todo = [(spec, c, k, lrs[c[0]], device) for c in spec.cells for k in range(spec.seeds)
            if (c[0], c[1], c[2], k) not in done]
    if workers == 1 or len(todo) <= 1:
        for task in todo:
            row = _cell_task(task)
            append_row(run, row)
            if on_row:
                on_row(row)
    else:
        _prewarm()
        ctx = get_context("spawn" if device == "cuda" else "fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futs = [pool.submit(_cell_task, t) for t in todo]
            for fut in as_completed(futs):
                row = fut.result()
                append_row(run, row)
                if on_row:
                    on_row(row)
    return sorted(read_rows(run), key=lambda r: (r["d"], r["r"], r["L"], r["seed"]))
