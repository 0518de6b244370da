"""Keep XLA's harmless alarms off the command line's stderr, and nothing else.

XLA:CPU prints a block to stderr when a compile runs past two minutes ("Very slow compile? If you
want to file a bug...") or a constant takes over a second to fold; a Craftax compile on a busy
machine does both, and absl prefixes the first C++ log line of a process with "WARNING: All log
messages before absl::InitializeLog() is called are written to STDERR". Both are logged at ERROR /
WARNING level, so a log level high enough to hide them would hide XLA's real errors too.

``quiet_stderr()`` (the console entry calls it before JAX loads) instead routes file descriptor 2
through a small filter process that drops exactly those blocks — a block is dropped only once it
has been seen whole, from its ``slow_operation_alarm.cc`` line to its closing line — and passes
every other byte through: Python's tracebacks, ``UserError`` lines, XLA's other warnings and
errors. The filter is a separate process so that a crash of the main one (an abort from a failed
XLA check) still gets its last lines out. ``LEO_CRAFTAX_RAW_STDERR=1`` turns it off.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator

ALARM = b"slow_operation_alarm.cc"   # the source file of both alarms, on their first line
ALARM_END = b"xla_dump_to=/tmp/foo"  # both alarms' last sentence ("...run with envvar XLA_FLAGS=")
ABSL_PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
MAX_BLOCK = 400                      # lines; a longer "block" is not an alarm and is passed through


def _stars(line: bytes) -> bool:
    s = line.strip()
    return len(s) >= 8 and set(s) == {ord("*")}


def filter_lines(lines: Iterable[bytes]) -> Iterator[bytes]:
    """Lines (with their newlines) of a stderr stream, less XLA's slow-compile and slow
    constant-folding alarm blocks and absl's pre-initialisation warning. A block is held back
    until its end is seen; one that does not end (end of stream, or over ``MAX_BLOCK`` lines) is
    passed through as it came."""
    block: list[bytes] = []
    closing = False  # the block's last sentence was seen: a line of stars may still close it
    for line in lines:
        if block:
            if closing:
                block = []
                closing = False
                if _stars(line):
                    continue
            else:
                block.append(line)
                if ALARM_END in line:
                    closing = block[1:2] != [] and _stars(block[1])  # the slow-compile frame
                    if not closing:
                        block = []
                elif len(block) > MAX_BLOCK:
                    yield from block
                    block = []
                continue
        if ABSL_PREAMBLE in line:
            continue
        if ALARM in line:
            block = [line]
            continue
        yield line
    if block and not closing:
        yield from block


def _child() -> None:  # pragma: no cover - runs in the filter process
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    out = sys.stdout.buffer
    for line in filter_lines(iter(sys.stdin.buffer.readline, b"")):
        out.write(line)
        out.flush()


def quiet_stderr() -> bool:
    """Route this process's file descriptor 2 through the filter process (``filter_lines``);
    restored, and the filter drained, at exit. Does nothing (returns False) when stderr is not a
    real file (under pytest's capture) or ``LEO_CRAFTAX_RAW_STDERR`` is set."""
    if os.environ.get("LEO_CRAFTAX_RAW_STDERR"):
        return False
    try:
        sys.stderr.flush()
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    saved = os.dup(fd)
    r, w = os.pipe()
    try:
        # this file run as a script, isolated (-I: no user site or PYTHON* variables; -S: no
        # site): it needs only the standard library, not this package on the child's path
        child = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__)],
                                 stdin=r, stdout=saved, stderr=saved, close_fds=True)
    except OSError:
        for f in (r, w, saved):
            os.close(f)
        return False
    os.close(r)
    os.dup2(w, fd)
    os.close(w)

    def restore() -> None:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, fd)  # the pipe's last write end closes: the filter drains and ends
        os.close(saved)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()

    atexit.register(restore)
    return True


if __name__ == "__main__":  # pragma: no cover - the filter process (``quiet_stderr``)
    _child()
