"""CLI: users' mistakes end with one line on stderr, exit 2, nothing written; train / eval run."""

import json

import pytest
from mtgrpo.cli import main

FAST = ["--sft-steps", "5", "--steps", "2", "--batch-prompts", "3", "--group-size", "2",
        "--max-new-tokens", "4", "--n-rs", "1", "--eval-prompts", "3", "--log-every", "0"]


def _err(capsys, argv, match, tmp_path=None):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("mtgrpo: error:") and match in err[0], err
    if tmp_path is not None:
        assert not (tmp_path / "out").exists()


def test_unknown_task(capsys, tmp_path):
    _err(capsys, ["train", "--tasks", "copy,nope", "--out", str(tmp_path / "out")], "unknown task",
         tmp_path)


def test_negative_lambda(capsys, tmp_path):
    _err(capsys, ["train", "--lam", "-0.5", "--out", str(tmp_path / "out")], "--lam: must be a finite number >= 0",
         tmp_path)


def test_empty_dataset(capsys, tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    _err(capsys, ["train", "--tasks", f"e={tmp_path / 'e.jsonl'}", "--out", str(tmp_path / "out")],
         "is empty", tmp_path)


def test_missing_columns(capsys, tmp_path):
    (tmp_path / "q.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    _err(capsys, ["train", "--tasks", f"q={tmp_path / 'q.jsonl'}", "--out", str(tmp_path / "out")],
         "missing column", tmp_path)


def test_verifier_that_raises(capsys, tmp_path, monkeypatch):
    (tmp_path / "badver.py").write_text("def check(r, ex):\n    raise KeyError('solution')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "t.jsonl").write_text("".join(f'{{"prompt": "c{i}=", "answer": "{i}"}}\n'
                                              for i in range(10)))
    _err(capsys, ["train", "--tasks", f"t={tmp_path / 't.jsonl'}", "--verifier", "badver:check",
                  "--out", str(tmp_path / "out"), *FAST], "verifier of task 't' raised KeyError",
         tmp_path)


def test_unknown_verifier_and_model(capsys, tmp_path):
    _err(capsys, ["train", "--tasks", f"t={tmp_path / 'x.jsonl'}", "--out", str(tmp_path / "out")],
         "does not exist", tmp_path)
    _err(capsys, ["train", "--model", str(tmp_path), "--out", str(tmp_path / "out"), *FAST],
         "not a local Hugging Face model", tmp_path)


