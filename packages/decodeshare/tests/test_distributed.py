"""Slow (deselected by default; run with ``-m slow``): `decodeshare collect` over 2 processes (torch.distributed gloo on CPU, the environment that
`accelerate launch --num_processes 2 --cpu` sets) gives exactly the states of 1 process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from decodeshare.cli import main
from decodeshare.tasks import make_tasks
from safetensors.numpy import load_file

torch.set_num_threads(1)  # the workers run with OMP_NUM_THREADS=1: the same reduction order


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(folder):
    man = json.loads((folder / "manifest.json").read_text())
    return man, {t: load_file(str(folder / f"{t}.safetensors"))["states"] for t in man["counts"]}


@pytest.mark.slow  # three model loads and two extra interpreters: ~75 CPU-seconds here
def test_two_process_collect_equals_one_process(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    items = make_tasks(3, seed=4, tasks=("parity", "larger", "truefalse"))
    tasks.write_text("".join(json.dumps(it) + "\n" for it in items))
    argv = ["collect", "--model", "tiny-llama", "--tasks", str(tasks), "--layer", "1",
            "--max-new-tokens", "4"]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "decodeshare", *argv, "--out", str(tmp_path / "two")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert "wrote" in outs[0][0] and "wrote" not in outs[1][0]  # only the main process writes
    man1, one = _load(tmp_path / "one")
    man2, two = _load(tmp_path / "two")
    assert list(man2["counts"]) == list(man1["counts"]) and man2["counts"] == man1["counts"]
    for t in one:
        np.testing.assert_array_equal(two[t], one[t])  # same rows, same order, bit for bit
    assert not list(tmp_path.glob(".two.*"))
