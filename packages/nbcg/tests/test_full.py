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
    import torch

    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text("{}")
    (tmp_path / "aapd.jsonl").write_text('{"id": "a", "text": "x", "labels": ["l"]}\n')
    monkeypatch.setenv("NBCG_ENCODER", str(tmp_path / "enc"))
    monkeypatch.setenv("NBCG_AAPD", str(tmp_path / "aapd.jsonl"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="no CUDA device"):
        check_needs()
