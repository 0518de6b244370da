"""``EnvInfo.blas``: the BLAS libraries and their threads, captured and round-tripped."""

import pytest

from icml26_shared.cli import main
from icml26_shared.results import EnvInfo, Results


def test_capture_records_blas_and_round_trips(tmp_path):
    pytest.importorskip("threadpoolctl")
    env = EnvInfo.capture()
    assert env.blas, "numpy's BLAS should be visible to threadpoolctl"
    lib = env.blas[0]
    assert set(lib) == {"internal_api", "prefix", "version", "num_threads", "threading_layer",
                        "architecture"}
    assert lib["internal_api"] and isinstance(lib["num_threads"], int) and lib["num_threads"] >= 1
    res = Results(package="demo", version="0.1.0", scale="smoke", seed=0, env=env)
    res.add("toy", "m", "score", 1.0)
    back = Results.from_json(res.to_json(tmp_path / "results.json"))
    assert back.env == env


def test_old_env_without_blas_still_loads():
    data = {"package": "demo", "version": "0.1.0", "scale": "smoke", "seed": 0,
            "env": {"python": "3.11", "platform": "x", "packages": {}, "git_commit": None,
                    "cpu": "x86_64", "cpu_count": 2, "threads": None, "gpu": None}}
    assert Results.from_dict(data).env.blas is None


def test_env_command_prints_blas(capsys):
    pytest.importorskip("threadpoolctl")
    assert main(["env"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("blas ")]
    assert lines and "threads)" in lines[0]
