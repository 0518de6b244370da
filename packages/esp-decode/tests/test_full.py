"""The ``full`` scale's parts, on CPU: the shared near-tie rule, the prompt pools, the SmolLM2 stage's
code on a tiny random-init model, and the clear refusals."""

import pytest
import torch
from esp_decode import gpu, gpu_check, tasks
from esp_decode.core import judge

from icml26_shared import Results, UserError


def test_full_and_gpu_check_share_one_near_tie_rule():
    assert gpu_check.judge is judge and "judge" in gpu.decode_judged.__code__.co_names


@pytest.mark.parametrize("gap, ok", [(0.01, True), (1.0, False)])
def test_full_judges_a_planted_divergence_by_the_near_tie_rule(tiny_llama, gap, ok):
    """A real decode through ``full``'s code path; the reference is planted to prefer another token at
    step 2 by ``gap`` logits: a near tie passes in bf16, a real divergence fails (and fp32 is exact)."""
    prompts = [[1, 2, 3, 4, 1, 2, 3], [5, 6, 7, 5, 6]]
    refs, logits = gpu_check.reference(tiny_llama, prompts, 6)
    mal, vs = gpu.decode_judged(tiny_llama, prompts, "esp", 6, None, {}, 2, refs, logits, bf16=True)
    assert all(v["exact"] for v in vs) and len(mal) == 2
    planted_ref, planted_logits = [list(r) for r in refs], [lg.clone() for lg in logits]
    got = refs[0][2]
    other = (got + 1) % logits[0].shape[-1]
    planted_ref[0][2] = other
    planted_logits[0][2, other] = planted_logits[0][2, got] + gap
    _, vs = gpu.decode_judged(tiny_llama, prompts, "esp", 6, None, {}, 2, planted_ref, planted_logits, bf16=True)
    assert vs[0]["ok"] is ok and not vs[0]["exact"] and vs[0]["first_diff"] == 2 and vs[1]["exact"]
    _, vs = gpu.decode_judged(tiny_llama, prompts, "esp", 6, None, {}, 2, planted_ref, planted_logits, bf16=False)
    assert not vs[0]["ok"]


def test_stage_checks_every_drafter_at_batch_1_and_8_and_feeds_the_claims(tiny_llama):
    from esp_decode.experiments import _claims

    res = Results(package="esp-decode", version="test", scale="full", seed=0)
    sets = {"open": [[1, 2, 3, 1, 2, 3, 1], [4, 5, 6, 4, 5]], "code": [[7, 8, 9, 7, 8, 9, 7, 8]]}
    data = gpu.run_stage(res, "smollm2", tiny_llama, sets, 6, None, {}, bf16=False, chunk=1)   # chunked refs
    assert data["lossless_all"] and data["n_checked"] == 3 * len(gpu.DRAFTERS) * len(gpu.BATCHES)
    assert data["n_exact"] == data["n_checked"]   # fp32: exact
    assert data["arms"]["ar"]["open"]["mal"] == [1.0, 1.0]
    _claims(res, data, "smollm2", lossless_note=gpu.lossless_note("smollm2", data, False))
    assert res.claims[0].claim_id == "lossless" and "near-tie" in res.claims[0].note


def test_full_prompt_pools_have_50_distinct_reported_prompts_disjoint_from_dev():
    for regime in tasks.REGIMES:
        dev, test = tasks.full_split(regime)
        assert len(test) == tasks.FULL_TEST >= 50 and len(dev) == tasks.FULL_DEV >= 1
        assert len(set(test)) == len(test) and len(set(dev)) == len(dev)
        assert not set(dev) & set(test), regime


def test_quick_prompts_are_unchanged_by_the_full_pools():
    dev, test = tasks.split("open", 1, 4)
    assert test[0] == "Write a short story about a lighthouse keeper." and dev == [
        "Write a short story about a letter never sent."]


def test_full_takes_an_eagle2_head_and_refuses_a_bad_one(monkeypatch, tmp_path, tiny_llama):
    """``ESP_DECODE_EAGLE2``: a bad folder, or a head whose shape differs from ESP_DECODE_LLAMA3's, is
    one clear line before anything runs; a good head passes that check (then the other needs)."""
    from esp_decode.eagle import new_head, save_head
    from esp_decode.experiments import reproduce

    monkeypatch.setenv(gpu.EAGLE_VAR, str(tmp_path / "nope"))
    with pytest.raises(UserError, match="ESP_DECODE_EAGLE2: .*no such EAGLE checkpoint folder"):
        reproduce("full", tmp_path, 0)
    save_head(new_head(tiny_llama), tmp_path / "head")
    llama = tmp_path / "llama3"
    llama.mkdir()
    (llama / "config.json").write_text('{"hidden_size": 4096, "vocab_size": 128256}')
    monkeypatch.setenv(gpu.EAGLE_VAR, str(tmp_path / "head"))
    monkeypatch.setenv("ESP_DECODE_LLAMA3", str(llama))
    with pytest.raises(UserError, match="hidden_size 32 differs from ESP_DECODE_LLAMA3's 4096"):
        reproduce("full", tmp_path, 0)
    (llama / "config.json").write_text('{"hidden_size": 32, "vocab_size": 40}')
    assert gpu.check_eagle() is not None
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="needs a CUDA device"):
            reproduce("full", tmp_path, 0)


def test_stage_runs_eagle2_beside_the_others(tiny_llama):
    from esp_decode.eagle import new_head

    res = Results(package="esp-decode", version="test", scale="full", seed=0)
    data = gpu.run_stage(res, "llama3", tiny_llama, {"specbench": [[1, 2, 3, 1, 2], [4, 5, 6, 4]]}, 6, None,
                         {"eagle_head": new_head(tiny_llama)}, bf16=False, drafters=("ar", "eagle2"))
    assert data["lossless_all"] and data["n_exact"] == data["n_checked"] == 2 * 2 * len(gpu.BATCHES)
    assert len(data["arms"]["eagle2"]["specbench"]["mal"]) == 2


def test_cpu_is_fp32_and_bf16_is_taken_on_request():
    from types import SimpleNamespace

    from esp_decode.cli import _placement

    assert _placement(SimpleNamespace(device="cpu", dtype="auto")) == ("cpu", "float32")
    assert _placement(SimpleNamespace(device="cpu", dtype="bf16")) == ("cpu", "bfloat16")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no such CUDA device"):
            _placement(SimpleNamespace(device="cuda", dtype="auto"))
    else:
        assert _placement(SimpleNamespace(device="cuda", dtype="auto")) == ("cuda", "bfloat16")
