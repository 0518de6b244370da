import numpy as np
import pytest
from mths import core
from mths.tasks import Instance


def tsp_instance(n=12, seed=0, name="t"):
    xy = np.random.default_rng(seed).uniform(0, 100, (n, 2)).round()
    D = core.tsplib_distances(xy, "EUC_2D")
    return Instance(name, {"coordinates": xy, "distance_matrix": D}, 1.0)


@pytest.fixture
def make_tsp():
    return tsp_instance


@pytest.fixture
def tiny_train():
    """Two TSP instances, two flow-shop instances; references from a long ILS run."""
    from mths.components import solve

    tsp = [tsp_instance(12, s, f"t{s}") for s in range(2)]
    for i in tsp:
        D = i.data["distance_matrix"]
        i.reference = core.tour_length(solve("tsp", {"distance_matrix": D}, {"construct": "nn", "ops": ["2opt", "oropt"],
                                             "perturbs": ["double_bridge"], "key": "cheapest"}, 5, 50, 0), D)
    fs = []
    for s in range(2):
        p = np.random.default_rng(10 + s).integers(1, 20, (6, 3)).astype(float)
        fs.append(Instance(f"f{s}", {"processing_times": p, "num_jobs": 6, "num_machines": 3},
                           core.makespan(solve("fssp", {"processing_times": p}, {"construct": "neh", "ops": ["insert"],
                                               "perturbs": ["destruct"], "key": "sum_desc"}, 5, 50, 0), p)))
    return {"tsp": tsp, "fssp": fs}
