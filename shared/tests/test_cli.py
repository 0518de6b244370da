import json
import os
import subprocess
import sys

import pytest

from icml26_shared import registry
from icml26_shared.cli import main


def test_discover_finds_the_demo_entry_point(demo_package):
    methods = registry.discover()
    assert demo_package in methods
    assert methods[demo_package].paper.title == "A Demo Paper"


def test_list(demo_package, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "icml26-demo 0.1.0" in out and "demo beats baseline" in out


def test_reproduce_writes_results_and_report(demo_package, tmp_path, capsys):
    assert main(["reproduce", demo_package, "--scale", "smoke", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / demo_package / "results.json").read_text())
    # smoke proves the code path, not the claim: the figure stays, the verdict is withheld
    claim = data["claims"][0]
    assert data["status"] == "ok" and claim["held"] is None and claim["evaluated"] is False
    assert claim["ours"] == 2.25 and "smoke" in claim["note"]
    assert data["env"]["packages"]["icml26-shared"]
    report = (tmp_path / "REPORT.md").read_text()
    assert "demo beats baseline" in report and "not evaluated" in report
    assert main(["report", str(tmp_path)]) == 0


def test_quick_claims_checks_and_curves_in_the_report(demo_package, tmp_path, capsys):
    assert main(["reproduce", demo_package, "--scale", "quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / demo_package / "results.json").read_text())
    assert data["schema_version"] == 2
    assert [c["held"] for c in data["claims"]] == [True, True]
    assert [c["kind"] for c in data["claims"]] == ["claim", "check"]
    report = (tmp_path / "REPORT.md").read_text()
    overview = next(line for line in report.splitlines() if line.startswith("| icml26-demo |"))
    # the check never enters the claim counts: 1 held, 0 not held, 0 not evaluated
    assert overview.split(" | ")[2:5] == ["1", "0", "0"] and "1/1 ok" in overview
    assert "## Checks" in report and "demo stores 4 bytes a token" in report.split("## Checks")[1]
    assert "demo stores 4 bytes a token" not in report.split("## Checks")[0]
    # curves: drawn per experiment, flagged in the report and on the terminal
    assert (tmp_path / demo_package / "curves-toy.png").is_file()
    flagged = report.split("## Learning curves to read before comparing")[1]
    assert "| demo | score | dev | 0 | still improving |" in flagged
    assert "| base | score | dev | 0 | stopped early |" in flagged
    assert "still improving" in out and "stopped early" in out
    (tmp_path / demo_package / "curves-toy.png").unlink()
    assert main(["report", str(tmp_path)]) == 0  # a re-render draws the curves again
    assert (tmp_path / demo_package / "curves-toy.png").is_file()


def test_failed_package_is_reported_and_others_run(demo_package, tmp_path):
    assert main(["reproduce", demo_package, "--scale", "full", "--out", str(tmp_path)]) == 1
    data = json.loads((tmp_path / demo_package / "results.json").read_text())
    assert data["status"] == "failed" and "boom" in data["error"]
    assert "RuntimeError" in (tmp_path / demo_package / "error.txt").read_text()


@pytest.mark.parametrize("argv,needle", [
    (["reproduce", "no-such-package", "--scale", "smoke"], "unknown package"),
    (["reproduce", "--scale", "huge"], "unknown scale"),
    (["report", "/nonexistent/dir"], "not a directory"),
])
def test_user_errors_exit_2_with_one_line(demo_package, argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and err[0].startswith("icml26: error:")


def test_out_that_is_a_file_exits_2(demo_package, tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("keep me")
    assert main(["reproduce", demo_package, "--scale", "smoke", "--out", str(f)]) == 2
    assert f.read_text() == "keep me"
    assert main(["reproduce", demo_package, "--scale", "smoke", "--out", str(f / "sub")]) == 2


def test_console_script_help_is_light():
    code = ("import sys; from icml26_shared.cli import main\n"
            "try: main(['--help'])\nexcept SystemExit: pass\n"
            "print([m for m in ('torch', 'jax', 'matplotlib', 'rich') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_env_command(capsys):
    assert main(["env"]) == 0
    assert "icml26-shared" in capsys.readouterr().out


def test_refused_reproduction_leaves_no_folder(demo_package, tmp_path, monkeypatch):
    from icml26_shared import UserError, registry, runner

    desc = registry.get(demo_package)

    def refuse(scale, out_dir, seed):
        raise UserError("full needs a GPU")

    monkeypatch.setattr(type(desc), "load_reproduce", lambda self: refuse)
    with pytest.raises(UserError):
        runner.run_one(desc, "full", tmp_path, 0)
    assert not (tmp_path / demo_package).exists()


def test_closed_pipe_exits_quietly():
    """``prog … | head``: the reader closes the pipe; no traceback, the SIGPIPE status 141."""
    script = ("import sys\nfrom icml26_shared import cli_entry\n"
              "@cli_entry('demo')\ndef main():\n    for i in range(200000):\n        print(i)\n"
              "    return 0\nsys.exit(main())\n")
    proc = subprocess.run(f'"{sys.executable}" -c "$SCRIPT" | head -n 2', shell=True,
                          capture_output=True, text=True, env={**os.environ, "SCRIPT": script},
                          timeout=60)
    assert proc.stdout.split() == ["0", "1"]
    assert proc.stderr == "", proc.stderr


@pytest.fixture()
def broken_package(demo_package, tmp_path, monkeypatch):
    """A second registered package whose module raises on import."""
    site = tmp_path / "brokensite"
    site.mkdir()
    (site / "icml26_broken.py").write_text("raise ImportError('missing dependency zzz')\n")
    info = site / "icml26_broken-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: icml26-broken\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text("[icml26.methods]\nicml26-broken = icml26_broken:DESCRIPTOR\n")
    monkeypatch.syspath_prepend(str(site))
    yield "icml26-broken"
    sys.modules.pop("icml26_broken", None)


def test_a_broken_entry_point_does_not_hide_the_others(broken_package, demo_package, tmp_path, capsys):
    methods = registry.discover()
    assert methods[demo_package].load_error is None
    bad = methods[broken_package]
    assert bad.version == "0.3.0" and "missing dependency zzz" in bad.load_error
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "icml26-demo 0.1.0" in out and "icml26-broken 0.3.0 — BROKEN" in out
    # reproduce everything: the demo still runs, the broken one is a failed row, exit 1
    assert main(["reproduce", broken_package, demo_package, "--scale", "smoke", "--out", str(tmp_path / "r")]) == 1
    ok = json.loads((tmp_path / "r" / demo_package / "results.json").read_text())
    failed = json.loads((tmp_path / "r" / broken_package / "results.json").read_text())
    assert ok["status"] == "ok"
    assert failed["status"] == "failed" and "missing dependency zzz" in failed["error"]


def test_record_refuses_before_running_when_it_has_nowhere_to_write(demo_package, tmp_path, capsys):
    out = tmp_path / "run"
    # the demo package is not a source checkout (as for a wheel): nothing runs, nothing is written
    assert main(["reproduce", demo_package, "--scale", "quick", "--record", "--out", str(out)]) == 2
    assert "installed from a wheel" in capsys.readouterr().err and not out.exists()
    assert main(["reproduce", demo_package, "--scale", "smoke", "--record", "--out", str(out)]) == 2
    assert "--scale quick or --scale long" in capsys.readouterr().err


def test_long_runs_only_where_a_package_offers_it_and_records_beside_quick(
        demo_package, tmp_path, capsys, monkeypatch):
    from dataclasses import replace

    from icml26_shared import runner

    # the demo offers no long scale: one named package is refused in one line, nothing written
    out = tmp_path / "run"
    assert main(["reproduce", demo_package, "--scale", "long", "--out", str(out)]) == 2
    assert "has no long scale" in capsys.readouterr().err and not out.exists()
    # among several packages it is a skipped row
    base = registry.discover()[demo_package]
    res = runner.run_many([base], "long", tmp_path / "many", log=lambda line: None)
    assert res[0].status == "skipped" and "no long scale" in res[0].error
    # a package that offers it runs it, and --record writes results/long.json beside quick.json
    offering = replace(base, scales={"long": "an hour on CPU"})
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "icml26-demo"\nversion = "0.1.0"\n')
    monkeypatch.setattr(runner, "package_root", lambda desc: root)
    res = runner.run_many([offering], "long", tmp_path / "long", record=True, log=lambda line: None)
    assert res[0].status == "ok" and res[0].scale == "long"
    assert json.loads((root / "results" / "long.json").read_text())["scale"] == "long"
    assert not (root / "results" / "quick.json").exists()
    runner.run_many([offering], "quick", tmp_path / "quick", record=True, log=lambda line: None)
    assert json.loads((root / "results" / "quick.json").read_text())["scale"] == "quick"
