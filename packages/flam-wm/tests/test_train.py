"""Checkpoints: a run stopped by SIGTERM resumes to the same final step and the same weights as an
uninterrupted one; train refuses a RUN of another config and resumes its own; a 2-process
accelerate step equals a 1-process step on the same global batch."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from flam_wm.cli import main
from flam_wm.config import ModelConfig, TrainConfig
from flam_wm.sprites import generate
from flam_wm.train import CHECKPOINT, Interrupted, train


def small(model="flam", **kw):
    base = dict(model=model, slots=3 if model == "flam" else 1, latent_dim=6, width=16, size=16)
    return ModelConfig(**{**base, **kw})


def _same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_sigterm_mid_run_resumes_to_the_same_weights(tmp_path):
    video, _ = generate(2, 6, 5, size=16, seed=3)
    cfg, tcfg = small(), TrainConfig(steps=6, batch_size=3, window=4, seed=1)
    ref = train(cfg, tcfg, video, run_dir=tmp_path / "ref", every=100)

    def kill_at_3(step, model, info):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)   # the real handler: finish the step, checkpoint, stop

    (tmp_path / "run").mkdir()
    with pytest.raises(Interrupted) as exc:
        train(cfg, tcfg, video, run_dir=tmp_path / "run", every=100, on_step=kill_at_3)
    assert exc.value.step == 3 and (tmp_path / "run" / CHECKPOINT).is_file()
    steps = []
    resumed = train(cfg, tcfg, video, run_dir=tmp_path / "run", every=100,
                    on_step=lambda s, m, i: steps.append(s))
    assert steps == [4, 5, 6]                       # resumed after step 3, ended at --steps
    assert _same_weights(resumed, ref)
    fresh = train(cfg, TrainConfig(steps=3, batch_size=3, window=4, seed=1), video)
    assert not _same_weights(fresh, ref)            # the last three steps did change the weights


def _train_cmd(data, run, *extra):
    return ["train", "--data", str(data), "--size", "16", "--model", "lam", "--latent-dim", "4",
            "--batch-size", "4", "--checkpoint-every", "1", "--out", str(run), *extra]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "data"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "6", "--frames", "5", "--size", "16",
                 "--controlled", "--seed", "4", "--out", str(out)]) == 0
    return out


def test_cli_killed_run_resumes_to_the_same_final_step(data, tmp_path, capsys):
    from flam_wm.io import load_run

    assert main(_train_cmd(data, tmp_path / "ref", "--steps", "60")) == 0
    run = tmp_path / "run"

    def killer():  # SIGTERM once the first checkpoint exists
        while not (run / CHECKPOINT).exists():
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    assert main(_train_cmd(data, run, "--steps", "60")) == 128 + signal.SIGTERM
    th.join()
    assert "interrupted at step" in capsys.readouterr().err
    assert not (run / "model.safetensors").exists()
    assert main(_train_cmd(data, run, "--steps", "60")) == 0
    assert "resuming" in capsys.readouterr().err
    assert json.loads((run / "metrics.json").read_text())["steps"] == 60
    assert _same_weights(load_run(run)[0], load_run(tmp_path / "ref")[0])


def test_train_refuses_a_run_of_another_config_and_resumes_its_own(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(_train_cmd(data, run, "--steps", "3")) == 0
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for extra, field in ((["--beta", "0.5"], "beta"), (["--lr", "0.01"], "lr"), (["--seed", "7"], "seed")):
        assert main(_train_cmd(data, run, "--steps", "3", *extra)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another config" in err[0] and field in err[0], err
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before      # RUN unchanged
    junk = tmp_path / "junk"
    junk.mkdir()
    assert main(_train_cmd(data, junk, "--steps", "3")) == 2
    assert "not a RUN" in capsys.readouterr().err and list(junk.iterdir()) == []
    assert main(_train_cmd(data, run, "--steps", "5")) == 0                   # its own config: resumes
    assert json.loads((run / "metrics.json").read_text())["steps"] == 5

    for extra, field in ((["--unroll", "2"], "unroll"), (["--unroll-from", "2"], "unroll_from")):
        assert main(_train_cmd(data, run, "--steps", "5", *extra)) == 2      # 0.4.1's loss options
        assert field in capsys.readouterr().err
    cfg = json.loads((run / "config.json").read_text())  # a RUN written before 0.4.1 lacks both fields
    del cfg["model"]["unroll"], cfg["train"]["unroll_from"]
    (run / "config.json").write_text(json.dumps(cfg))
    assert main(_train_cmd(data, run, "--steps", "6")) == 0                   # ... and still resumes
    assert json.loads((run / "metrics.json").read_text())["steps"] == 6


def test_unroll_warm_up_trains_one_step_ahead_until_unroll_from():
    video, _ = generate(2, 6, 5, size=16, seed=5)
    tc = dict(steps=3, batch_size=4, window=5, seed=1)
    one = train(small(), TrainConfig(**tc), video)
    warm = train(small(unroll=4), TrainConfig(**tc, unroll_from=3), video)    # the whole run is warm-up
    late = train(small(unroll=4), TrainConfig(**tc, unroll_from=2), video)    # unrolled at the last step
    assert _same_weights(one, warm) and not _same_weights(one, late)


WORKER = r"""
import sys, numpy as np, torch
from accelerate import Accelerator
from flam_wm.config import ModelConfig, TrainConfig
from flam_wm.sprites import generate
from flam_wm.train import train
from safetensors.torch import save_file
torch.set_num_threads(1)
video, _ = generate(2, 8, 5, size=16, seed=5)
cfg = ModelConfig(model="flam", slots=3, latent_dim=6, width=16, size=16)
acc = Accelerator(cpu=True)
assert acc.num_processes == int(sys.argv[2]), acc.num_processes
starts = int(sys.argv[3])  # 0.9.4: best-of-R starts, the choice reduced over the processes
tc = TrainConfig(steps=2 if starts == 1 else 5, batch_size=4, window=4, seed=2, starts=starts,
                 start_steps=0 if starts == 1 else 2)
