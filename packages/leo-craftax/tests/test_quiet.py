"""The console entry's stderr: XLA's slow-compile / slow constant-folding alarms and absl's
preamble are dropped, everything else (real errors, tracebacks, a crash's last lines) passes."""

import os
import subprocess
import sys
import textwrap

import pytest
from leo_craftax.quiet import filter_lines

SLOW_COMPILE = [
    b"E1202 10:00:00.123456  4242 slow_operation_alarm.cc:140] \n",
    b"********************************\n",
    b"[Compiling module jit_segment] Very slow compile?  If you want to file a bug, run with envvar "
    b"XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.\n",
    b"********************************\n",
]
CONSTANT_FOLDING = [
    b"E1202 10:00:01.000000  4242 slow_operation_alarm.cc:73] Constant folding an instruction is "
    b"taking > 1s:\n",
    b"\n",
    b"  %reduce.3 = f32[8268]{0} reduce(f32[4096,8268]{1,0} %constant.1, f32[] %c), dimensions={0}\n",
    b"\n",
    b"This isn't necessarily a bug; constant-folding is inherently a trade-off between compilation "
    b"time and speed at runtime.\n",
    b"\n",
    b"If you'd like to file a bug, run with envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and attach "
    b"the results.\n",
]
# the same alarm logged when the slow compile ends (the operation's duration on the first line)
SLOW_COMPILE_DONE = [b"E1202 10:02:10.000000  4242 slow_operation_alarm.cc:140] The operation took "
                     b"2m10.2s\n", *SLOW_COMPILE[1:]]
PREAMBLE = [b"WARNING: All log messages before absl::InitializeLog() is called are written to "
            b"STDERR\n"]
REAL = [b"E1202 10:00:02.000000  4242 pjrt_client.cc:99] Execution failed: RESOURCE_EXHAUSTED\n",
        b"Traceback (most recent call last):\n", b"  ...\n", b"leo-craftax: error: a bad flag\n"]


def test_filter_drops_the_alarms_and_keeps_everything_else():
    stream = [*PREAMBLE, *SLOW_COMPILE, REAL[0], *CONSTANT_FOLDING, *REAL[1:], *SLOW_COMPILE_DONE]
    assert list(filter_lines(stream)) == REAL
    # a block that never ends (a crash in the middle of one) is not dropped
    cut = SLOW_COMPILE[:2] + REAL[:1]
    assert list(filter_lines(cut)) == cut
    assert list(filter_lines([b"*****************\n", b"no alarm here\n"])) == [
        b"*****************\n", b"no alarm here\n"]


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          timeout=300, env={**os.environ, **env})


def test_the_filter_process_passes_real_lines_even_after_a_crash():
    """Written to file descriptor 2 as XLA's C++ does; the process then aborts."""
    code = f"""
        import os
        from leo_craftax.quiet import quiet_stderr
        assert quiet_stderr()
        os.write(2, {b''.join([*PREAMBLE, *SLOW_COMPILE, *REAL, *CONSTANT_FOLDING])!r})
        os.abort()
    """
    out = _python(code)
    assert out.returncode != 0
    assert out.stderr == b"".join(REAL)


def test_a_cli_train_writes_nothing_to_stderr(capfd, tmp_path, smoke_run):
    """``leo-craftax train`` at the smoke sizes (the flags give ``smoke_config("leo")``, two
    seeds, ``--fast-compile``, chunks of 8: the session's compiled programs, nothing compiled
    here): file descriptor 2 — where XLA's C++ logs go — receives nothing, stdout the report."""
    from leo_craftax.cli import main
    from leo_craftax.experiments import smoke_config

    smoke_run("leo")  # the programs exist
    out = tmp_path / "ck.msgpack"
    argv = ["train", "--size", "5", "--steps", str(smoke_config("leo").total_timesteps),
            "--seeds", "2", "--fast-compile", "--checkpoint-every", "8", "--out", str(out)]
    assert main(argv) == 0
    got = capfd.readouterr()
    assert got.err == "" and "checkpoint (seeds 0, 1)" in got.out and out.is_file()
    # the resolved configuration, printed and stored in the checkpoint
    import json

    from leo_craftax.config import TrainConfig
    from leo_craftax.io import load_checkpoint

    line = next(s for s in got.out.splitlines() if s.startswith("configuration ("))
    assert "(24 updates of 1,024 env steps" in line
    printed = TrainConfig.from_dict(json.loads(line.split("checkpoint): ", 1)[1]))
    assert printed == load_checkpoint(out)[0] == smoke_config("leo")
    assert "time: compile 0.0 s" in got.out  # the shared programs: the test compiles nothing


@pytest.mark.slow  # the two tests above cover the train's stderr and the filter process
def test_a_small_cli_train_leaves_stderr_empty(tmp_path):
    """``python -m leo_craftax train`` (the console entry's path, the filter in place) on a 3x3
    gridworld, compiled with ``--fast-compile`` to keep the test short: it succeeds and its
    stderr is empty."""
    argv = ["train", "--size", "3", "--steps", "256", "--num-envs", "16", "--width", "8",
            "--layers", "1", "--fast-compile", "--out", str(tmp_path / "ck.msgpack")]
    out = subprocess.run([sys.executable, "-m", "leo_craftax", *argv], capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, "ICML26_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and "checkpoint (seeds 0)" in out.stdout
