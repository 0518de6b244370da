"""Multi-process training: 2 CPU processes (gloo, through accelerate) use exactly the coalition
weights of 1 process, because coalition losses are all-reduced before the bargaining weights."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from nbcg.baselines import ARMS
from nbcg.config import NBCGConfig
from nbcg.train import train

SCRIPT = r'''
import json, sys
import numpy as np, torch
torch.set_num_threads(1)
from nbcg.baselines import ARMS
from nbcg.config import NBCGConfig
from nbcg.scale import process_group
from nbcg.train import train
rng = np.random.default_rng(0)
X = rng.normal(size=(200, 10)).astype(np.float32)
Y = np.stack([X[:, 0] > 0, X[:, 1] > 0.5, X[:, 2] > 1.2, X[:, 3] * X[:, 4] > 1.0], 1).astype(np.float32)
group = process_group()
cfg = NBCGConfig(epochs=3, batch_size=32, warmup_epochs=1)
_, log = train(X, Y, [[0, 1], [2, 3]], ARMS[sys.argv[2]], cfg, seed=0, group=group)
if group.rank == 0:
    json.dump({"world": group.world, "weights": np.stack(log.weights).tolist()}, open(sys.argv[1], "w"))
'''


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 10)).astype(np.float32)
    Y = np.stack([X[:, 0] > 0, X[:, 1] > 0.5, X[:, 2] > 1.2, X[:, 3] * X[:, 4] > 1.0], 1).astype(np.float32)
    return X, Y


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("arm", ["nbcg-bce"])
def test_two_processes_give_the_one_process_weights(tmp_path, arm):
    pytest.importorskip("accelerate")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "w.json"
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="true")
        procs.append(subprocess.Popen([sys.executable, str(script), str(out), arm], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
    two = json.loads(out.read_text())
    assert two["world"] == 2
    X, Y = _data()
    _, log = train(X, Y, [[0, 1], [2, 3]], ARMS[arm], NBCGConfig(epochs=3, batch_size=32, warmup_epochs=1), seed=0)
    one = np.stack(log.weights)
    W = np.asarray(two["weights"])
    assert W.shape == one.shape
    assert np.abs(one - 0.5).max() > 0.02          # the weights really moved (mechanism on)
    np.testing.assert_allclose(W, one, atol=1e-4)
