"""The CI/gpu-check entry: its CPU twin (--tiny) runs the same code in seconds; the real one needs CUDA."""

import json

import pytest
import torch
from esp_decode import gpu_check as gc
from esp_decode.core import Tree
from esp_decode.esp import ESPDrafter, best_path


def test_tiny_check_is_lossless_and_projects(tmp_path, capsys):
    out = tmp_path / "gc.json"
    rc = gc.main(["--tiny", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    r = json.loads(out.read_text())
    assert r["lossless_ok"] and r["exact_fraction"]["float32"] == 1.0
    verdicts = r["lossless"]["bfloat16"]
    assert set(verdicts) == {f"{d}@b{b}" for d in (*gc.DRAFTERS, "eagle2") for b in (1, 8)}
    assert all(len(v) == 8 for v in verdicts.values())
    p = r["projection"]
    assert p["best_baseline"] in gc.BASELINES
    for name in gc.DRAFTERS:   # speed-up = accepted length / (call time at its items / AR step)
        q = p[name]
        assert q["projected_speedup_vs_ar"] == pytest.approx(q["mean_accepted_length"] / q["call_over_ar_step"])
    assert str(gc.ESP_DEFAULT_ITEMS) in r["call_seconds"] and "1" in r["call_seconds"]
    assert "lossless OK" in capsys.readouterr().out


def test_judge_accepts_only_bf16_near_ties():
    logits = torch.tensor([[5.0, 4.99, 0.0, 0.0], [3.0, 0.0, 2.0, 0.0]])
    ref = [0, 0]
    assert gc.judge([0, 0], ref, logits, bf16=False)["ok"]
    tie = gc.judge([1, 3], ref, logits, bf16=True)        # 0.01 below the top logit at step 0
    assert tie["ok"] and tie["first_diff"] == 0
    assert not gc.judge([1, 3], ref, logits, bf16=False)["ok"]   # fp32 must be exact
    far = gc.judge([0, 2], ref, logits, bf16=True)        # 1.0 below the top logit: a real error
    assert not far["ok"] and far["first_diff"] == 1


def test_bad_accepted_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "a.json"
    bad.write_text('{"drafters": {"esp": {"mean_accepted_length": 1.2}}}')
    assert gc.main(["--tiny", "--out", str(tmp_path / "o.json"), "--accepted", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "items_per_call" in err[0]
    assert not (tmp_path / "o.json").exists()


def test_shipped_accepted_file_loads():
    acc = gc.load_accepted(None)
    assert {"pld", "lade", "stand", "esp", "esp+pld"} <= set(acc)


def test_top_attachment_hangs_masks_on_the_best_path_only():
    t = Tree()
    a = t.add(-1, 5, 0.6)
    t.add(-1, 6, 0.3)
    t.add(a, 7, 0.2)
    c = t.add(a, 8, 0.4)
    assert best_path(t) == [a, c]
    from esp_decode.config import ESPConfig

    probes = ESPDrafter(ESPConfig(num_masks=2, attach="top")).probes_for(t)
    assert [h for h, _ in probes] == [-1, -1, a, a, c, c]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_check_on_cuda(tmp_path):
    r = gc.run_check(False, gc.load_accepted(None), "cuda")
    assert r["lossless_ok"], {d: {k: v for k, v in res.items() if not all(x["ok"] for x in v)}
                              for d, res in r["lossless"].items()}
    assert r["exact_fraction"]["float32"] == 1.0
    assert r["call_seconds"]["1"] > 0
