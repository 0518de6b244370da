"""CLI: the verbs work, and every user mistake is one line on stderr, exit 2, nothing written."""

import json

import pytest
from nbcg.cli import main


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" if not isinstance(x, str) else x + "\n" for x in lines))
    return path


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nbcg: error:"), err
    assert "Traceback" not in err[0] and "usage" not in err[0]
    return err[0]


def test_synth_then_eval_perfect(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    assert main(["synth", "--n", "60", "--out", str(data)]) == 0
    recs = [json.loads(x) for x in data.read_text().splitlines()]
    assert len(recs) == 60 and all(set(r) == {"id", "text", "labels"} for r in recs)
    capsys.readouterr()
    assert main(["eval", str(data), str(data), "--train", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["micro_f1"] == out["macro_f1"] == 1.0


def test_existing_out_is_refused_and_untouched(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    out.write_text("keep\n")
    assert main(["synth", "--n", "10", "--out", str(out)]) == 2
    assert "already exists" in _one_line_error(capsys)
    assert out.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]


@pytest.mark.parametrize("lines, needle", [
    ([{"id": "a", "text": "x", "labels": ["l1"]}, "{not json"], ":2:"),
    ([{"id": "a", "text": "x", "labels": ["l1"]}, {"id": "a", "text": "y", "labels": []}], "duplicate id"),
    ([{"id": "a", "text": "x", "labels": "l1"}], ":1:"),
    ([], "empty file"),
])
def test_bad_files(tmp_path, capsys, lines, needle):
    good = _write(tmp_path / "good.jsonl", [{"id": "a", "text": "x", "labels": ["l1"]}])
    bad = _write(tmp_path / "bad.jsonl", lines)
    assert main(["eval", str(good), str(bad), "--train", str(good)]) == 2
    assert needle in _one_line_error(capsys)


def test_csv_and_missing_file(tmp_path, capsys):
    csv = tmp_path / "g.csv"
    csv.write_text("id,text,labels\na,hello,l1|l2\nb,bye\n")
    good = _write(tmp_path / "good.jsonl", [{"id": "a", "text": "x", "labels": ["l1"]}])
    assert main(["eval", str(good), str(csv), "--train", str(good)]) == 2
    assert ":3:" in _one_line_error(capsys)
    assert main(["eval", str(good), str(tmp_path / "nope.jsonl"), "--train", str(good)]) == 2
    assert "no such file" in _one_line_error(capsys)


@pytest.mark.parametrize("argv", [
    ["eval", "a", "b", "--train", "c", "--rare-fraction", "nan"],
    ["eval", "a", "b", "--train", "c", "--rare-fraction", "1.5"],
    ["synth", "--n", "0", "--out", "x.jsonl"],
    ["frobnicate"],
    ["reproduce", "--scale", "full", "--out", "OUT"],
    ["train", "a.jsonl", "--sem-threshold", "nan", "--out", "OUT"],
    ["train", "a.jsonl", "--coalitions", "louvain", "--out", "OUT"],
    ["data", "build-pyapi"],
])
def test_bad_options_exit_2_one_line(tmp_path, capsys, argv):
    argv = [str(tmp_path / a) if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    _one_line_error(capsys)
    assert not (tmp_path / "OUT").exists()
