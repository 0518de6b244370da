"""The one JSON writer (to_jsonable / dumps_json / write_json / print_json) and atomic_dir's
manifest and replace rule."""

import enum
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from icml26_shared import Results, UserError
from icml26_shared.io import (
    MANIFEST,
    add_to_manifest,
    atomic_dir,
    dumps_json,
    is_run_folder,
    print_json,
    to_jsonable,
    write_json,
)


def strict_loads(text: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


@dataclass
class Point:
    x: float
    tags: tuple[str, ...]


class Color(enum.Enum):
    RED = "red"


def test_to_jsonable_maps_what_numerical_code_produces():
    obj = {
        "nan": math.nan, "inf": math.inf, "-inf": -math.inf, "ok": 1.5, "i": 3, "b": True,
        "np_f64": np.float64(0.25), "np_f32_nan": np.float32("nan"), "np_i": np.int64(7),
        "np_b": np.bool_(False), "arr": np.array([[1.0, np.nan], [np.inf, 2.0]]),
        "arr0": np.array(4), "tuple": (1, (2, 3)), "path": Path("a/b.txt"),
        "dc": Point(math.nan, ("t",)), "enum": Color.RED, "set": {3, 1, 2}, "none": None,
        1: "int key", np.int64(2): "np key", None: "none key", False: "bool key",
    }
    got = to_jsonable(obj)
    assert got == {
        "nan": None, "inf": None, "-inf": None, "ok": 1.5, "i": 3, "b": True,
        "np_f64": 0.25, "np_f32_nan": None, "np_i": 7, "np_b": False,
        "arr": [[1.0, None], [None, 2.0]], "arr0": 4, "tuple": [1, [2, 3]], "path": "a/b.txt",
        "dc": {"x": None, "tags": ["t"]}, "enum": "red", "set": [1, 2, 3], "none": None,
        "1": "int key", "2": "np key", "null": "none key", "false": "bool key",
    }
    assert type(got["np_f64"]) is float and type(got["np_i"]) is int and type(got["np_b"]) is bool
    assert json.loads(dumps_json(obj)) == got  # survives a round trip unchanged


def test_to_jsonable_default_and_unknown():
    class Odd:
        pass
    assert to_jsonable({"x": Odd()}, default=lambda o: "odd") == {"x": "odd"}
    assert to_jsonable([Odd()], default=lambda o: [math.nan]) == [[None]]
    with pytest.raises(TypeError):
        dumps_json({"x": Odd()})
    assert dumps_json({"x": Odd()}, default=str).startswith('{\n  "x": "<')


@pytest.mark.parametrize("kw", [{}, {"indent": 1}, {"indent": None}, {"sort_keys": True},
                                {"indent": 2, "sort_keys": True},
                                {"indent": None, "separators": (",", ":")}])
def test_dumps_json_is_byte_identical_to_json_dumps_without_nan(kw):
    obj = {"b": [1, 2.5, "x", None, True], "a": {"z": 1e-12, "y": [], "x": {}}, "é": "ü"}
    want = json.dumps(obj, **{"indent": 2, **kw})
    assert dumps_json(obj, **kw) == want


def test_sort_keys_orders_like_json_dumps():
    obj = {10: "a", 2: {"b": 1, "a": [{3: 0, 1: 0}]}, 1.5: None}
    for indent in (None, 1):
        assert dumps_json(obj, indent=indent, sort_keys=True) == json.dumps(obj, indent=indent,
                                                                              sort_keys=True)
    assert list(to_jsonable(obj, sort_keys=True)) == ["1.5", "2", "10"]
    assert json.loads(dumps_json({"b": 1, 3: 2}, sort_keys=True)) == {"3": 2, "b": 1}  # mixed keys


def test_add_to_manifest(tmp_path):
    out = tmp_path / "run"
    with atomic_dir(out, writer="pkg 1") as tmp:
        (tmp / "a.txt").write_text("1")
    (out / "ckpt.pt").write_bytes(b"later")
    assert is_run_folder(out) == (False, "ckpt.pt")
    add_to_manifest(out, out / "ckpt.pt")
    assert is_run_folder(out) == (True, None)
    assert _manifest(out)["files"] == ["a.txt", "ckpt.pt"] and _manifest(out)["writer"] == "pkg 1"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "c.pt").write_text("x")
    (fresh / "notes.txt").write_text("mine")
    add_to_manifest(fresh, "c.pt", writer="pkg 2")
    assert is_run_folder(fresh) == (False, "notes.txt")


def test_dumps_json_never_writes_nan_or_infinity():
    text = dumps_json({"a": [math.nan, math.inf, -math.inf, np.float64("nan")]}, indent=None)
    assert text == '{"a": [null, null, null, null]}'
    strict_loads(text)


