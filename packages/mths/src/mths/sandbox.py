"""Safe, parallel evaluation: each (program, instance) runs in a forked child process with a
CPU-time limit (RLIMIT_CPU), an address-space limit (RLIMIT_AS), a wall-clock limit after which
the parent kills it, and sockets disabled. A timeout, a crash or a raise never reaches the
caller: it becomes an infeasible result (cost inf, so the task scores -inf).

Network blocking replaces ``socket.socket`` inside the child: it stops ordinary Python code,
not a determined attacker (no namespaces, no seccomp) — run untrusted LLM output in a container.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import resource
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from .tasks import Instance, Task, evaluate_solution


@dataclass(frozen=True)
class Limits:
    time_limit: float = 0.2      # CPU seconds the solver is told (its own budget) [R]
    steps: int = 20              # main-loop iterations the solver is told [R]
    wall_factor: float = 10.0    # killed after wall_factor * time_limit + 5 s wall [R] (generous:
    #                              a shared machine must not turn a slow start into a timeout)
    mem_mb: int = 1024           # address space above the parent's, MiB [R]
    wall_extra: float = 5.0      # seconds of wall clock added to the kill deadline [R]


def _block_network() -> None:
    import socket

    def refuse(*a, **k):
        raise PermissionError("network access is disabled in the mths sandbox")

    socket.socket = refuse  # type: ignore[assignment,misc]
    socket.create_connection = refuse  # type: ignore[assignment]


def _child(conn, source: str, cls_name: str, data: dict, limits: Limits, seed: int, mem: int) -> None:
    try:
        cpu = int(math.ceil(2 * limits.time_limit + 1))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if mem > 0:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        _block_network()
        ns: dict[str, Any] = {"__name__": "mths_program"}
        exec(compile(source, "<program>", "exec"), ns)
        cls = ns.get(cls_name)
        if cls is None:
            raise NameError(f"the program defines no class {cls_name}")
        t0 = time.process_time()
        sol = cls(**data, time_limit=limits.time_limit, steps=limits.steps, seed=seed).solve()
        cpu_s = time.process_time() - t0
        sol = [[int(x) for x in r] for r in sol] if sol and hasattr(sol[0], "__len__") else [int(x) for x in sol]
        conn.send(("ok", sol, cpu_s))
    except BaseException as exc:  # everything the program does wrong is reported, not raised
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:300], 0.0))
        except Exception:
            pass
    finally:
        conn.close()
        os._exit(0)


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def run_jobs(jobs: list[tuple[Task, str, Instance]], limits: Limits, workers: int = 1,
             seed: int = 0) -> list[dict[str, Any]]:
    """Evaluate ``(task, source, instance)`` jobs with at most ``workers`` children at a time;
    results come back in job order (so parallelism never changes a run)."""
    ctx = mp.get_context("fork")
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    live: dict[Any, tuple[int, Any, float]] = {}
    wall = limits.wall_factor * limits.time_limit + limits.wall_extra
    mem = _vm_bytes() + limits.mem_mb * 2 ** 20 if limits.mem_mb > 0 else 0
    while pending or live:
        while pending and len(live) < max(1, workers):
            k = pending.pop(0)
            task, src, inst = jobs[k]
            rd, wr = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(wr, src, task.solver_class, inst.data, limits, seed, mem),
                               daemon=True)
            proc.start()
            wr.close()
            live[rd] = (k, proc, time.monotonic() + wall)
        ready = wait(list(live), timeout=0.05)
        now = time.monotonic()
        for rd in list(live):
            k, proc, deadline = live[rd]
            task, _, inst = jobs[k]
            msg = None
            if rd in ready:
                try:
                    msg = rd.recv()
                except (EOFError, OSError):
                    msg = ("error", f"the program died (exit code {proc.exitcode})", 0.0)
            elif now > deadline:
                proc.kill()
                msg = ("timeout", f"killed after {wall:.1f} s wall", 0.0)
            if msg is None:
                continue
            proc.join(1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
            rd.close()
            del live[rd]
            status, payload, cpu_s = msg
            if status == "ok":
                try:
                    r = evaluate_solution(task, inst, payload)
                except Exception as exc:  # malformed output shapes
                    r = {"instance": inst.name, "feasible": False, "error": f"bad output: {exc}",
                         "cost": math.inf, "reference": inst.reference, "gap": math.inf}
            else:
                r = {"instance": inst.name, "feasible": False, "error": payload, "cost": math.inf,
                     "reference": inst.reference, "gap": math.inf}
            r["status"] = status
            r["solution"] = payload if status == "ok" else None
            r["cpu_s"] = cpu_s
            results[k] = r
    return results  # type: ignore[return-value]
