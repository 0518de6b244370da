"""CI/mutants on a fake package built in tmp_path: a caught mutant, a surviving one (a failure, or
a warning when declared), a bad ``find`` refused before anything runs, the files left untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MODULE = '''def add(a, b):
    return a + b


def is_small(x):
    return abs(x) < 10
'''

TESTS = '''from fakepkg import add, is_small


def test_add():
    assert add(2, 3) == 5


def test_is_small():
    assert is_small(3)
'''

CAUGHT = '''[[mutant]]
name = "add-subtracts"
file = "src/fakepkg/__init__.py"
find = "return a + b"
replace = "return a - b"
why = "addition replaced by subtraction"
tests = ["tests/test_fake.py"]
'''

SURVIVOR = '''
[[mutant]]
name = "bound-loosened"
file = "src/fakepkg/__init__.py"
find = "< 10"
replace = "< 100"
why = "the bound is never tested at its edge"
tests = ["tests/test_fake.py -k small"]
'''


def _package(tmp_path: Path, toml: str) -> Path:
    pkg = tmp_path / "packages" / "fakepkg"
    (pkg / "src" / "fakepkg").mkdir(parents=True)
    (pkg / "tests").mkdir()
    (pkg / "src" / "fakepkg" / "__init__.py").write_text(MODULE)
    (pkg / "tests" / "test_fake.py").write_text(TESTS)
    (pkg / "tests" / "mutants.toml").write_text(toml)
    return pkg


def _files(pkg: Path) -> dict[str, bytes]:
    return {str(p.relative_to(pkg)): p.read_bytes() for p in sorted(pkg.rglob("*")) if p.is_file()}


def _mutants(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "CI" / "mutants"), "--packages-dir",
                           str(tmp_path / "packages"), "fakepkg"],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("expect", ["caught", "survives"])
def test_a_survivor_fails_unless_declared_and_the_package_is_untouched(tmp_path, expect):
    toml = CAUGHT + SURVIVOR + ("" if expect == "caught" else 'expect = "survives"\n')
    pkg = _package(tmp_path, toml)
    before = _files(pkg)
    r = _mutants(tmp_path)
    out = r.stdout
    assert "fakepkg add-subtracts: caught by tests/test_fake.py::test_add (" in out, out + r.stderr
    if expect == "caught":
        assert r.returncode == 1, out + r.stderr
        assert "fakepkg bound-loosened: SURVIVED (" in out
        assert out.splitlines()[-1] == "mutants: SURVIVED (expected to be caught): fakepkg bound-loosened"
    else:
        assert r.returncode == 0, out + r.stderr
        assert "fakepkg bound-loosened: survives (expected) (" in out
        assert any(line.startswith("warning: fakepkg bound-loosened survives") for line in out.splitlines())
    assert _files(pkg) == before  # byte-identical, and no __pycache__ or .pytest_cache left
    assert not list(pkg.rglob("__pycache__"))


def test_a_find_that_does_not_occur_is_refused_before_anything_runs(tmp_path):
    pkg = _package(tmp_path, CAUGHT.replace('find = "return a + b"', 'find = "return a * b"'))
    before = _files(pkg)
    r = _mutants(tmp_path)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.splitlines() == ["mutants: error: fakepkg/tests/mutants.toml: mutant "
                                     "'add-subtracts': find occurs 0 times in "
                                     "src/fakepkg/__init__.py (must be exactly once)"]
    assert _files(pkg) == before


def test_an_empty_file_warns_and_passes(tmp_path):
    _package(tmp_path, "# no mutants yet\n")
    r = _mutants(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: fakepkg: no mutants declared" in r.stdout


def test_a_run_that_writes_into_the_package_folder_is_reported(tmp_path):
    pkg = _package(tmp_path, CAUGHT)
    stray = pkg / "stray.txt"
    (pkg / "tests" / "test_fake.py").write_text(
        TESTS + f"\n\ndef test_writes_outside_its_copy():\n    open({str(stray)!r}, 'w').close()\n")
    r = _mutants(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "mutants: error: the working tree changed during the run: fakepkg/stray.txt" in r.stdout