def test_write_json_is_atomic_with_trailing_newline(tmp_path, monkeypatch):
    p = write_json(tmp_path / "sub" / "m.json", {"v": math.nan}, indent=1)
    assert p == tmp_path / "sub" / "m.json"
    assert p.read_text() == '{\n "v": null\n}\n'
    import os

    def boom(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_json(p, {"v": 2})
    assert p.read_text() == '{\n "v": null\n}\n'
    assert [q.name for q in p.parent.iterdir()] == ["m.json"]


def test_print_json(capsys):
    print_json({"acc": np.float32(0.5), "loss": math.nan})
    out = capsys.readouterr().out
    assert out == '{\n  "acc": 0.5,\n  "loss": null\n}\n'
    strict_loads(out)


def test_results_to_json_goes_through_the_strict_writer(tmp_path):
    res = Results(package="p", version="1", scale="smoke", seed=0)
    res.add("e", "m", "acc", math.nan)
    res.add("e", "m", "loss", 0.25).extra.update({1: math.inf, "arr": np.zeros(2)})
    d = res.to_dict()
    assert d["rows"][0]["value"] is None and d["rows"][1]["extra"] == {"1": None, "arr": [0.0, 0.0]}
    path = res.to_json(tmp_path / "r" / "results.json")
    text = path.read_text()
    assert text.endswith("}\n") and "NaN" not in text and "Infinity" not in text
    assert strict_loads(text) == d
    back = Results.from_json(path)
    assert math.isnan(back.rows[0].value) and back.rows[1].value == 0.25


# ---------------------------------------------------------------------------- atomic_dir / manifest


def _manifest(folder: Path) -> dict:
    return strict_loads((folder / MANIFEST).read_text())


def test_atomic_dir_writes_a_manifest_of_every_file(tmp_path):
    out = tmp_path / "run"
    with atomic_dir(out, writer="pkg 1.2.3") as tmp:
        (tmp / "a.txt").write_text("1")
        (tmp / "sub" / "deep").mkdir(parents=True)
        (tmp / "sub" / "deep" / "b.bin").write_bytes(b"2")
        (tmp / "empty").mkdir()
    m = _manifest(out)
    assert m["writer"] == "pkg 1.2.3"
    assert m["files"] == ["a.txt", "sub/deep/b.bin"]
    assert is_run_folder(out) == (True, None)
    with atomic_dir(tmp_path / "plain") as tmp:
        (tmp / "x").write_text("")
    assert _manifest(tmp_path / "plain")["writer"] is None


def test_is_run_folder(tmp_path):
    assert is_run_folder(tmp_path / "missing") == (True, None)
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    assert is_run_folder(empty) == (True, None)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    assert is_run_folder(user) == (False, "notes.txt")
    (tmp_path / "file").write_text("x")
    assert is_run_folder(tmp_path / "file") == (False, ".")
    run = tmp_path / "run"
    with atomic_dir(run) as tmp:
        (tmp / "a.txt").write_text("1")
    (run / "z").mkdir()
    (run / "z" / "extra.txt").write_text("added later")
    assert is_run_folder(run) == (False, "z/extra.txt")
    (run / MANIFEST).write_text("{not json")
    assert is_run_folder(run) == (False, "a.txt")


def test_replace_swaps_a_run_folder(tmp_path):
    out = tmp_path / "run"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    with atomic_dir(out, replace=True) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "b.txt"]
    assert _manifest(out)["files"] == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_dir(empty, replace=True) as tmp:  # an empty folder is fine
        (tmp / "c.txt").write_text("3")
    assert (empty / "c.txt").read_text() == "3"


@pytest.mark.parametrize("manifest", [False, True])
def test_replace_refuses_a_folder_holding_user_files(tmp_path, manifest):
    out = tmp_path / "out"
    if manifest:
        with atomic_dir(out) as tmp:
            (tmp / "a.txt").write_text("1")
    else:
        out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    ran = []
    with pytest.raises(UserError) as e:
        with atomic_dir(out, replace=True):
            ran.append(1)
    msg = str(e.value)
    assert "\n" not in msg and msg == (f"{out} holds files that no run wrote (notes.txt); "
                                       "move them or choose another folder")
    assert not ran
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_refuses_a_user_file_that_appears_meanwhile(tmp_path):
    out = tmp_path / "run"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    with pytest.raises(UserError, match="no run wrote"):
        with atomic_dir(out, replace=True) as tmp:
            (tmp / "b.txt").write_text("2")
            (out / "notes.txt").write_text("mine")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "a.txt", "notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_replace_refuses_a_file(tmp_path):
    f = tmp_path / "out"
    f.write_text("mine")
    with pytest.raises(UserError, match="is a file"):
        with atomic_dir(f, replace=True):
            pass
    assert f.read_text() == "mine"


def test_contract_kit_strict_parser_refuses_nan():
    from icml26_shared.testing import strict_json_loads

    assert strict_json_loads('{"a": null, "b": [1.5]}') == {"a": None, "b": [1.5]}
    for bad in ('{"a": NaN}', "[Infinity]", "-Infinity"):
        with pytest.raises(ValueError, match="non-standard"):
            strict_json_loads(bad)
