"""Classic heuristics and OR-Tools GLS behind the solver interface, plus the registry the
``baselines`` verb and the reproduction read. Each baseline is a program (source text) run by
the same sandbox at the same per-instance CPU limit and step budget as the evolved programs.

The classics are built from the same component library as the evolved programs:
descents (construct + local search, no main loop): nearest neighbour / farthest insertion + 2-opt
+ Or-opt (TSP), Clarke-Wright savings (+ relocate / swap / 2-opt) (CVRP), NEH (FSSP), FFD and BFD
(BPP); iterated classics at the searched programs' steps and CPU limit: textbook ILS (2-opt +
Or-opt with double-bridge or ruin-and-recreate kicks, accept improvements; TSP), savings + local
search + ruin-and-recreate (CVRP), NEH + iterated greedy (Ruiz & Stützle 2007; FSSP); OR-Tools
GLS beside (wall-clock limit, its CPU seconds reported).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .grammar import render_program

BASELINES: dict[str, dict[str, Callable[[], str]]] = {}
#: "descent" (construct + local search to a local optimum, no main loop), "iterated" (the same
#: steps and CPU limit as every searched program) or "external" (a solver of its own)
KIND: dict[tuple[str, str], str] = {}
LS = {"init": "greedy", "pool": 1, "improve": "best", "polish": False}


def baseline(task: str, name: str, kind: str = "descent"):
    def deco(fn: Callable[[], str]):
        BASELINES.setdefault(task, {})[name] = fn
        KIND[(task, name)] = kind
        return fn
    return deco


def _single(task: str, cfg: dict, title: str) -> str:
    """Construct + local search to a local optimum: zero main-loop steps."""
    cfg = {**LS, **cfg, "perturbs": cfg.get("perturbs", []), "key": cfg.get("key", "cheapest")}
    return render_program(task, cfg, title, steps=0)


def _iterated(task: str, cfg: dict, title: str) -> str:
    """Textbook iterated local search: perturb, descend, accept only improvements; it runs the
    evaluator's step budget and CPU limit, exactly like a searched program."""
    cfg = {**LS, "accept": "better", "credit": "uniform", **cfg}
    return render_program(task, cfg, title)


@baseline("tsp", "nn+2opt+oropt")
def _tsp_nn() -> str:
    return _single("tsp", {"construct": "nn", "ops": ["2opt", "oropt"]}, "nearest neighbour + 2-opt + Or-opt")


@baseline("tsp", "insertion+2opt+oropt")
def _tsp_ins() -> str:
    return _single("tsp", {"construct": "insertion", "ops": ["2opt", "oropt"], "key": "farthest"},
                   "farthest insertion + 2-opt + Or-opt")


@baseline("tsp", "ils-double-bridge", "iterated")
def _tsp_ils() -> str:
    return _iterated("tsp", {"construct": "nn", "key": "cheapest", "ops": ["2opt", "oropt"],
                             "perturbs": ["double_bridge"], "strength": 2},
                     "iterated local search: nearest neighbour, 2-opt + Or-opt, double-bridge kicks")


@baseline("tsp", "ils-ruin-recreate", "iterated")
def _tsp_ils_rr() -> str:
    return _iterated("tsp", {"construct": "nn", "key": "cheapest", "ops": ["2opt", "oropt"],
                             "perturbs": ["ruin_recreate"], "strength": 2},
                     "iterated local search: nearest neighbour, 2-opt + Or-opt, ruin and recreate")


@baseline("cvrp", "savings")
def _cvrp_sav() -> str:
    return _single("cvrp", {"construct": "savings", "ops": []}, "Clarke-Wright savings")


@baseline("cvrp", "savings+ls")
def _cvrp_sav_ls() -> str:
    return _single("cvrp", {"construct": "savings", "ops": ["relocate", "swap", "2opt"]},
                   "savings + relocate / swap / 2-opt")


@baseline("cvrp", "savings+ls+rr-random", "iterated")
def _cvrp_ils() -> str:
    return _iterated("cvrp", {"construct": "savings", "key": "cheapest", "ops": ["relocate", "swap", "2opt"],
                              "perturbs": ["ruin_random"], "strength": 2},
                     "savings + relocate / swap / 2-opt + random ruin and recreate")


@baseline("cvrp", "savings+ls+rr-cluster", "iterated")
def _cvrp_ils_cl() -> str:
    return _iterated("cvrp", {"construct": "savings", "key": "cheapest", "ops": ["relocate", "swap", "2opt"],
                              "perturbs": ["ruin_cluster"], "strength": 2},
                     "savings + relocate / swap / 2-opt + cluster ruin and recreate")


@baseline("fssp", "neh")
def _neh() -> str:
    return _single("fssp", {"construct": "neh", "ops": [], "key": "sum_desc"}, "NEH")


