"""Hostile LLM-written programs (issue 47's review, plus a gc walk and a /proc read) at every
sandbox level available here: none may see the key, write or delete outside its work folder,
reach a loopback listener, start a process, signal mths, outlive its job, or break ``--json``."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest
from mths.cli import main
from mths.sandbox import LEVELS, Limits, _reap_tree, available, close_spares, resolve_level

CANARY = "sk-canary-0123456789abcdef"
HEAD = ("import os, sys, time\n"
        "class TSPSolver:\n"
        "    def __init__(self, distance_matrix, time_limit, steps, seed, **kw):\n"
        "        self.n = len(distance_matrix)\n"
        "    def solve(self):\n")
OK = "        return list(range(self.n))\n"


def _body(lines: str) -> str:
    return HEAD + "".join("        " + ln + "\n" for ln in lines.strip().splitlines()) + OK


PROGRAMS = {  # name -> (source template, what must hold); {out}/{victim}/{port} are filled per test
    "env-key": _body("k = os.environ.get('OPENAI_API_KEY') or os.environ.get('MTHS_TEST_TOKEN')\n"
                     "print('KEY', k, dict(os.environ))"),
    "write-outside": _body("open({out!r}, 'w').write(os.environ.get('OPENAI_API_KEY', 'none'))"),
    "write-cwd": _body("open('mine.txt', 'w').write('x' * 100)\nprint('CWD', os.getcwd())"),
    "delete": _body("os.remove({victim!r})"),
    "socket": _body("import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))\n"
                    "s.send(b'KEY ' + os.environ.get('OPENAI_API_KEY', 'none').encode())"),
    "subprocess": _body("import subprocess\nsubprocess.run(['touch', {out!r}])"),
    "fork-setsid": _body("pid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(120)\n    os._exit(0)"),
    "kill-parent": _body("import signal\nos.kill(os.getppid(), signal.SIGTERM)"),
    "kill-probe": HEAD + "        os.kill(os.getppid(), 0)\n        return [0] * self.n\n",
    "print": _body("print('hello from solve'); sys.stdout.write('{{not json')"),
    "loop": HEAD + "        while True: pass\n",
    "sleep": HEAD + "        time.sleep(600)\n",
    "memory": _body("b = bytearray(8 * 2 ** 30)\nb[::4096] = b'x' * len(b[::4096])"),
    "syntax": HEAD + "        return [ for\n",
    "raise-cpu": _body("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10 ** 6, 10 ** 6))\n"
                       "while True: pass"),
    "gc-key": _body("import gc\nfound = [o for o in gc.get_objects() if isinstance(o, str) and 'canary' in o]\n"
                    "print('FOUND', found)"),
    "proc-environ": _body("print('ENV', open('/proc/%d/environ' % os.getppid(), 'rb').read())"),
    "fork-exec": _body("import _posixsubprocess\n_posixsubprocess.fork_exec([b'/usr/bin/touch', {out!r}.encode()])"),
    "reimport": _body("del sys.modules['_posixsubprocess']\nimport _posixsubprocess"),
    "ctypes": _body("import ctypes\nctypes.CDLL(None).system(('touch ' + {out!r}).encode())"),
}
FAILS = {"write-outside", "delete", "socket", "subprocess", "fork-setsid", "kill-parent", "kill-probe",
         "loop", "sleep", "memory", "syntax", "raise-cpu", "gc-key", "proc-environ", "fork-exec", "reimport",
         "ctypes"}
LIM = Limits(0.2, 1, wall_factor=2.0, wall_extra=1.0)
LEVELS_HERE = [pytest.param(lv, marks=pytest.mark.skipif(not available(lv), reason=f"{lv} is not available here"))
               for lv in LEVELS]


@pytest.fixture
def hostile(tmp_path, monkeypatch, make_tsp):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("MTHS_TEST_TOKEN", CANARY)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "stolen.txt"
    got: list[bytes] = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    stop = threading.Event()

    def listen():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            got.append(c.recv(1000) or b"(connected)")
            c.close()

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    yield {"victim": victim, "out": out, "port": srv.getsockname()[1], "got": got, "inst": make_tsp(8)}
    stop.set()
    th.join()
    srv.close()


def _leftovers() -> list[int]:
    """Processes whose environment marks them as an mths job (HOME=…/mths-job-…) and that are
    ours: descendants of this process, or orphans adopted by init (another mths running on the
    machine has its own)."""
    from mths.sandbox import _ppids

    table = _ppids()

    def ours(pid: int) -> bool:
        if table[pid][0] == 1:  # adopted by init
            return True
        seen = set()
        while pid in table and pid not in seen:
            seen.add(pid)
            pid = table[pid][0]
            if pid == os.getpid():
                return True
        return False

    pids = []
    for pid in table:
        if pid != os.getpid() and ours(pid):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if b"mths-job-" in f.read():
                        pids.append(pid)
            except OSError:
                pass
    return pids


@pytest.mark.parametrize("level", LEVELS_HERE)
def test_hostile_programs_are_contained(hostile, level):
    lim = Limits(LIM.time_limit, LIM.steps, LIM.wall_factor, LIM.mem_mb, LIM.wall_extra, sandbox=level)
    names = list(PROGRAMS)
    srcs = {n: PROGRAMS[n].format(out=str(hostile["out"]), victim=str(hostile["victim"]), port=hostile["port"])
            for n in names}
    t0 = time.monotonic()
    from mths.sandbox import run_jobs
    from mths.tasks import get_task

    rows = run_jobs([(get_task("tsp"), srcs[n], hostile["inst"]) for n in names], lim, workers=2)
    wall = time.monotonic() - t0
    by = dict(zip(names, rows))
    for n in names:
        r = by[n]
        assert r["feasible"] == (n not in FAILS), (n, r)
        assert CANARY not in json.dumps(r), n
    assert by["loop"]["status"] in ("timeout", "error") and by["sleep"]["status"] == "timeout"
    assert by["memory"]["status"] == "error" and "MemoryError" in by["memory"]["error"]
    assert "hello from solve" in by["print"]["output"]
    cwd = by["write-cwd"]["output"].split("CWD", 1)[1].strip()
    assert cwd and not os.path.exists(cwd)  # the work folder is removed after the job
    assert hostile["victim"].read_text() == "keep me" and not hostile["out"].exists()
    time.sleep(0.3)
    assert hostile["got"] == []
    close_spares()  # the workers started ahead for the next call (they have run nothing)
    assert _leftovers() == []
    assert wall < 60


def test_eval_json_holds_the_print_and_never_the_key(hostile, tmp_path, capsys):
    folder = tmp_path / "inst"
    folder.mkdir()
    assert main(["gen-instances", "--task", "tsp", "--n", "8", "--count", "2", "--seed", "0",
                 "--out", str(folder / "tsp")]) == 0
    capsys.readouterr()
    for name in ("print", "env-key", "kill-parent"):
        prog = tmp_path / f"{name}.py"
        prog.write_text(PROGRAMS[name].format(out="", victim="", port=0))
        assert main(["eval", str(prog), "--task", "tsp", "--instances", str(folder / "tsp"), "--time-limit", "0.2",
                     "--steps", "1", "--sandbox", "process", "--json"]) == 0
        text = capsys.readouterr().out
        assert CANARY not in text
        res = json.loads(text)
        assert res["sandbox"] == "process" and len(res["instances"]) == 2
        if name == "print":
            assert all("hello from solve" in r["output"] for r in res["instances"])
            assert res["mean_gap"] is not None


def test_a_missing_level_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    import mths.sandbox as sb

    monkeypatch.setattr(sb, "available", lambda lv: lv == "process")
    assert resolve_level("auto") == "process"
    prog = tmp_path / "p.py"
    prog.write_text(PROGRAMS["print"])
    assert main(["eval", str(prog), "--task", "tsp", "--instances", str(tmp_path), "--sandbox", "bwrap"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bwrap" in err[0]


def test_a_setsid_grandchild_is_killed_with_its_job():
    """The reaper itself, on a tree the audit hook would have refused to create."""
    from mths.sandbox import _become_subreaper

    _become_subreaper()
    marker = f"mths-reap-{os.getpid()}"
    # the job's process exits at once: its setsid grandchild is reparented to us (subreaper)
    env = {"PATH": os.defpath, "MTHS_SANDBOX_WORKER": "1"}  # what a worker's descendants inherit
    proc = subprocess.Popen(["sh", "-c", f"setsid sh -c 'sleep 60; : {marker}' & exit 0"],
                            start_new_session=True, env=env)
    bystander = subprocess.Popen(["sleep", "60"])  # a child of the caller's own: left alone
    time.sleep(0.5)
    _reap_tree(proc, set())

    def alive():
        out = []
        for name in os.listdir("/proc"):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(name)
            except OSError:
                pass
        return out

    deadline = time.monotonic() + 1.0
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive() == []
    assert bystander.poll() is None
    bystander.kill()
    bystander.wait()


def test_a_library_that_imports_socket_and_subprocess_still_runs(make_tsp):
    """OR-Tools imports socket and subprocess: the sandbox refuses what they do, not the import."""
    from mths import baselines
    from mths.pipeline import evaluate

    (row,) = evaluate("tsp", baselines.programs("tsp")["ortools-gls"], [make_tsp(10)], Limits(0.3, 5, sandbox="process"))
    assert row["feasible"], row
