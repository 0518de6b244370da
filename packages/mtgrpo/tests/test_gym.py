"""The paper's tasks: reasoning-gym rows written offline and scored by reasoning-gym's scorers."""

import json

import pytest
from mtgrpo import gym
from mtgrpo.cli import main
from mtgrpo.io import load_task


def test_answer_tags_and_reward_mapping(monkeypatch):
    """1.0 only for full marks, 0.1 for a wrong answer in tags, 0.0 without tags; the scorer sees
    the tagged text and the row's metadata (scorer stubbed: no reasoning-gym import)."""
    seen = []

    def scorer(ans, entry):
        seen.append((ans, entry["metadata"]))
        return 1.0 if ans == entry["answer"] else 0.05

    monkeypatch.setattr(gym, "_scorer", lambda source: scorer)
    row = {"prompt": "q", "question": "q", "answer": "42", "source_dataset": "x",
           "metadata": {"target": 42}}
    assert gym.extract_answer("a <answer>1</answer> b <answer> 42 </answer>") == "42"
    assert gym.reasoning_gym_verifier("think... <answer>42</answer>", row) == 1.0
    assert gym.reasoning_gym_verifier("<answer>41</answer>", row) == 0.1
    assert gym.reasoning_gym_verifier("42", row) == 0.0
    assert seen == [("42", {"target": 42}), ("41", {"target": 42})]


def test_reasoning_gym_data_cli_and_verifier(tmp_path, capsys):
    """countdown / zebra_puzzles / arc_1d written by the CLI with disjoint splits, loaded with
    the reasoning-gym verifier by default; the reference answer scores 1.0, a wrong one 0.1."""
    for task in gym.PAPER_TASKS:
        out = tmp_path / f"{task}.jsonl"
        assert main(["data", "reasoning-gym", task, "--n", "3", "--dev", "1", "--test", "2",
                     "--seed", "1", "--out", str(out)]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["split"] for r in rows] == ["train"] * 3 + ["dev"] + ["test"] * 2
        assert all("<answer>" in r["prompt"] and r["source_dataset"] == task for r in rows)
        t = load_task(f"{task}={out}")
        assert (len(t.train), len(t.dev), len(t.test)) == (3, 1, 2)
        ex = t.test[0]
        assert t.verifier(f"... <answer>{ex['answer']}</answer>", ex) == 1.0
        assert t.verifier("<answer>not it</answer>", ex) == 0.1
    capsys.readouterr()
    before = (tmp_path / "countdown.jsonl").read_bytes()
    rc = main(["data", "reasoning-gym", "countdown", "--n", "2", "--out", str(tmp_path / "countdown.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "exists" in err[0]
    assert (tmp_path / "countdown.jsonl").read_bytes() == before
    rc = main(["data", "reasoning-gym", "no_such_task", "--n", "2", "--out", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "unknown reasoning-gym task" in err[0]
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize("n", ["0", "-3"])
def test_bad_counts(tmp_path, capsys, n):
    rc = main(["data", "reasoning-gym", "countdown", "--n", n, "--out", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--n: must be a positive integer" in err[0]
    assert not (tmp_path / "x.jsonl").exists()
