"""The sandboxed worker: a fresh interpreter (``python -I …/mths/_worker.py FD PATH``) that runs
ONE LLM-written program on all its instances. Started by :mod:`mths.sandbox` through
``subprocess`` with an allow-listed environment, a temporary cwd and its own session; never
imported by mths.

It imports NumPy and the component library, then waits for its job (pickle, written by mths) on
stdin — so mths can start it ahead of time — sets its resource limits, installs an audit hook
(PEP 578) and only then compiles the program. Results
go out as JSON lines on file descriptor FD (never pickle: mths must not unpickle what a program
could forge); the program's prints are captured per instance and sent with the result.

The audit hook refuses sockets (socket objects are never created), subprocesses / exec / fork / spawn, signals to other processes,
ctypes, resource-limit changes, object walks (gc), reads of /proc and /sys, and any write, delete,
rename or mode change outside the work folder. It is a guard against what ordinary Python code
does, not a security boundary by itself: the ``unshare`` and ``bwrap`` levels add namespaces.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import sys
import time

# Libraries may import socket, subprocess or ctypes (OR-Tools does): what they *do* is refused
# by the events below. Two modules are refused at import: _posixsubprocess (its fork_exec raises
# no audit event; the worker replaces it before the hook, and a fresh import would bring it
# back) and _posixshmem (shared memory outside the work folder).
_BLOCKED_MODULES = frozenset({"_posixsubprocess", "_posixshmem"})
_ALWAYS = ("socket.", "ctypes.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
           "os.forkpty", "os.system", "os.kill", "os.killpg", "os.startfile", "os.setuid", "os.setgid",
           "signal.pthread_kill", "resource.setrlimit", "resource.prlimit", "gc.get_objects",
           "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile", "pty.spawn",
           "mmap.__new__", "_posixsubprocess.", "winreg.", "msvcrt.", "sys.remote_exec")
_FS_EVENTS = ("os.remove", "os.rmdir", "os.rename", "os.replace", "os.truncate", "os.chmod",
              "os.chown", "os.chflags", "os.link", "os.symlink", "os.mkdir", "os.utime", "os.mkfifo",
              "os.mknod", "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree",
              "os.setxattr", "os.removexattr", "os.chdir", "os.chroot")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "gi_code"})


def make_hook(work: str):
    root = os.path.realpath(work)

    def inside(p) -> bool:
        try:
            p = os.fsdecode(p)
        except TypeError:
            return True  # a file descriptor: already open, handled by the limits
        q = os.path.realpath(p if os.path.isabs(p) else os.path.join(root, p))
        return q == root or q.startswith(root + os.sep)

    def private(p) -> bool:
        try:
            q = os.path.realpath(os.fsdecode(p))
        except TypeError:
            return False
        return q.startswith(("/proc", "/sys"))

    def hook(event: str, args: tuple) -> None:
        if event.startswith(_ALWAYS):
            raise PermissionError(f"mths sandbox: {event} is not allowed")
        if event == "import" and args and str(args[0]).split(".")[0] in _BLOCKED_MODULES:
            raise PermissionError(f"mths sandbox: import {args[0]} is not allowed")
        if event == "open" and args:
            path, mode, flags = (list(args) + [None, None, 0])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if private(path) or (writing and not inside(path)):
                raise PermissionError(f"mths sandbox: open {path!r} is not allowed")
        elif event in ("os.listdir", "os.scandir") and args and args[0] is not None and private(args[0]):
            raise PermissionError(f"mths sandbox: {event} {args[0]!r} is not allowed")
        elif event.startswith(_FS_EVENTS):
            for a in args:
                if isinstance(a, (str, bytes, os.PathLike)) and not inside(a):
                    raise PermissionError(f"mths sandbox: {event} outside the work folder is not allowed")
        elif event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRS:
            raise PermissionError(f"mths sandbox: .{args[1]} is not allowed")

    return hook


def _limits(job: dict) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + job["cpu_budget"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if job["mem_bytes"] > 0:
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vm + job["mem_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (job["fsize_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (job["nofile"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _plain(sol):
    if sol is not None and len(sol) and hasattr(sol[0], "__len__"):
        return [[int(x) for x in r] for r in sol]
    return [int(x) for x in sol]


def main() -> None:
    fd = int(sys.argv[1])
    sys.path[:] = [p for p in json.loads(sys.argv[2]) if p and os.path.isabs(p)]  # the parent's: same mths

    import numpy  # noqa: F401  (what programs use: loaded while the worker waits for its job)

    import mths.components  # noqa: F401

    try:  # a pre-started worker waits here; EOF (mths gone, or the spare discarded) ends it
        job = pickle.load(sys.stdin.buffer)
    except (EOFError, pickle.UnpicklingError, OSError):
        return
    sys.stdin.close()

    def send(obj) -> None:
        os.write(fd, (json.dumps(obj) + "\n").encode())

    _limits(job)
    import _posixsubprocess

    def no_exec(*a, **k):
        raise PermissionError("mths sandbox: starting a process is not allowed")

    _posixsubprocess.fork_exec = no_exec  # the cached module keeps the refusal
    sys.addaudithook(make_hook(os.getcwd()))
    real_out, real_err = sys.stdout, sys.stderr
    buf = io.StringIO()
    sys.stdout = sys.stderr = buf
    ns = {"__name__": "mths_program"}
    try:
        exec(compile(job["source"], "<program>", "exec"), ns)
        cls = ns.get(job["cls"])
        if cls is None:
            raise NameError(f"the program defines no class {job['cls']}")
    except BaseException as exc:  # everything the program does wrong is reported, not raised
        msg = f"{type(exc).__name__}: {exc}"[:300]
        for k, _ in job["instances"]:
            send({"k": k, "status": "error", "error": msg, "cpu_s": 0.0, "output": buf.getvalue()[-2000:]})
        return
    for k, data in job["instances"]:
        buf.seek(0)
        buf.truncate()
        send({"k": k, "status": "start"})
        try:
            t0 = time.process_time()
            sol = cls(**data, time_limit=job["time_limit"], steps=job["steps"], seed=job["seed"]).solve()
            cpu_s = time.process_time() - t0
            row = {"k": k, "status": "ok", "solution": _plain(sol), "cpu_s": cpu_s}
        except BaseException as exc:
            row = {"k": k, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:300], "cpu_s": 0.0}
        row["output"] = buf.getvalue()[-2000:]
        send(row)
    sys.stdout, sys.stderr = real_out, real_err


if __name__ == "__main__":
    main()
