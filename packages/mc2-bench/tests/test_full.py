"""The GPU recipe (``full.run_full``) runs end to end through the same function on a tiny
random-init 24-layer LLaVA built here: on CPU by default, on CUDA in the gpu lane
(``CI/gpu-check``). The model's weights sit on the requested device, the hooks act on layers
20-23 (the authors' window) and touch positions there, and alpha = 0 equals ``evaluate``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mc2_bench.offline.digits import digits_items, write_digits_items

from icml26_shared import Results


def _run(tmp_path, device: str, answer_mode: str, fam: str = "llava") -> tuple[Results, dict]:
    from mc2_bench.full import run_full
    from mc2_bench.offline.tiny import FAMILIES

    rng = np.random.default_rng(0)
    imgs = rng.uniform(0, 16, (12, 8, 8)).astype(np.float32)
    write_digits_items(digits_items(imgs, np.arange(12) % 10, range(12), seed=0), tmp_path / "items")
    paths = {"MC2_MODEL": FAMILIES[fam](tmp_path / f"tiny-{fam}-24", seed=1, layers=24),
             "MC2_JSON": tmp_path / "items" / "items.json", "MC2_IMAGES": tmp_path / "items"}
    res = Results(package="mc2-bench", version="test", scale="full", seed=0)
    run_full(res, paths, tmp_path / "out", 0, device=device, alphas=(0.0, 0.3), batch=16,
             answer_mode=answer_mode)
    return res, paths


def _check(res: Results, device: str, dtype: str, letter: bool = False, fam: str = "llava") -> None:
    name = f"tiny-{fam}-24"
    env = res.get("full_env", name, "n_test_items")
    assert env.value == 10 and env.extra["n_dev_items"] == 2
    assert torch.device(env.extra["device"]).type == torch.device(device).type
    assert env.extra["dtype"] == dtype and env.extra["layers"] == [20, 21, 22, 23]
    for mode in ("single", "base_image", "base_text", "icc"):  # letter: a random model may parse to nothing
        v = res.get(f"full_{mode}", name, "vision_ratio").value
        assert (letter and np.isnan(v)) or 0.0 <= v <= 1.0
        if not letter:  # log-prob answers are always valid
            assert res.get(f"full_{mode}", name, "invalid_rate").value == 0.0
    single = res.get("full_single", name, "vision_ratio").value
    for d in ("diffmean", "random"):
        zero = res.get("full_steer", f"{name}_{d}", "vision_ratio_alpha+0")
        assert zero.value == pytest.approx(single, abs=1e-12, nan_ok=True)  # alpha = 0 is eval --mode single
        assert not any(zero.extra["touched"].values())  # alpha = 0 touches nothing
        for a in ("+0.3",):
            row = res.get("full_steer", f"{name}_{d}", f"vision_ratio_alpha{a}")
            assert row.extra["layers"] == [20, 21, 22, 23]
            assert sorted(row.extra["touched"]) == [20, 21, 22, 23]
            assert all(n > 0 for n in row.extra["touched"].values())
            acc = res.get("full_steer", f"{name}_{d}", f"single_accuracy_alpha{a}").value
            assert (letter and np.isnan(acc)) or 0.0 <= acc <= 1.0


@pytest.mark.parametrize("fam", ["llava", "qwen2_vl"])
def test_full_recipe_on_cpu(tmp_path, fam):
    res, _ = _run(tmp_path, "cpu", "letter-logprob", fam)  # one forward per answer (generation: CUDA lane)
    _check(res, "cpu", str(torch.float32), fam=fam)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_full_recipe_on_cuda(tmp_path):
    res, _ = _run(tmp_path, "cuda", "letter")  # the recipe's own answer mode: generate and parse
    _check(res, "cuda", str(torch.bfloat16), letter=True)
