"""The ``Task`` plugin: description, interface template, reader, feasibility, cost, reference
and solution writer. TSP, CVRP, flow shop (makespan) and BPP are built in; a new task is one
``register`` call (LLM4AD PR #74 asked for exactly this)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml26_shared import UserError

from . import core
from . import io as mio


@dataclass
class Instance:
    name: str
    data: dict[str, Any]          # the solver's keyword arguments
    reference: float | None = None
    reference_source: str = ""


@dataclass(frozen=True)
class Task:
    name: str
    solver_class: str
    description: str
    interface: str                # the template a program must implement [C]
    suffixes: tuple[str, ...]
    read: Callable[[Path, dict], list[Instance]]
    check: Callable[[Instance, Any], str | None]
    cost: Callable[[Instance, Any], float]
    write: Callable[[Instance, Any, Path], Path]
    extra: dict[str, Any] = field(default_factory=dict)


TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UserError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    return TASKS[name]


def load_instances(task: Task, folder: str | Path, references: str | Path | None = None,
                   options: dict | None = None) -> list[Instance]:
    """Every instance file of ``task`` in ``folder``, sorted by name, with its reference:
    ``--references FILE`` or ``folder/references.json`` (stem -> cost) first, then what the
    task finds beside the file (``.opt.tour``, ``.sol``, Taillard's upper bound, ceil(sum w / C))."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"instances folder {folder} does not exist")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(task.suffixes)
                   and not p.name.endswith((".opt.tour",)))
    if not files:
        raise UserError(f"{folder}: no {task.name} instance files ({', '.join(task.suffixes)})")
    refs: dict[str, float] = {}
    ref_file = Path(references) if references else folder / "references.json"
    if references and not ref_file.is_file():
        raise UserError(f"references file {ref_file} does not exist")
    if ref_file.is_file():
        refs = mio.read_references(ref_file)
    out: list[Instance] = []
    for f in files:
        for inst in task.read(f, options or {}):
            if inst.name in refs:
                inst.reference, inst.reference_source = refs[inst.name], ref_file.name
            out.append(inst)
    return out


def evaluate_solution(task: Task, inst: Instance, sol: Any) -> dict[str, Any]:
    err = task.check(inst, sol)
    cost = math.inf if err else task.cost(inst, sol)
    ref = inst.reference
    return {"instance": inst.name, "feasible": err is None, "error": err, "cost": cost,
            "reference": ref, "gap": None if ref is None else core.gap(cost, ref)}


# ---------------------------------------------------------------- TSP

def _tsp_read(path: Path, opt: dict) -> list[Instance]:
    d = mio.read_tsp(path)
    inst = Instance(path.stem, {"coordinates": d["coordinates"], "distance_matrix": d["distance_matrix"]})
    tour = path.with_name(path.stem + ".opt.tour")
    if tour.is_file():
        t = mio.read_tour(tour)
        if core.check_tour(t, d["dimension"]) is None:
            inst.reference, inst.reference_source = core.tour_length(t, d["distance_matrix"]), tour.name
    return [inst]


register(Task(
    "tsp", "TSPSolver",
    "Symmetric travelling salesman: visit every city once and return, minimising the tour length.",
    "class TSPSolver:\n    def __init__(self, coordinates, distance_matrix, time_limit=10.0, steps=100, seed=0): ...\n"
    "    def solve(self) -> list[int]:  # a permutation of 0..n-1\n",
    (".tsp",), _tsp_read,
    lambda i, s: core.check_tour(s, len(i.data["distance_matrix"])),
    lambda i, s: core.tour_length(s, i.data["distance_matrix"]),
    lambda i, s, out: mio.write_tour(out / f"{i.name}.tour", i.name, s),
))


# ---------------------------------------------------------------- CVRP

def _cvrp_read(path: Path, opt: dict) -> list[Instance]:
    d = mio.read_vrp(path, opt.get("rounding", "nint"))
    inst = Instance(path.stem, {k: d[k] for k in ("coordinates", "distance_matrix", "demands",
                                                  "vehicle_capacity")})
    sol = path.with_suffix(".sol")
    if sol.is_file():
        routes, cost = mio.read_sol(sol)
        if core.check_routes(routes, d["demands"], d["vehicle_capacity"]) is None:
            inst.reference = core.cvrp_cost(routes, d["distance_matrix"])
            inst.reference_source = sol.name
    return [inst]


register(Task(
    "cvrp", "CVRPSolver",
    "Capacitated vehicle routing: routes from depot 0 cover every customer once, each route's "
    "demand within capacity, minimising total distance.",
    "class CVRPSolver:\n    def __init__(self, coordinates, distance_matrix, demands, vehicle_capacity,"
    " time_limit=10.0, steps=100, seed=0): ...\n    def solve(self) -> list[list[int]]:  # routes without the depot\n",
    (".vrp",), _cvrp_read,
    lambda i, s: core.check_routes(s, i.data["demands"], i.data["vehicle_capacity"]),
    lambda i, s: core.cvrp_cost(s, i.data["distance_matrix"]),
    lambda i, s, out: mio.write_sol(out / f"{i.name}.sol", s, core.cvrp_cost(s, i.data["distance_matrix"])),
))


# ---------------------------------------------------------------- flow shop

def _fssp_read(path: Path, opt: dict) -> list[Instance]:
    out = []
    for d in mio.read_taillard(path):
        p = d["processing_times"]
        out.append(Instance(d["name"], {"processing_times": p, "num_jobs": p.shape[0],
                                        "num_machines": p.shape[1]},
                            d["upper_bound"], "Taillard upper bound" if d["upper_bound"] else ""))
    return out


def _write_order(i: Instance, s, out: Path) -> Path:
    return mio.atomic_write(out / f"{i.name}.order", " ".join(str(int(j) + 1) for j in s) + "\n")


register(Task(
    "fssp", "FSSPSolver",
    "Permutation flow shop: order the jobs (same order on every machine) minimising the makespan.",
    "class FSSPSolver:\n    def __init__(self, num_jobs, num_machines, processing_times, time_limit=10.0,"
    " steps=100, seed=0): ...  # processing_times: jobs x machines\n    def solve(self) -> list[int]:  # job order\n",
    (".txt", ".fsp"), _fssp_read,
    lambda i, s: core.check_order(s, i.data["num_jobs"]),
    lambda i, s: core.makespan(s, i.data["processing_times"]),
    _write_order,
))


# ---------------------------------------------------------------- bin packing

def _bpp_read(path: Path, opt: dict) -> list[Instance]:
    d = mio.read_bpp(path)
    return [Instance(d["name"], {"weights": d["weights"], "capacity": d["capacity"]},
                     core.bpp_lower_bound(d["weights"], d["capacity"]), "ceil(sum w / C)")]


def _write_bins(i: Instance, s, out: Path) -> Path:
    return mio.atomic_write(out / f"{i.name}.bins", "".join(" ".join(str(int(x)) for x in b) + "\n" for b in s))


register(Task(
    "bpp", "BPPSolver",
    "One-dimensional bin packing: put every item in a bin of the given capacity, minimising the "
    "number of bins.",
    "class BPPSolver:\n    def __init__(self, capacity, weights, time_limit=10.0, steps=100, seed=0): ...\n"
    "    def solve(self) -> list[list[int]]:  # item indices per bin\n",
    (".bpp",), _bpp_read,
    lambda i, s: core.check_bins(s, i.data["weights"], i.data["capacity"]),
    lambda i, s: core.bins_used(s),
    _write_bins,
))
