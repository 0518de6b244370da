"""Reading one layer from the formats users have: single files, sharded checkpoints through
model.safetensors.index.json, PEFT LoRA adapters (B·A), and probe directories."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from mvprobe.baselines import build
from mvprobe.config import ProbeConfig, TrainConfig
from mvprobe.io import WeightDataset, load_probe, read_layer, save_probe
from safetensors.torch import save_file

from icml26_shared import UserError


def test_sharded_checkpoint_reads_the_right_shard(tmp_path):
    a, b = torch.randn(6, 4), torch.randn(3, 5)
    save_file({"layers.0.weight": a}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"layers.1.weight": b}, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "layers.0.weight": "model-00001-of-00002.safetensors",
        "layers.1.weight": "model-00002-of-00002.safetensors"}}))
    assert np.array_equal(read_layer(tmp_path, "layers.1.weight"), b.numpy())
    assert np.array_equal(read_layer(tmp_path / "model.safetensors.index.json", "layers.0.weight"), a.numpy())
    with pytest.raises(UserError, match="layers.2.weight"):
        read_layer(tmp_path, "layers.2.weight")


def test_peft_lora_adapter_gives_scaled_BA(tmp_path):
    A, B = torch.randn(4, 7), torch.randn(5, 4)
    save_file({"base_model.model.blocks.0.attn.q_proj.lora_A.weight": A,
               "base_model.model.blocks.0.attn.q_proj.lora_B.weight": B},
              str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8}))
    X = read_layer(tmp_path, "blocks.0.attn.q_proj.weight")
    assert np.allclose(X, (B @ A).numpy() * 2.0, atol=1e-5)
    with pytest.raises(UserError, match="k_proj"):
        read_layer(tmp_path, "blocks.0.attn.k_proj")


def test_corrupt_file_and_conv_kernel(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00garbage")
    with pytest.raises(UserError, match="bad.safetensors"):
        read_layer(bad, "w")
    save_file({"conv.weight": torch.randn(8, 3, 3, 3)}, str(tmp_path / "c.safetensors"))
    assert read_layer(tmp_path / "c.safetensors", "conv.weight").shape == (8, 27)


@pytest.mark.parametrize("method", ["mvprobe", "statnn"])
def test_probe_directory_round_trip(tmp_path, method):
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(24, 6, 5, generator=g), (torch.rand(24, 3, generator=g) > 0.5).float()
    probe = ProbeConfig(n_probes=3, proj_dim=2, rep_dim=4)
    learner = build(method, (6, 5), 3, probe)
    learner.fit(X, Y, X[:8], Y[:8], TrainConfig(epochs=2))
    from dataclasses import asdict

    save_probe(tmp_path / "p", learner, {"method": method, "layer": "w", "shape": [6, 5],
                                          "label_names": ["a", "b", "c"], "probe_config": asdict(probe)})
    again, meta = load_probe(tmp_path / "p")
    assert np.allclose(again.predict_proba(X), learner.predict_proba(X))
    assert meta["label_names"] == ["a", "b", "c"]
    with pytest.raises(UserError, match="already exists"):
        save_probe(tmp_path / "p", learner, meta)


def test_dataset_label_fn_and_shape_check(tmp_path):
    paths = []
    for i, shape in enumerate([(4, 3), (4, 3), (3, 4)]):
        p = tmp_path / f"m{i}.safetensors"
        save_file({"w": torch.full(shape, float(i))}, str(p))
        paths.append(p)
    ds = WeightDataset.from_safetensors(paths[:2], "w", label_fn=lambda p: ["cat"] if "m1" in p else ["dog"])
    assert ds.label_names == ["cat", "dog"] and ds.labels.tolist() == [[0, 1], [1, 0]]
    with pytest.raises(UserError, match=r"m2.safetensors.*\(3, 4\)"):
        WeightDataset.from_safetensors(paths, "w")