def test_train_then_eval_and_no_silent_overwrite(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--tasks", "copy:easy,sort:easy", "--out", str(out), *FAST]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and set(summary["held_out_acc"]) == {"copy:easy", "sort:easy"}
    assert len((out / "history.jsonl").read_text().splitlines()) == 2
    assert (out / "z_vs_share.png").is_file() and (out / "train_acc.png").is_file()
    before = (out / "checkpoint.pt").stat().st_mtime_ns
    capsys.readouterr()
    _err(capsys, ["train", "--tasks", "copy:easy,sort:easy", "--out", str(out), *FAST], "--resume")
    assert (out / "checkpoint.pt").stat().st_mtime_ns == before
    # resume to 3 steps continues the same run
    assert main(["train", "--tasks", "copy:easy,sort:easy", "--out", str(out), "--resume",
                 *FAST[:-8], "--steps", "3", *FAST[6:]]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    assert main(["eval", "--tasks", "copy:easy,sort:easy", "--checkpoint", str(out / "checkpoint.pt"),
                 "--sft-steps", "0", "--eval-prompts", "3", "--n-val", "1",
                 "--json", str(tmp_path / "e.json")]) == 0
    assert "copy:easy" in json.loads((tmp_path / "e.json").read_text())["held_out_acc"]


def test_save_every_into_a_new_folder(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--tasks", "copy:easy", "--out", str(out), "--save-every", "1", *FAST]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_simulate(capsys):
    assert main(["simulate", "--mode", "minimax", "--frozen", "--steps", "300"]) == 0
    assert "final" in capsys.readouterr().out


def test_bad_scale(capsys):
    _err(capsys, ["reproduce", "--scale", "huge"], "unknown scale")


@pytest.mark.parametrize("argv, match", [
    (["train", "--method", "ppo", "--out", "x"], "invalid choice"),
    (["train", "--lam", "nan", "--out", "x"], "lam"),
    (["train", "--lr", "-1", "--out", "x"], "lr"),
    (["train", "--eval-prompts", "0", "--out", "x"], "--eval-prompts"),
    (["simulate", "--acc", "0.8,abc", "--rates", "0.1,0.1"], "--acc must be comma-separated"),
    (["simulate", "--acc", "0.8,nan", "--rates", "0.1,0.1"], "--acc values"),
    (["simulate", "--lam", "inf"], "--lam"),
])
def test_bad_options_one_line(capsys, argv, match):
    _err(capsys, argv, match)


def test_malformed_jsonl_one_line(capsys, tmp_path):
    (tmp_path / "b.jsonl").write_text('{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": \n')
    _err(capsys, ["train", "--tasks", f"b={tmp_path / 'b.jsonl'}", "--out", str(tmp_path / "out")],
         "line 2 is not valid JSON", tmp_path)


def test_task_without_held_out_rows(capsys, tmp_path):
    (tmp_path / "t.jsonl").write_text("".join(f'{{"prompt": "c{i}=", "answer": "{i}", "split": "train"}}\n'
                                              for i in range(5)))
    _err(capsys, ["train", "--tasks", f"t={tmp_path / 't.jsonl'}", "--out", str(tmp_path / "out")],
         "no held-out rows", tmp_path)


def test_existing_out_folder_and_resume_errors(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _err(capsys, ["train", "--tasks", "copy:easy", "--out", str(out), *FAST], "--overwrite")
    _err(capsys, ["train", "--tasks", "copy:easy", "--out", str(out), "--resume", *FAST],
         "nothing to resume")
    assert (out / "notes.txt").read_text() == "mine"
    # --overwrite replaces only a folder a run wrote: never a file the user put there
    _err(capsys, ["train", "--tasks", "copy:easy", "--out", str(out), "--overwrite", *FAST],
         "no run wrote (notes.txt)")
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    assert main(["train", "--tasks", "copy:easy,sort:easy", "--out", str(out), "--overwrite", *FAST]) == 0
    assert not (out / "notes.txt").exists() and (out / "checkpoint.pt").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left
    capsys.readouterr()
    # resuming with another method, and a corrupt checkpoint: one line, nothing changed
    before = (out / "checkpoint.pt").read_bytes()
    _err(capsys, ["train", "--tasks", "copy:easy,sort:easy", "--out", str(out), "--resume",
                  "--method", "dapo", *FAST[:-8], "--steps", "3", *FAST[6:]], "--method mtgrpo")
    assert (out / "checkpoint.pt").read_bytes() == before
    (out / "checkpoint.pt").write_bytes(b"not a checkpoint")
    _err(capsys, ["train", "--tasks", "copy:easy,sort:easy", "--out", str(out), "--resume",
                  *FAST[:-8], "--steps", "3", *FAST[6:]], "cannot be read")
    _err(capsys, ["eval", "--tasks", "copy:easy,sort:easy", "--checkpoint", str(out / "checkpoint.pt"),
                  "--sft-steps", "0", "--eval-prompts", "2"], "cannot be read")


def test_checkpoint_with_code_is_one_line_without_torch_advice(capsys, tmp_path):
    """A checkpoint holding pickled code: one line, and never PyTorch's weights_only=False advice."""
    import io
    import pickle

    import torch

    buf = io.BytesIO()
    torch.save({"model": torch.zeros(2), "f": pickle.loads}, buf)
    (tmp_path / "ck.pt").write_bytes(buf.getvalue())
    _err(capsys, ["eval", "--tasks", "copy:easy", "--checkpoint", str(tmp_path / "ck.pt"),
                  "--sft-steps", "0", "--eval-prompts", "2"], "cannot be read: it is truncated")
    rc = main(["eval", "--tasks", "copy:easy", "--checkpoint", str(tmp_path / "ck.pt"),
               "--sft-steps", "0", "--eval-prompts", "2"])
    assert rc == 2 and "weights_only" not in capsys.readouterr().err
