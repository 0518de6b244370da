import argparse
import math

import pytest

from icml26_shared import UserError
from icml26_shared.cli import (
    ArgumentParser,
    finite_float,
    float_in,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
)
from icml26_shared.io import atomic_dir, atomic_write_bytes, atomic_write_text


@pytest.mark.parametrize("conv,good,want", [
    (positive_int, "3", 3), (positive_int, "1e6", 1_000_000), (nonneg_int, "0", 0),
    (finite_float, "-2.5", -2.5), (nonneg_float, "0", 0.0), (positive_float, "1e-3", 1e-3),
])
def test_converters_accept(conv, good, want):
    assert conv(good) == want


@pytest.mark.parametrize("conv,bad", [
    (positive_int, "0"), (positive_int, "-1"), (positive_int, "1.5"), (positive_int, "nan"),
    (positive_int, "inf"), (positive_int, "x"), (nonneg_int, "-1"), (finite_float, "nan"),
    (finite_float, "inf"), (finite_float, "-inf"), (nonneg_float, "-0.1"), (positive_float, "0"),
])
def test_converters_refuse(conv, bad):
    with pytest.raises(argparse.ArgumentTypeError):
        conv(bad)


def test_converter_mistake_is_one_line_user_error():
    p = ArgumentParser(prog="x")
    p.add_argument("--lr", type=positive_float)
    with pytest.raises(UserError) as e:
        p.parse_args(["--lr", "nan"])
    assert "\n" not in str(e.value) and "--lr" in str(e.value)
    assert math.isclose(p.parse_args(["--lr", "0.1"]).lr, 0.1)


def test_atomic_write_replaces_whole_and_cleans_up(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "a.txt"
    atomic_write_text(target, "old")
    assert target.read_text() == "old"
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"

    import os
    def boom(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "half")
    assert target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"]


def test_float_in_bounds():
    half_open = float_in(0, 1, low_open=True)
    assert half_open("1") == 1.0 and half_open("0.5") == 0.5
    for bad in ("0", "1.01", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"\(0, 1\]"):
            half_open(bad)
    assert float_in(0, 1)("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError):
        float_in(0, 1, high_open=True)("1")


def test_atomic_dir_builds_aside_and_swaps_in(tmp_path):
    out = tmp_path / "run"
    with atomic_dir(out) as tmp:
        assert tmp.parent == tmp_path and tmp != out and not out.exists()
        (tmp / "a.txt").write_text("1")
    assert (out / "a.txt").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    with pytest.raises(UserError, match="run already exists"):
        with atomic_dir(out):
            raise AssertionError("the block must not run")
    with atomic_dir(out, replace=True) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [".icml26-manifest.json", "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_atomic_dir_error_leaves_old_folder_and_no_temporaries(tmp_path):
    out = tmp_path / "run"
    with atomic_dir(out) as tmp:  # a run's folder: replace=True may swap it (test_json_io.py)
        (tmp / "keep.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(out, replace=True) as tmp:
            (tmp / "half.txt").write_text("x")
            raise KeyboardInterrupt
    assert sorted(p.name for p in out.iterdir()) == [".icml26-manifest.json", "keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    fresh = tmp_path / "fresh"
    with pytest.raises(UserError, match="appeared"):
        with atomic_dir(fresh, exists_error="{path} appeared meanwhile") as tmp:
            (tmp / "x").write_text("new")
            fresh.mkdir()
    assert list(fresh.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "run"]
