"""One torch thread (the 2 CPU cores are shared, and tiny models gain nothing from more) and the
small synthetic batch the training tests share."""

import pytest
import torch
from core_mtl.synthetic import make_split
from core_mtl.train import Batch

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def batch():
    d = make_split(16, 16, seed=0)
    return Batch(torch.from_numpy(d["image"]), {"seg": torch.from_numpy(d["label"]),
                                                 "depth": torch.from_numpy(d["depth"]),
                                                 "normal": torch.from_numpy(d["normal"])})
