"""The ``Task`` plugin: description, interface template, reader, feasibility, cost, reference
and solution writer. TSP, CVRP, flow shop (makespan) and BPP are built in; a new task is one
``register`` call (LLM4AD PR #74 asked for exactly this)."""

from __future__ import annotations

import math
import re
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
    fields: tuple[str, ...] = ()          # the instance fields a solver receives (the grammar reads them)
    #: the source of the program whose training score normalises this task in the aggregate fitness
    baseline: Callable[[], str] | None = None


TASKS: dict[str, Task] = {}
BUILTIN = ("tsp", "cvrp", "fssp", "bpp")


def register(task: Task) -> Task:
    """Add a task (a plugin's entry point). Checked here, so that a broken plugin is one line."""
    name = getattr(task, "name", None)
    if not isinstance(task, Task):
        raise UserError(f"register() takes an mths.tasks.Task, not {type(task).__name__}")
    problems = []
    if not (isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_]*", name)):
        problems.append("name must be lower-case letters, digits and _")
    if not (isinstance(task.solver_class, str) and task.solver_class.isidentifier()):
        problems.append("solver_class must be a Python class name")
    elif f"class {task.solver_class}" not in (task.interface or ""):
        problems.append(f"interface must show 'class {task.solver_class}'")
    if not (isinstance(task.suffixes, tuple) and task.suffixes
            and all(isinstance(x, str) and x.startswith(".") for x in task.suffixes)):
        problems.append("suffixes must be a tuple of file suffixes such as ('.wct',)")
    for k in ("read", "check", "cost", "write"):
        if not callable(getattr(task, k)):
            problems.append(f"{k} must be callable")
    if task.baseline is not None and not callable(task.baseline):
        problems.append("baseline must be None or a function returning program source")
    if not (isinstance(task.fields, tuple) and all(isinstance(x, str) for x in task.fields)):
        problems.append("fields must be a tuple of instance field names")
    if problems:
        raise UserError(f"task {name!r}: " + "; ".join(problems))
    if name in BUILTIN and name in TASKS:
        raise UserError(f"task {name!r} is built in; choose another name")
    TASKS[name] = task
    return task


def load_plugin(spec: str) -> None:
    """``--plugin FILE.py`` (executed as a module) or ``--plugin MODULE`` (imported); either calls
    :func:`register`."""
    import importlib
    import importlib.util
    import sys

    try:
        if spec.endswith(".py") or Path(spec).is_file():
            path = Path(spec)
            if not path.is_file():
                raise UserError(f"--plugin {spec}: no such file")
            mod_name = f"mths_plugin_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}"
            mspec = importlib.util.spec_from_file_location(mod_name, path)
            mod = importlib.util.module_from_spec(mspec)
            sys.modules[mod_name] = mod
            mspec.loader.exec_module(mod)
        else:
            importlib.import_module(spec)
    except UserError:
        raise
    except Exception as exc:  # a broken plugin is one line, not a traceback
        raise UserError(f"--plugin {spec}: {type(exc).__name__}: {exc}") from None


def load_entry_points() -> None:
    """Tasks installed by other packages under the entry-point group ``mths.tasks``: each names
    a Task, or a function (or module) that registers its tasks."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="mths.tasks"):
        try:
            obj = ep.load()
            if isinstance(obj, Task):
                if TASKS.get(obj.name) is not obj:
                    register(obj)
            elif callable(obj):
                obj()
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"entry point mths.tasks:{ep.name}: {type(exc).__name__}: {exc}") from None


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

def _builtin_baseline(task: str, name: str) -> Callable[[], str]:
    def src() -> str:
        from . import baselines

        return baselines.programs(task)[name]
    return src


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
    fields=("distance_matrix",), baseline=_builtin_baseline("tsp", "nn+2opt+oropt"),
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
    fields=("distance_matrix", "demands", "vehicle_capacity", "coordinates"),
    baseline=_builtin_baseline("cvrp", "savings+ls"),
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
    fields=("processing_times",), baseline=_builtin_baseline("fssp", "neh"),
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
    fields=("weights", "capacity"), baseline=_builtin_baseline("bpp", "ffd"),
))