@baseline("fssp", "neh+ig", "iterated")
def _neh_ig() -> str:
    cfg = {**LS, "construct": "neh", "key": "sum_desc", "ops": ["insert"], "perturbs": ["destruct"],
           "strength": 3, "accept": "threshold", "temp": 0.004, "improve": "first"}
    return render_program("fssp", cfg, "NEH + iterated greedy (Ruiz & Stutzle 2007)")


@baseline("bpp", "ffd")
def _ffd() -> str:
    return _single("bpp", {"construct": "ffd", "ops": [], "key": "weight_desc"}, "first fit decreasing")


@baseline("bpp", "bfd")
def _bfd() -> str:
    return _single("bpp", {"construct": "bfd", "ops": [], "key": "best_fit"}, "best fit decreasing")


ORTOOLS = '''"""OR-Tools routing: savings / path-cheapest-arc start + guided local search."""

from mths.baselines import ortools_solve


class {cls}:
    def __init__(self, time_limit=10.0, steps=100, seed=0, **instance):
        self.instance, self.time_limit = instance, time_limit

    def solve(self):
        return ortools_solve({task!r}, self.instance, self.time_limit)
'''


@baseline("tsp", "ortools-gls", "external")
def _ort_tsp() -> str:
    return ORTOOLS.format(cls="TSPSolver", task="tsp")


@baseline("cvrp", "ortools-gls", "external")
def _ort_cvrp() -> str:
    return ORTOOLS.format(cls="CVRPSolver", task="cvrp")


LKH = '''"""LKH through elkai (one run), beside the iterated classics."""

from mths.baselines import lkh_solve


class TSPSolver:
    def __init__(self, time_limit=10.0, steps=100, seed=0, **instance):
        self.instance = instance

    def solve(self):
        return lkh_solve(self.instance)
'''


@baseline("tsp", "lkh", "external")
def _lkh() -> str:
    return LKH


def lkh_solve(inst: dict, runs: int = 1) -> list[int]:
    """LKH (elkai) on the integer distance matrix; no time limit of its own (its CPU seconds are
    reported beside). The quick TSP references are elkai's best of 10 runs, so its gap is ~0 by
    construction of the references."""
    import elkai

    D = np.rint(np.asarray(inst["distance_matrix"])).astype(int)
    return [int(x) for x in elkai.DistanceMatrix(D.tolist()).solve_tsp(runs=runs)[:-1]]


def ortools_solve(task: str, inst: dict, time_limit: float):
    """OR-Tools GLS on the integer distance matrix (wall-clock limit, so not step-reproducible)."""
    from ortools.constraint_solver import pywrapcp, routing_enums_pb2

    D = np.rint(np.asarray(inst["distance_matrix"])).astype(int)
    n = len(D)
    vehicles = 1 if task == "tsp" else n - 1
    mgr = pywrapcp.RoutingIndexManager(n, vehicles, 0)
    model = pywrapcp.RoutingModel(mgr)
    cb = model.RegisterTransitCallback(lambda i, j: int(D[mgr.IndexToNode(i), mgr.IndexToNode(j)]))
    model.SetArcCostEvaluatorOfAllVehicles(cb)
    if task == "cvrp":
        q = [int(x) for x in inst["demands"]]
        dcb = model.RegisterUnaryTransitCallback(lambda i: q[mgr.IndexToNode(i)])
        model.AddDimensionWithVehicleCapacity(dcb, 0, [int(inst["vehicle_capacity"])] * vehicles, True, "load")
    p = pywrapcp.DefaultRoutingSearchParameters()
    p.first_solution_strategy = (routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC if task == "tsp"
                                 else routing_enums_pb2.FirstSolutionStrategy.SAVINGS)
    p.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    p.time_limit.FromMilliseconds(max(50, int(1000 * time_limit)))
    sol = model.SolveWithParameters(p)
    if sol is None:
        raise RuntimeError("OR-Tools found no solution")
    routes = []
    for v in range(vehicles):
        i, r = model.Start(v), []
        while not model.IsEnd(i):
            node = mgr.IndexToNode(i)
            if node != 0 or task == "tsp":
                r.append(node)
            i = sol.Value(model.NextVar(i))
        if r:
            routes.append(r)
    return routes[0] if task == "tsp" else routes


def programs(task: str, include_ortools: bool = True) -> dict[str, str]:
    """The task's classic programs (``include_ortools=False`` leaves out the external solvers: OR-Tools
    GLS and LKH); for a plugin task, its own ``Task.baseline`` as "baseline"."""
    out = {k: fn() for k, fn in BASELINES.get(task, {}).items()
           if include_ortools or KIND.get((task, k)) != "external"}
    if not out:
        from .tasks import get_task

        t = get_task(task)
        if t.baseline is not None:
            out["baseline"] = t.baseline()
    return out
