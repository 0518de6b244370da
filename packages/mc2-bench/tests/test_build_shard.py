"""`mc2-bench build`, the PCA plot, item sharding (merging shards equals one pass; a real
2-process `accelerate launch` equals 1 process), and the smol-vlm build (slow: it loads SmolLM2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mc2_bench.cli import main


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("bs")
    assert main(["digits-items", "--out", str(root / "items"), "--n", "8"]) == 0
    assert main(["toy", "--vision-preference", "0.5", "--out", str(root / "toy"), "--steps", "40"]) == 0
    return root


def _data(ws):
    return ["--data", str(ws / "items" / "items.json"), "--images", str(ws / "items")]


def test_build_keeps_only_items_passing_both_single_modality_checks(ws, tmp_path, capsys):
    from mc2_bench.commands import digits_generator
    from mc2_bench.core import MC2Item
    from mc2_bench.offline.toy import load_toy
    from mc2_bench.offline.toy_adapter import ToyAdapter

    items = json.loads((ws / "items" / "items.json").read_text())
    vqa = [{"id": r["id"], "image_id": r["image_id"], "question": r["question"],
            "answer": r["answer_vision"], "task": r["task"]} for r in items]
    (tmp_path / "vqa.json").write_text(json.dumps(vqa))
    out = tmp_path / "built.json"
    assert main(["build", "--vqa", str(tmp_path / "vqa.json"), "--images", str(ws / "items"),
                 "--model", str(ws / "toy"), "--out", str(out)]) == 0
    kept = json.loads(out.read_text())
    ad = ToyAdapter(load_toy(ws / "toy"))
    want = []
    for q in vqa:  # the same filter by hand: each modality alone, both orders
        at, ctx = digits_generator(q)
        it = MC2Item(str(q["id"]), q["task"], q["question"], q["answer"], at, ctx,
                     str(ws / "items" / f"{q['image_id']}.png"))
        ok = all(ad.answer([it], m, o)[0]["letter"] == ("A" if (m == "base_image") == (o == 0) else "B")
                 for m in ("base_image", "base_text") for o in (0, 1))
        if ok:
            want.append(it.id)
    assert [r["id"] for r in kept] == want and 0 < len(want) < len(vqa)
    assert all(r["answer_vision"] != r["answer_text"] for r in kept)
    assert main(["build", "--vqa", str(tmp_path / "vqa.json"), "--images", str(ws / "items"),
                 "--model", str(ws / "toy"), "--out", str(out)]) == 2  # never overwritten
    assert "already exists" in capsys.readouterr().err


def test_probe_writes_the_pca_plot(ws, tmp_path, capsys):
    png = tmp_path / "pca.png"
    assert main(["probe", "--model", str(ws / "toy"), *_data(ws), "--plot", str(png), "--plot-layer", "2"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["probe", "--model", str(ws / "toy"), *_data(ws), "--plot", str(png), "--plot-layer", "9"]) == 2


def test_pca_projection_separates_planted_groups():
    from mc2_bench.plots import pca_2d

    rng = np.random.default_rng(0)
    d = rng.standard_normal(20)
    g = {"follow_image": rng.standard_normal((30, 20)) * 0.1 + d, "follow_text": rng.standard_normal((30, 20)) * 0.1 - d}
    p = pca_2d(g)
    assert np.sign(p["follow_image"][:, 0]).tolist() == [np.sign(p["follow_image"][0, 0])] * 30
    assert (np.sign(p["follow_text"][:, 0]) == -np.sign(p["follow_image"][0, 0])).all()


def test_merged_shards_equal_one_pass(ws):
    from mc2_bench.io import load_mc2
    from mc2_bench.offline.toy import load_toy
    from mc2_bench.offline.toy_adapter import ToyAdapter
    from mc2_bench.protocol import evaluate, evaluate_records

    ad = ToyAdapter(load_toy(ws / "toy"))
    items = load_mc2(ws / "items" / "items.json", ws / "items")
    for mode in ("single", "icc"):
        whole = evaluate(ad, items, mode, per_item=True)
        parts = [evaluate(ad, items[:3], mode, per_item=True), evaluate(ad, items[3:], mode, per_item=True)]
        if mode == "icc":  # records come per follow direction; shards keep that order within each
            recs = [r for f in ("vision", "text") for p in parts for r in p["records"] if r["follow"] == f]
        else:
            recs = [r for p in parts for r in p["records"]]
        merged = evaluate_records(recs, items, mode, "letter")
        for k in ("vision_ratio", "order_consistency", "invalid_rate", "per_task"):
            assert merged[k] == whole[k]


@pytest.mark.slow
def test_two_process_accelerate_eval_equals_one_process(ws, tmp_path, capsys):
    assert main(["eval", "--model", str(ws / "toy"), *_data(ws), "--json", "--mode", "icc",
                 "--per-item", str(tmp_path / "one.jsonl")]) == 0
    one = json.loads(capsys.readouterr().out)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu", "-m",
           "mc2_bench", "eval", "--model", str(ws / "toy"), *_data(ws), "--json", "--mode", "icc",
           "--per-item", str(tmp_path / "two.jsonl")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    two = json.loads(p.stdout[p.stdout.index("{"):])
    for k in ("vision_ratio", "order_consistency", "instruction_following", "per_task"):
        assert two[k] == one[k]
    assert (tmp_path / "two.jsonl").read_text() == (tmp_path / "one.jsonl").read_text()


@pytest.mark.slow
def test_smol_vlm_reloads_by_the_auto_classes_alone(tmp_path, monkeypatch):
    from mc2_bench.offline.smolvlm import SmolVLMConfig, build_smol_vlm
    from mc2_bench.offline.toy import load_digits
    from transformers import AutoModelForImageTextToText, AutoProcessor

    X, y = load_digits()
    stats = build_smol_vlm(tmp_path / "smol", X[:200], y[:200], SmolVLMConfig(steps=3))
    assert set(stats) >= {"final_loss", "train_nearest_name_accuracy"}
    proc = AutoProcessor.from_pretrained(tmp_path / "smol", local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(tmp_path / "smol", local_files_only=True)
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert type(proc.image_processor).__name__ == "CLIPImageProcessorPil"
    assert model.config.text_config.num_hidden_layers == 30
