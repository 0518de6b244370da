"""Isolated, parallel evaluation of LLM-written programs.

Each program runs in a fresh interpreter (``python -I …/mths/_worker.py``) started by
``subprocess`` — never a fork of mths, which holds the API key and the LLM client — that
evaluates all the program's instances in turn:

* environment reduced to an allow-list (no keys, tokens, proxies; ``HOME``/``TMPDIR`` = work folder);
* a fresh temporary work folder as cwd, removed after the job;
* stdout/stderr captured (the program's prints go into the per-instance row, never to mths's
  stdout), results as JSON lines on a separate pipe, re-checked by mths (feasibility and cost);
* its own session; the whole group and every descendant killed on timeout and after every job,
  mths being a child subreaper (Linux) so a ``setsid`` grandchild is still found and killed;
* CPU, address-space, file-size, open-file and core limits (set in the worker);
* an audit hook in the worker (see :mod:`mths._worker`) refusing sockets, exec/fork/subprocess,
  ``os.kill``, ctypes, gc walks, /proc reads and writes/deletes outside the work folder.

Levels (``--sandbox``): ``process`` is the above; ``unshare`` adds user + network + pid + mount
namespaces (no network at all, a private /proc, everything dies with the namespace);
``bwrap`` (bubblewrap) adds a read-only root file system, a tmpfs /tmp and a cleared
environment. ``auto`` takes the strongest that works on this machine. A timeout, a crash or a
raise never reaches the caller: it becomes an infeasible result (cost inf).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import pickle
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from icml26_shared import UserError

from .tasks import Instance, Task, evaluate_solution

LEVELS = ("bwrap", "unshare", "process")


@dataclass(frozen=True)
class Limits:
    time_limit: float = 0.2      # CPU seconds the solver is told (its own budget) [R]
    steps: int = 20              # main-loop iterations the solver is told [R]
    wall_factor: float = 10.0    # killed after wall_factor * time_limit + wall_extra s wall [R] (generous:
    #                              a shared machine must not turn a slow start into a timeout)
    mem_mb: int = 1024           # address space above the worker's after its imports, MiB [R]
    wall_extra: float = 5.0      # seconds of wall clock added to the kill deadline [R]
    sandbox: str = "auto"        # auto | bwrap | unshare | process
    fsize_mb: int = 16           # largest file a program may write (in its work folder), MiB
    nofile: int = 64             # open files per worker


_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
            "--mount", "--mount-proc"]
_BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
          "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd + ["true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@cache
def available(level: str) -> bool:
    """Whether ``level`` works on this machine (probed once)."""
    if level == "process":
        return True
    if not sys.platform.startswith("linux"):
        return False
    if level == "bwrap":
        return shutil.which("bwrap") is not None and _probe(_BWRAP)
    if level == "unshare":
        return shutil.which("unshare") is not None and _probe(_UNSHARE)
    return False


def resolve_level(level: str = "auto") -> str:
    """``auto`` → the strongest level available; a named level that is not available → UserError."""
    if level == "auto":
        return next(lv for lv in LEVELS if available(lv))
    if level not in LEVELS:
        raise UserError(f"--sandbox {level!r}: choose auto, {', '.join(LEVELS)}")
    if not available(level):
        tool = {"bwrap": "bubblewrap (bwrap) is not installed or cannot create namespaces here",
                "unshare": "unshare cannot create user/net/pid namespaces here"}[level]
        raise UserError(f"--sandbox {level}: {tool} (use --sandbox auto or process)")
    return level


_ENV_KEEP = ("LANG", "LC_ALL", "TZ")
_MARK = "MTHS_SANDBOX_WORKER"  # in every worker's environment: how mths recognises its orphans


def _env(work: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env.update({_MARK: "1"}, PATH=os.defpath, HOME=work, TMPDIR=work, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


_SUBREAPER = False


def _become_subreaper() -> None:
    """PR_SET_CHILD_SUBREAPER: orphans of our workers (a ``setsid`` grandchild) become our children."""
    global _SUBREAPER
    if _SUBREAPER or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _ppids() -> dict[int, tuple[int, int, int]]:
    """pid → (ppid, pgid, sid) of every process we can see."""
    out = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out[int(name)] = (int(rest[1]), int(rest[2]), int(rest[3]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _from_a_job(pid: int) -> bool:
    """Whether a process descends from a sandbox worker (it inherited the worker's environment
    marker): only those orphans are killed, never a child the caller started itself."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return _MARK.encode() + b"=1" in f.read().split(b"\0")
    except OSError:
        return False