model = train(cfg, tc, video, accelerator=acc)
if acc.is_main_process:
    out = {k: v.contiguous() for k, v in model.state_dict().items()}
    out["_start"] = torch.tensor([model.train_info["start"]])
    save_file(out, sys.argv[1])
acc.wait_for_everyone()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two fresh Python processes (torch + accelerate imports); run with -m slow
@pytest.mark.parametrize("starts", [1, 3])
def test_two_process_accelerate_step_equals_one_process(tmp_path, starts):
    """Two gloo processes, each on half of the same global batch (DDP averages the gradients),
    take the same two Adam steps as one process on the whole batch (0.9.4: with best-of-3 starts of
    2 steps each, they pick the candidate one process picks and continue it the same way)."""
    from safetensors.torch import load_file

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port, out = _free_port(), tmp_path / "two.safetensors"
    procs = []
    for rank in range(2):
        env = {**os.environ, "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        procs.append(subprocess.Popen([sys.executable, str(script), str(out), "2", str(starts)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = [p.communicate(timeout=240)[0].decode()[-2000:] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    two = load_file(str(out))
    video, _ = generate(2, 8, 5, size=16, seed=5)
    tc = TrainConfig(steps=2 if starts == 1 else 5, batch_size=4, window=4, seed=2, starts=starts,
                     start_steps=0 if starts == 1 else 2)
    ref = train(small(), tc, video)
    one = ref.state_dict()
    assert int(two.pop("_start")) == ref.train_info["start"]
    from flam_wm.train import start_seed

    init = small()
    torch.manual_seed(start_seed(2, ref.train_info["start"]))
    from flam_wm.core import WorldModel

    start = WorldModel(init).state_dict()
    moved = max((one[k] - start[k]).abs().max().item() for k in one)
    assert moved > 1e-4                                             # the steps did move the weights
    worst = max((one[k] - two[k]).abs().max().item() for k in one)
    # equal up to the all-reduce's summation order, which Adam's normalised step can magnify to a
    # few % of lr (2e-3) on near-zero gradients; different batches or unaveraged gradients move by ~lr
    assert worst < 0.1 * 2e-3, worst


def test_batch_not_divisible_by_processes_is_refused():
    class Fake:
        num_processes, process_index, is_main_process, device = 3, 0, True, "cpu"

        def prepare(self, *a):
            return a

    with pytest.raises(ValueError, match="divisible"):
        train(small(), TrainConfig(steps=1, batch_size=4, window=4), generate(1, 2, 4, size=16)[0], accelerator=Fake())


def test_checkpoint_files_are_safetensors(data, tmp_path):
    from safetensors import safe_open

    assert main(_train_cmd(data, tmp_path / "r", "--steps", "2")) == 0
    with safe_open(str(tmp_path / "r" / CHECKPOINT), framework="pt") as f:
        assert f.metadata()["step"] == "2" and any(k.startswith("opt.") for k in f.keys())  # noqa: SIM118
    assert not [p for p in Path(tmp_path / "r").iterdir() if p.name.startswith(".")]
    assert np.isfinite(json.loads((tmp_path / "r" / "metrics.json").read_text())["psnr_1"])


def test_a_diverged_run_stops_at_once_by_name(monkeypatch):
    from flam_wm.core import WorldModel

    video = generate(2, 4, 4, size=16, seed=5)[0]
    loss = WorldModel.loss
    monkeypatch.setattr(WorldModel, "loss", lambda self, *a, **k: (loss(self, *a, **k)[0] * float("nan"), {}))
    with pytest.raises(FloatingPointError, match="non-finite loss at step 1 .model flam, lr 0.002"):
        train(small(), TrainConfig(steps=2, batch_size=2, window=4), video)
