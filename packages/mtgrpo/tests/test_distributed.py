"""Two CPU processes (gloo, through accelerate) compute the same task weights as one process."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_match_one_on_task_weights(tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        from dist_worker import run
    finally:
        sys.path.remove(str(HERE))
    one = run(None)
    out = tmp_path / "two.json"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(_free_port()), str(HERE / "dist_worker.py"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads(out.read_text())
    assert two["world"] == 2
    assert two["share"] == one["share"]  # same prompts, same rollouts, same batches
    np.testing.assert_allclose(two["z"], one["z"], rtol=0, atol=1e-6)