def _reap_tree(proc: subprocess.Popen, keep: set[int]) -> None:
    """Kill the worker, its group, every descendant, and any orphan reparented to us (subreaper)
    that is not one of the live workers in ``keep``; then reap them."""
    me = os.getpid()
    for _ in range(5):
        table = _ppids()
        kids: dict[int, list[int]] = {}
        for pid, (pp, _, _) in table.items():
            kids.setdefault(pp, []).append(pid)
        doomed, stack = set(), [proc.pid]
        while stack:
            p = stack.pop()
            if p not in doomed:
                doomed.add(p)
                stack.extend(kids.get(p, []))
        doomed |= {pid for pid, (_, pg, sid) in table.items() if pg == proc.pid or sid == proc.pid}
        orphans = {pid for pid, (pp, _, _) in table.items()
                   if pp == me and pid not in keep and pid != proc.pid and _from_a_job(pid)}
        for pid in sorted(orphans):
            stack = [pid]
            while stack:
                p = stack.pop()
                if p not in doomed:
                    doomed.add(p)
                    stack.extend(kids.get(p, []))
        doomed.discard(me)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in doomed:
            _kill(pid)
        proc.wait()
        for pid in orphans:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if not (doomed - {proc.pid}):
            return
        time.sleep(0.01)


class _Worker:
    """One sandboxed interpreter for one program: started (and warmed up: its imports) before it
    is given its job, so a spare can wait while mths asks the LLM; never given a second job."""

    def __init__(self, level: str):
        self.level, self.ks, self.started, self.done = level, [], None, set()
        self.work = tempfile.mkdtemp(prefix="mths-job-")
        os.chmod(self.work, 0o700)
        self.errfile = tempfile.TemporaryFile()
        rd, wr = os.pipe()
        # the worker is a script of this very mths (isolated mode: no PYTHON* variables, no user
        # site, no script folder on the path); it takes the parent's sys.path, so it imports the
        # same components
        python = [sys.executable, "-I", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py"),
                  str(wr), json.dumps(sys.path)]
        if level == "bwrap":
            cmd = _BWRAP + ["--bind", self.work, self.work, "--chdir", self.work]
            for k, v in _env(self.work).items():
                cmd += ["--setenv", k, v]
            cmd += python
        elif level == "unshare":
            cmd = _UNSHARE + python
        else:
            cmd = python
        self.proc = subprocess.Popen(cmd, cwd=self.work, env=_env(self.work), stdin=subprocess.PIPE,
                                     stdout=self.errfile, stderr=self.errfile, pass_fds=(wr,),
                                     start_new_session=True, close_fds=True)
        os.close(wr)
        self.rd, self.buf = rd, b""
        os.set_blocking(rd, False)

    def assign(self, task: Task, src: str, ks: list[int], jobs, limits: Limits, seed: int) -> None:
        self.ks = list(ks)
        job = {"source": src, "cls": task.solver_class, "instances": [(k, jobs[k][2].data) for k in ks],
               "time_limit": limits.time_limit, "steps": limits.steps, "seed": seed,
               "cpu_budget": len(ks) * (2 * limits.time_limit + 1) + 2,
               "mem_bytes": limits.mem_mb * 2 ** 20 if limits.mem_mb > 0 else 0,
               "fsize_bytes": limits.fsize_mb * 2 ** 20, "nofile": limits.nofile}
        try:
            self.proc.stdin.write(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self.wall = limits.wall_factor * limits.time_limit + limits.wall_extra
        self.deadline = time.monotonic() + self.wall + 10.0  # interpreter start-up and imports

    def read(self) -> tuple[list[dict], bool]:
        """New messages, and whether the pipe reached EOF."""
        eof = False
        while True:
            try:
                chunk = os.read(self.rd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self.buf += chunk
            if len(self.buf) > 64 * 2 ** 20:  # a flood: treat as dead
                eof = True
                break
        lines = self.buf.split(b"\n")
        self.buf = lines.pop()
        msgs = []
        for line in lines:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if isinstance(m, dict) and m.get("k") in self.ks and m["k"] not in self.done:
                msgs.append(m)
        return msgs, eof

    def stderr_tail(self) -> str:
        try:
            self.errfile.seek(0, 2)
            n = self.errfile.tell()
            self.errfile.seek(max(0, n - 2000))
            return self.errfile.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def close(self, keep: set[int]) -> None:
        _reap_tree(self.proc, keep)
        os.close(self.rd)
        self.errfile.close()
        shutil.rmtree(self.work, ignore_errors=True)


_SPARES: list[_Worker] = []
_MAX_SPARES = 4


def _spare(level: str) -> _Worker:
    """A pre-started worker of ``level`` if one is waiting and alive, else a new one."""
    while _SPARES:
        w = _SPARES.pop(0)
        if w.level == level and w.proc.poll() is None:
            return w
        w.close(_keep())
    return _Worker(level)


def _keep() -> set[int]:
    return {w.proc.pid for w in _SPARES}


def close_spares() -> None:
    """Stop the workers started ahead of time (they have run nothing)."""
    while _SPARES:
        _SPARES.pop().close(_keep())


atexit.register(close_spares)


def _row(task: Task, inst: Instance, msg: dict) -> dict[str, Any]:
    status = msg["status"]
    if status == "ok":
        try:
            r = evaluate_solution(task, inst, msg["solution"])
        except Exception as exc:  # malformed output shapes
            r = {"instance": inst.name, "feasible": False, "error": f"bad output: {exc}",
                 "cost": math.inf, "reference": inst.reference, "gap": math.inf}
    else:
        r = {"instance": inst.name, "feasible": False, "error": msg.get("error"), "cost": math.inf,
             "reference": inst.reference, "gap": math.inf}
    r["status"] = status
    r["solution"] = msg.get("solution") if status == "ok" else None
    cpu = msg.get("cpu_s", 0.0)
    r["cpu_s"] = float(cpu) if isinstance(cpu, (int, float)) else 0.0
    out = msg.get("output", "")
    r["output"] = out[-2000:] if isinstance(out, str) else ""
    return r


def run_jobs(jobs: list[tuple[Task, str, Instance]], limits: Limits, workers: int = 1,
             seed: int = 0) -> list[dict[str, Any]]:
    """Evaluate ``(task, source, instance)`` jobs, one sandboxed interpreter per program (its
    instances in turn), at most ``workers`` at a time; results come back in job order (so
    parallelism never changes a run). Each row carries ``status``, ``cpu_s`` and ``output``."""
    level = resolve_level(limits.sandbox)
    _become_subreaper()
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    groups: dict[tuple[str, str], list[int]] = {}
    for k, (task, src, _) in enumerate(jobs):
        groups.setdefault((task.name, src), []).append(k)
    pending = list(groups.values())
    live: list[_Worker] = []
    sel = selectors.DefaultSelector()

    def finish(w: _Worker, k: int, msg: dict) -> None:
        task, _, inst = jobs[k]
        results[k] = _row(task, inst, msg)
        w.done.add(k)

    try:
        while pending or live:
            while pending and len(live) < max(1, workers):
                ks = pending.pop(0)
                task, src, _ = jobs[ks[0]]
                w = _spare(level)
                w.assign(task, src, ks, jobs, limits, seed)
                live.append(w)
                sel.register(w.rd, selectors.EVENT_READ, w)
            events = sel.select(timeout=0.05)
            ready = {key.data for key, _ in events}
            now = time.monotonic()
            for w in list(live):
                ended, reason = False, None
                if w in ready:
                    msgs, eof = w.read()
                    for m in msgs:
                        if m["status"] == "start":
                            w.started, w.deadline = m["k"], time.monotonic() + w.wall
                        else:
                            finish(w, m["k"], m)
                    ended = eof or len(w.done) == len(w.ks)
                    if eof and len(w.done) < len(w.ks):
                        _quick_wait(w.proc)
                        code = w.proc.poll()
                        tail = w.stderr_tail().splitlines()[-1:] or [""]
                        reason = ("error", f"the program died (exit code {code}) {tail[0]}".strip()[:300])
                if not ended and now > w.deadline:
                    ended, reason = True, ("timeout", f"killed after {w.wall:.1f} s wall")
                if not ended:
                    continue
                sel.unregister(w.rd)
                live.remove(w)
                w.close({x.proc.pid for x in live} | _keep())
                left = [k for k in w.ks if k not in w.done]
                if left and reason:
                    # the instance under way fails; the ones not started get a fresh worker
                    cur = w.started if w.started in left else None
                    if cur is None:  # died before any instance started: nothing to retry
                        for k in left:
                            finish(w, k, {"status": reason[0], "error": reason[1]})
                    else:
                        finish(w, cur, {"status": reason[0], "error": reason[1]})
                        rest = [k for k in left if k != cur]
                        if rest:
                            pending.insert(0, rest)
    finally:
        for w in live:
            w.close(_keep())
        sel.close()
    # the next call's workers start now, while the caller asks the LLM for the next program
    while len(_SPARES) < min(max(1, workers), _MAX_SPARES):
        _SPARES.append(_Worker(level))
    return results  # type: ignore[return-value]


def _quick_wait(proc: subprocess.Popen) -> None:
    try:
        proc.wait(1.0)
    except subprocess.TimeoutExpired:
        pass
