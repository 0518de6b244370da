"""``--scale full`` checks its needs first and names every missing one in one UserError."""

import pytest
from nbcg.full import check_needs

from icml26_shared import UserError


def test_full_names_what_is_missing(tmp_path, monkeypatch):
    for var in ("NBCG_ENCODER", "NBCG_AAPD", "NBCG_RCV1", "NBCG_EURLEX"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError) as e:
        check_needs()
    msg = str(e.value)
    assert "NBCG_ENCODER" in msg and "NBCG_AAPD" in msg
    (tmp_path / "enc").mkdir()
    monkeypatch.setenv("NBCG_ENCODER", str(tmp_path / "enc"))
    monkeypatch.setenv("NBCG_RCV1", str(tmp_path / "missing.jsonl"))
    with pytest.raises(UserError) as e:
        check_needs()
    assert "has no config.json" in str(e.value) and "missing.jsonl: no such file" in str(e.value)


def test_full_with_everything_but_cuda_refuses_on_cuda(tmp_path, monkeypatch):
    _everything_but_a_gpu(tmp_path, monkeypatch)
    with pytest.raises(UserError, match="no CUDA device"):
        check_needs()


def _everything_but_a_gpu(tmp_path, monkeypatch):
    import torch

    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text("{}")
    (tmp_path / "aapd.jsonl").write_text('{"id": "a", "text": "x", "labels": ["l"]}\n')
    monkeypatch.setenv("NBCG_ENCODER", str(tmp_path / "enc"))
    monkeypatch.setenv("NBCG_AAPD", str(tmp_path / "aapd.jsonl"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_full_device_follows_nbcg_device_not_a_hard_coded_cuda(tmp_path, monkeypatch):
    """``full`` uses ``--device``'s logic through NBCG_DEVICE: cuda without a GPU is one line,
    an explicit cpu runs (float32), nothing says "cuda" behind the user's back."""
    import nbcg.full as full

    _everything_but_a_gpu(tmp_path, monkeypatch)
    monkeypatch.setenv("NBCG_DEVICE", "cuda")
    with pytest.raises(UserError) as e:
        check_needs()
    assert "NBCG_DEVICE=cuda" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("NBCG_DEVICE", "cpu")
    enc, data, device = check_needs()
    assert device == "cpu" and set(data) == {"aapd"}
    seen = {}

    class Stop(Exception):
        pass

    def fake_fit_encoder(*a, **k):
        seen.update(k)
        raise Stop

    import nbcg.finetune
    from nbcg.runs import synthetic_records

    monkeypatch.setattr(nbcg.finetune, "fit_encoder", fake_fit_encoder)
    recs, _ = synthetic_records(300, world_seed=0, seed=1)
    with pytest.raises(Stop):
        full.run_full_seed(recs, 0, tmp_path / "enc", device)
    import torch

    assert seen["device"] == "cpu" and seen["dtype"] == torch.float32


def test_full_cuda_without_gpu_exits_2_in_one_line(tmp_path, monkeypatch, capsys):
    from nbcg.cli import main

    _everything_but_a_gpu(tmp_path, monkeypatch)
    monkeypatch.setenv("NBCG_DEVICE", "cuda:0")
    rc = main(["reproduce", "--scale", "full", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "NBCG_DEVICE=cuda:0" in err, err
    assert not (tmp_path / "out" / "nbcg" / "results.json").exists()
