"""Your backbone, your device, your images (issue 49, items 7-8): ``CoreMTL(tasks, cfg,
encoder=module)`` and ``train(..., encoder=, device=)`` for CORE and every baseline;
``core-mtl train --encoder MODULE:FACTORY --device ...`` recorded so ``eval`` rebuilds it; 0-255
images refused in one line unless ``--image-scale 255``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from core_mtl.cli import main
from core_mtl.config import TaskSpec, TrainConfig
from core_mtl.model import MTAN, CoreMTL
from core_mtl.train import resolve_device, train
from torch import nn

TASKS = (TaskSpec("seg", "segmentation", "label", 4), TaskSpec("depth", "depth", "depth"),
         TaskSpec("normal", "normal", "normal"))

ENCODER_FILE = '''
from torch import nn


def tiny():
    """Two conv layers, stride 2, 10 channels; no out_channels attribute (found by a dry run)."""
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 10, 3, stride=2, padding=1), nn.ReLU())
'''


def tiny_encoder():
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 10, 3, stride=2, padding=1), nn.ReLU())


def _one_line_error(capsys, match):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("core-mtl: error:") and match in err[0], err


def test_api_takes_a_user_encoder(batch):
    enc = tiny_encoder()
    m = CoreMTL(TASKS, encoder=enc)
    assert m.encoder is enc and m.to_s.in_channels == 10  # C from a dry forward
    out = m(batch.image, decode=True, physics=True)
    assert out["tasks"]["seg"].shape == (16, 4, 16, 16) and out["z_s"].shape[1] == m.cfg.dim_s
    assert MTAN(TASKS, encoder=tiny_encoder()).to_s.in_channels == 10
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    for method in ("core", "mgda", "mtan"):
        r = train(TrainConfig(method=method, epochs=1, batch_size=8), TASKS, batch, encoder=enc, device="cpu")
        assert isinstance(r.model.encoder, nn.Sequential) and r.model.encoder is not enc
        assert any(not torch.equal(before[k], v) for k, v in r.model.encoder.state_dict().items())
    assert all(torch.equal(before[k], v) for k, v in enc.state_dict().items())  # caller's copy untouched
    with pytest.raises(ValueError, match="feature map"):
        CoreMTL(TASKS, encoder=nn.Flatten())


def test_device_spec():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda:0")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("d") / "shapes"
    assert main(["gen-data", "shaded-shapes", "--n-train", "20", "--n-test", "8", "--size", "16",
                 "--out", str(out)]) == 0
    return out


def test_cli_encoder_is_recorded_and_rebuilt_by_eval(data, tmp_path, capsys, monkeypatch):
    f = tmp_path / "mynets.py"
    f.write_text(ENCODER_FILE)
    run = tmp_path / "run"
    assert main(["train", "--data", str(data), "--method", "core", "--epochs", "1", "--batch-size", "8",
                 "--encoder", f"{f}:tiny", "--device", "cpu", "--out", str(run)]) == 0
    meta = json.loads((run / "config.json").read_text())
    assert meta["encoder"] == f"{f.resolve()}:tiny"
    sd = torch.load(run / "model.pt", weights_only=True)
    assert sd["encoder.3.weight"].shape == (10, 6, 3, 3)  # the user's layers were trained and saved
    capsys.readouterr()
    assert main(["eval", str(run), "--data", str(data), "--device", "cpu", "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["metrics"]["seg_miou"] <= 1
    # a dotted module name works too (importable, e.g. from the current folder)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train", "--data", str(data), "--method", "pcgrad", "--epochs", "1", "--batch-size", "8",
                 "--encoder", "mynets:tiny", "--out", str(tmp_path / "run2")]) == 0


@pytest.mark.parametrize("spec, match", [("badnets", "MODULE:FACTORY"), ("no_such_mod_xyz:f", "cannot import"),
                                         ("badnets:nothing", "no callable"), ("badnets:flat", "feature map"),
                                         ("badnets:number", "not a torch.nn.Module")])
def test_cli_bad_encoder_is_one_line(data, tmp_path, capsys, monkeypatch, spec, match):
    (tmp_path / "badnets.py").write_text(ENCODER_FILE + "\n\ndef flat():\n    return nn.Flatten()\n"
                                         "\n\ndef number():\n    return 3\n")
    monkeypatch.delitem(__import__("sys").modules, "badnets", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--epochs", "1", "--batch-size", "8", "--encoder", spec,
                 "--out", str(out)]) == 2
    _one_line_error(capsys, match)
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cli_cuda_without_cuda_is_one_line(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--device", "cuda", "--out", str(out)]) == 2
    _one_line_error(capsys, "CUDA is not available")
    assert not out.exists()


def test_cli_0_255_images_refused_or_rescaled(data, tmp_path, capsys):
    d = tmp_path / "d255"
    shutil.copytree(data, d)
    for split in ("train", "test", "test_ood"):
        for p in (d / split / "image").glob("*.npy"):
            np.save(p, np.load(p) * 255.0)
    out = tmp_path / "run"
    assert main(["train", "--data", str(d), "--epochs", "1", "--batch-size", "8", "--out", str(out)]) == 2
    _one_line_error(capsys, f"images in {d / 'train' / 'image'}")
    assert not out.exists()
    assert main(["train", "--data", str(d), "--epochs", "1", "--batch-size", "8", "--method", "ew",
                 "--image-scale", "255", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--data", str(d), "--json"]) == 0  # eval reuses the run's scale
    assert json.loads(capsys.readouterr().out)["metrics"]["seg_miou"] >= 0
