"""CLI: digits-items -> toy -> eval/steer/report, and the one-line errors (exit 2, nothing written)."""

from __future__ import annotations

import json

import pytest
from mc2_bench.cli import main


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    assert main(["digits-items", "--out", str(root / "items"), "--n", "6"]) == 0
    assert main(["toy", "--vision-preference", "0.5", "--out", str(root / "toy"), "--steps", "2"]) == 0
    return root


def _one_line(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mc2-bench: error:") and match in err[0], err


def _eval(ws, *extra):
    return main(["eval", "--model", str(ws / "toy"), "--data", str(ws / "items" / "items.json"),
                 "--images", str(ws / "items"), *extra])


def test_eval_json_and_per_item_recompute(workspace, capsys):
    per = workspace / "per.jsonl"
    assert _eval(workspace, "--json", "--per-item", str(per), "--answer-mode", "letter-logprob") == 0
    res = json.loads(capsys.readouterr().out)
    assert {"vision_ratio", "text_ratio", "order_consistency", "invalid_rate", "per_task"} <= set(res)
    recs = [json.loads(x) for x in per.read_text().splitlines()]
    assert len(recs) == 6 and "Text context:" in recs[0]["prompt_order0"]
    assert main(["report", str(per), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert res["invalid_rate"] == 0.0 and res["vision_ratio"] + res["text_ratio"] == 1.0
    assert again["vision_ratio"] == res["vision_ratio"] and again["invalid_rate"] == res["invalid_rate"]


def test_steer_alpha_zero_equals_eval_single(workspace, capsys):
    assert _eval(workspace, "--json", "--answer-mode", "letter-logprob") == 0
    ev = json.loads(capsys.readouterr().out)
    assert main(["steer", "--model", str(workspace / "toy"), "--data",
                 str(workspace / "items" / "items.json"), "--images", str(workspace / "items"),
                 "--layers", "1-2", "--alpha-grid=-1,0,1", "--control", "random", "--json",
                 "--answer-mode", "letter-logprob", "--fit-on-eval"]) == 0
    out = json.loads(capsys.readouterr().out)
    zero = next(r for r in out["sweeps"]["diffmean"] if r["alpha"] == 0)
    assert zero["vision_ratio"] == ev["vision_ratio"]
    one = next(r for r in out["sweeps"]["diffmean"] if r["alpha"] == 1)
    assert set(one["hook"]["touched_positions"]) == {"1", "2"} or set(one["hook"]["touched_positions"]) == {1, 2}
    assert "random" in out["sweeps"]


def test_missing_image_is_named_by_item_and_nothing_written(workspace, tmp_path, capsys):
    items = json.loads((workspace / "items" / "items.json").read_text())
    (tmp_path / "items.json").write_text(json.dumps(items))
    per = tmp_path / "per.jsonl"
    assert main(["eval", "--model", str(workspace / "toy"), "--data", str(tmp_path / "items.json"),
                 "--images", str(tmp_path), "--per-item", str(per)]) == 2
    _one_line(capsys, f"item {items[0]['id']}")
    assert not per.exists()


def test_malformed_json(workspace, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["eval", "--model", str(workspace / "toy"), "--data", str(bad),
                 "--images", str(workspace / "items")]) == 2
    _one_line(capsys, "malformed JSON")


def test_layer_out_of_range(workspace, capsys):
    assert main(["steer", "--model", str(workspace / "toy"), "--data",
                 str(workspace / "items" / "items.json"), "--images", str(workspace / "items"),
                 "--layers", "9", "--alpha-grid", "0,1"]) == 2
    _one_line(capsys, "out of range")


def test_text_only_model_in_a_vision_mode(workspace, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(["eval", "--model", str(tmp_path), "--data", str(workspace / "items" / "items.json"),
                 "--images", str(workspace / "items")]) == 2
    _one_line(capsys, "text-only")


def test_existing_outputs_are_not_overwritten(workspace, tmp_path, capsys):
    per = tmp_path / "keep.jsonl"
    per.write_text("keep")
    assert _eval(workspace, "--per-item", str(per)) == 2
    _one_line(capsys, "already exists")
    assert per.read_text() == "keep"
    assert main(["digits-items", "--out", str(workspace / "items")]) == 2
    _one_line(capsys, "already exists")


@pytest.mark.parametrize("argv, match", [
    (["toy", "--vision-preference", "nan", "--out", "x"], "vision-preference"),
    (["toy", "--vision-preference", "1.5", "--out", "x"], "vision-preference"),
    (["eval", "--model", "m", "--data", "d", "--images", "i", "--mode", "both"], "--mode"),
    (["steer", "--model", "m", "--data", "d", "--images", "i", "--layers", "1",
      "--alpha-grid", "1,inf"], "alpha-grid"),
])
def test_bad_options_give_one_line(argv, match, capsys):
    assert main(argv) == 2
    _one_line(capsys, match)


def test_full_scale_says_what_it_needs(tmp_path, capsys):
    assert main(["reproduce", "--scale", "full", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert "CUDA" in err or "MC2_MODEL" in err


def test_build_and_smol_vlm_mistakes_give_one_line(workspace, tmp_path, capsys):
    vqa = tmp_path / "vqa.json"
    vqa.write_text(json.dumps([{"id": 1, "image_id": "nope", "question": "q", "answer": "one"}]))
    assert main(["build", "--vqa", str(vqa), "--images", str(workspace / "items"), "--model",
                 str(workspace / "toy"), "--out", str(tmp_path / "o.json")]) == 2
    _one_line(capsys, "item 1")
    assert main(["build", "--vqa", str(vqa), "--images", str(workspace / "items"), "--model",
                 str(workspace / "toy"), "--generator", "no_such_mod:fn", "--out", str(tmp_path / "o.json")]) == 2
    _one_line(capsys, "--generator")
    assert not (tmp_path / "o.json").exists()
    assert main(["smol-vlm", "--out", str(workspace / "items")]) == 2
    _one_line(capsys, "already exists")


def test_a_broken_hf_folder_gives_one_line(workspace, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    assert main(["eval", "--model", str(tmp_path), "--data", str(workspace / "items" / "items.json"),
                 "--images", str(workspace / "items")]) == 2
    _one_line(capsys, "has no weights")  # the core's loader checks the folder before torch loads it


def test_steer_at_the_context_refuses_an_empty_contrast(workspace, capsys):
    # the instruction comes after the context: follow-image and follow-text states are identical there
    assert main(["steer", "--model", str(workspace / "toy"), "--data",
                 str(workspace / "items" / "items.json"), "--images", str(workspace / "items"),
                 "--layers", "1", "--alpha-grid=-1,0,1", "--positions", "context"]) == 2
    _one_line(capsys, "--positions context")


def test_instruction_contrast_before_the_instruction_is_refused_before_loading(workspace, capsys):
    # no model folder at all: the refusal comes from the options alone, before any weights load
    assert main(["steer", "--model", str(workspace / "no_such_model"), "--data",
                 str(workspace / "items" / "items.json"), "--images", str(workspace / "items"),
                 "--layers", "1", "--alpha-grid=0,1", "--positions", "image_tokens"]) == 2
    _one_line(capsys, "identical there")
