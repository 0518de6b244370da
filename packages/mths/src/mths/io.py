"""Users' formats: TSPLIB95 ``.tsp`` / ``.tour``, CVRPLIB ``.vrp`` / ``.sol`` (via ``vrplib``),
Taillard flow-shop files (several instances per file), BPPLIB ``.txt`` / ``.bpp``, and
``references.json`` (stem -> cost). Readers raise ``UserError`` naming the file (and line where
known); writers are atomic (temporary file, then rename)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_write_text as atomic_write

from . import core


def _num(tok: str, path: Path, line: int) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise UserError(f"{path}:{line}: expected a number, found {tok!r}") from None
    if not math.isfinite(v):
        raise UserError(f"{path}:{line}: non-finite number {tok!r}")
    return v


def _lines(path: Path) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None


# ---------------------------------------------------------------- TSPLIB


def read_tsp(path: str | Path) -> dict:
    """A symmetric TSPLIB instance: {name, dimension, coordinates, distance_matrix, kind}."""
    path = Path(path)
    head: dict[str, str] = {}
    coords: dict[int, tuple[float, float]] = {}
    weights: list[float] = []
    section = None
    for no, raw in enumerate(_lines(path), 1):
        line = raw.strip()
        if not line or line == "EOF":
            if line == "EOF":
                break
            continue
        if ":" in line and not (line[0].isdigit() or line[0] in "+-."):
            key, _, val = line.partition(":")
            head[key.strip().upper()] = val.strip()
            section = None
            continue
        if line.upper().endswith("_SECTION"):
            section = line.upper()
            continue
        toks = line.split()
        if section == "NODE_COORD_SECTION":
            if len(toks) < 3:
                raise UserError(f"{path}:{no}: a coordinate line needs 'id x y', found {line!r}")
            coords[int(_num(toks[0], path, no))] = (_num(toks[1], path, no), _num(toks[2], path, no))
        elif section == "EDGE_WEIGHT_SECTION":
            weights += [_num(t, path, no) for t in toks]
        elif section in ("DISPLAY_DATA_SECTION", "FIXED_EDGES_SECTION"):
            continue
        else:
            raise UserError(f"{path}:{no}: unexpected line {line!r}")
    kind = head.get("EDGE_WEIGHT_TYPE", "").upper()
    if head.get("TYPE", "TSP").upper().split()[0] != "TSP":
        raise UserError(f"{path}: TYPE {head.get('TYPE')} is not TSP")
    try:
        n = int(head["DIMENSION"])
    except (KeyError, ValueError):
        raise UserError(f"{path}: missing or bad DIMENSION") from None
    if kind == "EXPLICIT":
        fmt = head.get("EDGE_WEIGHT_FORMAT", "FULL_MATRIX").upper()
        try:
            dist = core.explicit_matrix(weights, n, fmt)
        except ValueError as exc:
            raise UserError(f"{path}: {exc}") from None
        xy = None
    elif kind in ("EUC_2D", "CEIL_2D", "ATT", "GEO"):
        if sorted(coords) != list(range(1, n + 1)):
            raise UserError(f"{path}: NODE_COORD_SECTION must list nodes 1..{n}, found {len(coords)}")
        xy = np.array([coords[i] for i in range(1, n + 1)])
        dist = core.tsplib_distances(xy, kind)
    else:
        raise UserError(f"{path}: unsupported EDGE_WEIGHT_TYPE {kind or '(none)'}")
    return {"name": head.get("NAME", path.stem), "dimension": n, "coordinates": xy,
            "distance_matrix": dist, "kind": kind}


def write_tsp(path: str | Path, name: str, xy: np.ndarray, kind: str = "EUC_2D") -> Path:
    rows = "\n".join(f"{i + 1} {x:.6g} {y:.6g}" for i, (x, y) in enumerate(xy))
    return atomic_write(path, f"NAME : {name}\nTYPE : TSP\nDIMENSION : {len(xy)}\n"
                              f"EDGE_WEIGHT_TYPE : {kind}\nNODE_COORD_SECTION\n{rows}\nEOF\n")


def read_tour(path: str | Path) -> list[int]:
    """A TSPLIB ``.tour`` as a 0-based permutation."""
    path = Path(path)
    out, on = [], False
    for no, raw in enumerate(_lines(path), 1):
        line = raw.strip()
        if line.upper() == "TOUR_SECTION":
            on = True
            continue
        if on:
            for t in line.split():
                v = int(_num(t, path, no))
                if v == -1:
                    return out
                out.append(v - 1)
    if not out:
        raise UserError(f"{path}: no TOUR_SECTION")
    return out


def write_tour(path: str | Path, name: str, tour) -> Path:
    body = "\n".join(str(int(c) + 1) for c in tour)
    return atomic_write(path, f"NAME : {name}\nTYPE : TOUR\nDIMENSION : {len(tour)}\n"
                              f"TOUR_SECTION\n{body}\n-1\nEOF\n")


# ---------------------------------------------------------------- CVRPLIB (vrplib)


def read_vrp(path: str | Path, rounding: str = "nint") -> dict:
    """A CVRPLIB instance through ``vrplib``; ``rounding`` nint (CVRPLIB X convention) or exact."""
    import vrplib

    path = Path(path)
    if rounding not in ("nint", "exact"):
        raise UserError(f"--rounding must be nint or exact, not {rounding!r}")
    if not path.is_file():
        raise UserError(f"no such instance file: {path}")
    try:
        inst = vrplib.read_instance(str(path))
    except Exception as exc:  # vrplib raises bare ValueError/IndexError on malformed text
        raise UserError(f"{path}: malformed CVRPLIB file ({type(exc).__name__}: {exc})") from None
    for key in ("capacity", "demand"):
        if key not in inst:
            raise UserError(f"{path}: missing {key.upper()} section")
    dist = np.asarray(inst["edge_weight"], dtype=float)
    if rounding == "nint":
        dist = np.floor(dist + 0.5)
    q = np.asarray(inst["demand"], dtype=float)
    cap = float(inst["capacity"])
    bad = np.flatnonzero(q > cap)
    if len(bad):
        raise UserError(f"{path}: customer {int(bad[0]) + 1} demands {q[bad[0]]:g} > capacity {cap:g}")
    depot = int(np.asarray(inst.get("depot", [0])).ravel()[0])
    if depot != 0:
        raise UserError(f"{path}: the depot must be node 1")
    return {"name": str(inst.get("name", path.stem)), "coordinates": inst.get("node_coord"),
            "distance_matrix": dist, "demands": q, "vehicle_capacity": cap}


def write_vrp(path: str | Path, name: str, xy: np.ndarray, demands, capacity: float) -> Path:
    n = len(xy)
    coords = "\n".join(f"{i + 1} {x:.6g} {y:.6g}" for i, (x, y) in enumerate(xy))
    dem = "\n".join(f"{i + 1} {int(d)}" for i, d in enumerate(demands))
    return atomic_write(path, f"NAME : {name}\nTYPE : CVRP\nDIMENSION : {n}\nEDGE_WEIGHT_TYPE : EUC_2D\n"
                              f"CAPACITY : {int(capacity)}\nNODE_COORD_SECTION\n{coords}\nDEMAND_SECTION\n"
                              f"{dem}\nDEPOT_SECTION\n1\n-1\nEOF\n")


def read_sol(path: str | Path) -> tuple[list[list[int]], float | None]:
    """A CVRPLIB ``.sol``: routes (customer ids as in the file: 1..n-1, the depot being 0) and
    the ``Cost`` line when present."""
    routes, cost = [], None
    path = Path(path)
    for no, raw in enumerate(_lines(path), 1):
        line = raw.strip()
        if line.lower().startswith("route"):
            routes.append([int(_num(t, path, no)) for t in line.partition(":")[2].split()])
        elif line.lower().startswith("cost"):
            cost = _num(line.split()[-1], path, no)
    return routes, cost


def write_sol(path: str | Path, routes, cost: float) -> Path:
    body = "".join(f"Route #{k + 1}: {' '.join(str(int(c)) for c in r)}\n" for k, r in enumerate(routes))
    return atomic_write(path, f"{body}Cost {cost:g}\n")


# ---------------------------------------------------------------- Taillard and BPPLIB


def read_taillard(path: str | Path) -> list[dict]:
    """Every instance of a Taillard file: header line (jobs, machines, seed, upper, lower bound),
    'processing times :' then one row per machine. Also accepts the plain 'n m' + job-rows form."""
    path = Path(path)
    lines = [(no, ln.strip()) for no, ln in enumerate(_lines(path), 1) if ln.strip()]
    out, i = [], 0
    while i < len(lines):
        no, ln = lines[i]
        if ln.lower().startswith("number of jobs"):
            if i + 1 >= len(lines):
                raise UserError(f"{path}:{no}: header without values")
            hno, hdr = lines[i + 1]
            vals = [_num(t, path, hno) for t in hdr.split()]
            if len(vals) < 2:
                raise UserError(f"{path}:{hno}: expected 'jobs machines seed upper lower'")
            n, m = int(vals[0]), int(vals[1])
            ub = vals[3] if len(vals) > 3 else None
            i += 2
            if i < len(lines) and lines[i][1].lower().startswith("processing"):
                i += 1
            rows = []
            for _ in range(m):
                if i >= len(lines):
                    raise UserError(f"{path}: instance {len(out) + 1} ends early (needs {m} machine rows)")
                rno, r = lines[i]
                row = [_num(t, path, rno) for t in r.split()]
                if len(row) != n:
                    raise UserError(f"{path}:{rno}: expected {n} processing times, found {len(row)}")
                rows.append(row)
                i += 1
            p = np.array(rows).T
            if (p < 0).any():
                raise UserError(f"{path}: negative processing time in instance {len(out) + 1}")
            out.append({"name": f"{path.stem}_{len(out) + 1}", "processing_times": p,
                        "upper_bound": ub})
        else:
            raise UserError(f"{path}:{no}: expected 'number of jobs, number of machines, ...', found {ln!r}")
    if not out:
        raise UserError(f"{path}: no Taillard instance found")
    return out


def write_taillard(path: str | Path, instances: list[tuple[np.ndarray, float]], seed: int = 0) -> Path:
    parts = []
    for p, ub in instances:
        n, m = p.shape
        rows = "\n".join(" ".join(f"{int(v):3d}" for v in p[:, k]) for k in range(m))
        parts.append("number of jobs, number of machines, initial seed, upper bound and lower bound :\n"
                     f"{n:12d}{m:12d}{seed:12d}{int(ub):12d}{0:12d}\nprocessing times :\n{rows}\n")
    return atomic_write(path, "".join(parts))


def read_bpp(path: str | Path) -> dict:
    """BPPLIB 'n / C / weights' text format."""
    path = Path(path)
    toks = [(no, t) for no, ln in enumerate(_lines(path), 1) for t in ln.split()]
    if len(toks) < 2:
        raise UserError(f"{path}: expected item count and capacity")
    n = int(_num(toks[0][1], path, toks[0][0]))
    cap = _num(toks[1][1], path, toks[1][0])
    w = [_num(t, path, no) for no, t in toks[2:]]
    if len(w) != n:
        raise UserError(f"{path}: header says {n} items, found {len(w)} weights")
    if cap <= 0 or any(x <= 0 or x > cap for x in w):
        raise UserError(f"{path}: weights must lie in (0, capacity={cap:g}]")
    return {"name": path.stem, "weights": np.array(w), "capacity": cap}


def write_bpp(path: str | Path, weights, capacity: float) -> Path:
    return atomic_write(path, f"{len(weights)}\n{int(capacity)}\n" + "".join(f"{int(x)}\n" for x in weights))


def read_references(path: str | Path) -> dict[str, float]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read references {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: references must be a JSON object stem -> cost")
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise UserError(f"{path}: reference {k!r} is {v!r}; references must be finite costs > 0")
    return {str(k): float(v) for k, v in data.items()}
