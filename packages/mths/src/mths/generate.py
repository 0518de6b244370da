"""Instance generators and reference solvers for ``gen-instances`` and the shipped sets.

References: TSP from elkai (LKH, 10 runs); CVRP the best of OR-Tools GLS, a long run of the
component library's ILS and, when the ``refs`` extra is installed (``pip install "mths[refs]"``),
PyVRP's hybrid genetic search (the strongest of the three on CVRP); flow shop the best of a long NEH + iterated greedy run (written as
the file's upper bound, as Taillard's files do); BPP ceil(sum w / C). All are best-known values,
not proven optima: a gap can be negative.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import write_json

from . import core
from . import io as mio
from .components import solve


def _points(rng, n: int, kind: str) -> np.ndarray:
    if kind == "clustered":
        k = max(2, n // 15)
        centres = rng.uniform(100, 900, (k, 2))
        pts = centres[rng.integers(k, size=n)] + rng.normal(0, 60, (n, 2))
        return np.clip(np.rint(pts), 0, 1000)
    return np.rint(rng.uniform(0, 1000, (n, 2)))


def tsp_reference(D: np.ndarray) -> float:
    import elkai

    tour = elkai.DistanceMatrix(np.rint(D).astype(int).tolist()).solve_tsp(runs=10)
    return core.tour_length(tour[:-1], D)


def pyvrp_cost(D: np.ndarray, q: np.ndarray, cap: float, time_limit: float, seed: int = 0) -> float | None:
    """PyVRP's HGS on the integer distance matrix ``D`` (depot 0); None without pyvrp or when
    it finds no feasible solution (integer demands and capacity, as CVRPLIB's)."""
    try:
        from pyvrp import Model
        from pyvrp.stop import MaxRuntime
    except ImportError:
        return None
    m = Model()
    locs = [m.add_location(x=0, y=0) for _ in range(len(q))]  # the distances below are explicit
    m.add_depot(locs[0])
    m.add_vehicle_type(num_available=len(q) - 1, capacity=int(cap))
    for i in range(1, len(q)):
        m.add_client(locs[i], delivery=int(q[i]))
    Di = np.rint(D).astype(int)
    for i, a in enumerate(locs):
        for j, b in enumerate(locs):
            if i != j:
                m.add_edge(a, b, distance=int(Di[i, j]))
    res = m.solve(stop=MaxRuntime(time_limit), seed=seed, display=False)
    return float(res.cost()) if res.is_feasible() else None


def cvrp_reference(D, q, cap, xy, time_limit: float) -> float:
    from .baselines import ortools_solve

    inst = {"distance_matrix": D, "demands": q, "vehicle_capacity": cap}
    best = core.cvrp_cost(ortools_solve("cvrp", inst, time_limit), D)
    cfg = {"construct": "savings", "ops": ["relocate", "swap", "2opt"], "perturbs": ["ruin_random", "ruin_cluster"],
           "key": "regret2", "strength": 3, "accept": "threshold", "temp": 0.01}
    own = solve("cvrp", {**inst, "coordinates": xy}, cfg, time_limit, 100000, 0)
    hgs = pyvrp_cost(D, q, cap, time_limit)
    return min(best, core.cvrp_cost(own, D), math.inf if hgs is None else hgs)


def fssp_reference(p: np.ndarray, time_limit: float) -> float:
    cfg = {"construct": "neh", "key": "sum_desc", "ops": ["insert"], "perturbs": ["destruct"],
           "strength": 3, "accept": "threshold", "temp": 0.004, "improve": "first"}
    return min(core.makespan(solve("fssp", {"processing_times": p}, cfg, time_limit, 100000, s), p)
               for s in range(3))


def generate(task: str, n: int, count: int, seed: int, out: Path, kind: str = "uniform",
             machines: int = 5, ref_time: float = 2.0, prefix: str | None = None) -> list[Path]:
    """Write ``count`` instances of ``task`` with ``n`` nodes / jobs / items into ``out`` plus
    ``references.json``."""
    if n < 5 or count < 1:
        raise UserError("--n must be >= 5 and --count >= 1")
    if kind not in ("uniform", "clustered"):
        raise UserError(f"--kind must be uniform or clustered, not {kind!r}")
    rng = np.random.default_rng(seed)
    out = Path(out)
    refs: dict[str, float] = {}
    files: list[Path] = []
    stem = prefix or f"{task}{n}_s{seed}"
    if task == "fssp":
        insts = []
        for k in range(count):
            p = rng.integers(1, 100, (n, machines)).astype(float)
            ub = fssp_reference(p, ref_time)
            insts.append((p, ub))
            refs[f"{stem}_{k + 1}"] = ub
        files.append(mio.write_taillard(out / f"{stem}.txt", insts, seed))
    for k in range(count if task != "fssp" else 0):
        name = f"{stem}_{k + 1:02d}"
        if task == "tsp":
            xy = _points(rng, n, kind)
            files.append(mio.write_tsp(out / f"{name}.tsp", name, xy))
            refs[name] = tsp_reference(core.tsplib_distances(xy, "EUC_2D"))
        elif task == "cvrp":
            xy = _points(rng, n, kind)
            xy[0] = [500, 500]
            q = np.concatenate([[0], rng.integers(1, 10, n - 1)]).astype(float)
            cap = float(math.ceil(q.sum() / max(2, (n - 1) / 6)))
            cap = max(cap, q.max())
            files.append(mio.write_vrp(out / f"{name}.vrp", name, xy, q, cap))
            D = np.floor(core.tsplib_distances(xy, "EXACT") + 0.5)
            refs[name] = cvrp_reference(D, q, cap, xy, ref_time)
        elif task == "bpp":
            w = rng.integers(20, 101, n)
            files.append(mio.write_bpp(out / f"{name}.bpp", w, 150))
            refs[name] = core.bpp_lower_bound(w, 150)
        else:
            raise UserError(f"unknown task {task!r} (tsp, cvrp, fssp, bpp)")
    write_json(out / "references.json", refs, indent=1, sort_keys=True)
    return files


def improve_cvrp_references(folder: Path, time_limit: float = 2.0) -> dict[str, tuple[float, float]]:
    """Lower ``folder/references.json``'s CVRP costs to PyVRP's where HGS finds better ones (how
    the shipped quick sets' CVRP references were refreshed in 0.2.0). Returns stem -> (old, new)."""
    from .tasks import get_task, load_instances

    folder = Path(folder)
    refs = json.loads((folder / "references.json").read_text())
    changed = {}
    for inst in load_instances(get_task("cvrp"), folder):
        d = inst.data
        hgs = pyvrp_cost(d["distance_matrix"], d["demands"], d["vehicle_capacity"], time_limit)
        if hgs is None:
            raise UserError("improve_cvrp_references needs pyvrp (pip install 'mths[refs]')")
        if hgs < refs[inst.name]:
            changed[inst.name] = (refs[inst.name], hgs)
            refs[inst.name] = hgs
    write_json(folder / "references.json", refs, indent=1, sort_keys=True)
    return changed
