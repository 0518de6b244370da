"""A task plugin for the tests: single-machine total weighted completion time (1 || sum w_j C_j).
Smith's rule (jobs by p_j / w_j ascending) is optimal and gives the reference; the normalising
baseline is first-in-first-out. Load it with ``mths ... --plugin tests/wct_plugin.py``."""

from pathlib import Path

import numpy as np
from mths.tasks import Instance, Task, register


def smith(p, w) -> list[int]:
    return sorted(range(len(p)), key=lambda j: (p[j] / w[j], j))


def _cost(inst: Instance, order) -> float:
    p, w = inst.data["processing_times"], inst.data["weights"]
    t = total = 0.0
    for j in order:
        t += p[int(j)]
        total += w[int(j)] * t
    return float(total)


def _check(inst: Instance, order) -> str | None:
    n = len(inst.data["processing_times"])
    if not isinstance(order, list) or sorted(int(x) for x in order) != list(range(n)):
        return "not a permutation of the jobs"
    return None


def _read(path: Path, opt: dict) -> list[Instance]:
    rows = [ln.split() for ln in Path(path).read_text().splitlines() if ln.strip()]
    p = np.array([float(r[0]) for r in rows])
    w = np.array([float(r[1]) for r in rows])
    inst = Instance(path.stem, {"processing_times": p, "weights": w})
    inst.reference, inst.reference_source = _cost(inst, smith(p, w)), "Smith's rule (optimal)"
    return [inst]


def _write(inst: Instance, order, out: Path) -> Path:
    f = out / f"{inst.name}.order"
    f.write_text(" ".join(str(int(j)) for j in order) + "\n")
    return f


FIFO = '''class WCTSolver:
    def __init__(self, processing_times, weights, time_limit=1.0, steps=10, seed=0):
        self.n = len(processing_times)

    def solve(self):
        return list(range(self.n))
'''

SMITH = '''class WCTSolver:
    def __init__(self, processing_times, weights, time_limit=1.0, steps=10, seed=0):
        self.p, self.w = processing_times, weights

    def solve(self):
        return sorted(range(len(self.p)), key=lambda j: (self.p[j] / self.w[j], j))
'''

WCT = register(Task(
    "wct", "WCTSolver",
    "Single machine: order the jobs minimising the total weighted completion time sum w_j C_j.",
    "class WCTSolver:\n    def __init__(self, processing_times, weights, time_limit=10.0, steps=100, seed=0): ...\n"
    "    def solve(self) -> list[int]:  # job order\n",
    (".wct",), _read, _check, _cost, _write,
    fields=("processing_times", "weights"), baseline=lambda: FIFO,
))


def write_instances(folder: Path, count: int = 2, n: int = 12, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(count):
        p, w = rng.integers(1, 20, n), rng.integers(1, 10, n)
        (folder / f"w{k}.wct").write_text("".join(f"{a} {b}\n" for a, b in zip(p, w)))
    return folder
