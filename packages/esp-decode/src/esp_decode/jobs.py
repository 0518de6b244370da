"""The reproduction's work units and the queue that two one-thread processes take them from.

``quick`` runs in two processes (one torch thread each: on a shared 2-core box a second thread
mostly spins). The second process makes SmolLM2's dev choice, then takes units from one FIFO
queue; the main process trains the tiny LM, makes its dev choice and computes its references,
appends the tiny LM's test arms as units, then takes units from the same queue. The queue holds
the big units first (SmolLM2: each regime's timed arms, then each regime's batch-1 references) and
the small ones last (one tiny-LM arm each, largest first), so the two processes end within about
one small unit of each other. Scheduling changes no figure: every unit is deterministic, and a
regime's arms stay interleaved by ``compare`` inside one unit.
"""

from __future__ import annotations

import resource
import time

STOP = ("stop", "")
_TINY: dict = {}   # per process: the tiny LM rebuilt from the state dict a unit carries


def cpu_seconds() -> float:
    """This process's user + system CPU seconds so far (imports included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def smol_units(regimes) -> list[tuple]:
    return [("arms", r) for r in regimes] + [("refs", r) for r in regimes]


def tiny_units(prep: dict) -> list[tuple]:
    """One unit per tiny-LM test arm (largest first: the ESP arms carry the biggest calls)."""
    shared = {k: prep[k] for k in ("key", "state", "model_args", "prompts", "refs", "tokens", "batch")}
    order = sorted(prep["arms"], key=lambda a: (not a.startswith("esp"), a == "esp-chain"))
    return [("tiny", arm, {**shared, "kw": prep["arms"][arm]}) for arm in order]


def run_unit(unit: tuple, c_smol: dict | None, seed: int, chosen=None):
    kind, name = unit[0], unit[1]
    if kind == "arms":
        from .smol import arms_job

        return arms_job(c_smol, seed, name, chosen)
    if kind == "refs":
        from .smol import refs_job

        return refs_job(c_smol, name)
    if kind == "tiny":
        return tiny_arm_job(unit[2])
    raise ValueError(f"unknown unit {unit[:2]}")


def tiny_arm_job(p: dict) -> dict:
    """One tiny-LM arm on every test prompt (the model rebuilt from the unit's state dict)."""
    from .experiments import run_drafter
    from .tiny import make_model

    if _TINY.get("key") != p["key"]:
        model = make_model(**p["model_args"])
        model.load_state_dict(p["state"])
        _TINY.update(key=p["key"], model=model.eval())
    kw = dict(p["kw"])
    name = kw.pop("name")
    return run_drafter(_TINY["model"], p["prompts"], name, p["tokens"], p["refs"], p["batch"], None, **kw)


def drain(tasks, c_smol: dict | None, seed: int, chosen=None) -> tuple[dict, list]:
    """Take units from ``tasks`` until ``STOP``: ({unit key: part}, [(key, CPU seconds)])."""
    parts, log = {}, []
    while True:
        unit = tuple(tasks.get())
        if unit[:2] == STOP:
            return parts, log
        t0 = time.process_time()
        parts[unit[:2]] = run_unit(unit, c_smol, seed, chosen)
        log.append((f"{unit[0]}:{unit[1]}", round(time.process_time() - t0, 1)))


def worker(c_smol: dict, seed: int, tasks, news) -> dict:
    """The second process: SmolLM2's dev choice (put on ``news`` at once, for the main process),
    then units from ``tasks`` until ``STOP``."""
    from .smol import dev_job

    t0 = time.process_time()
    dev = dev_job(c_smol, seed)
    log = [("smollm2 load + dev", round(time.process_time() - t0, 1))]
    news.put(dev)
    parts, more = drain(tasks, c_smol, seed, dev["chosen"])
    return {"parts": parts, "log": log + more, "cpu_s": cpu_seconds()}


def stop(tasks, n: int = 2) -> None:
    """Empty ``tasks`` and leave ``n`` STOPs (on an error elsewhere: no process starts more work)."""
    import queue

    try:
        while True:
            tasks.get_nowait()
    except (queue.Empty, OSError, EOFError):
        pass
    try:
        for _ in range(n):
            tasks.put(STOP)
    except (OSError, EOFError):
        return
