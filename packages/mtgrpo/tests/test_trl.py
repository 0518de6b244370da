"""mtgrpo.trl.MTGRPOTrainer: TRL's GRPOTrainer with IWU and the ratio-preserving sampler, on a tiny
random Llama built here, two tasks of different difficulty, 3 optimizer steps on the CPU."""

import numpy as np
import pytest
import torch

pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")

from mtgrpo.tasks import VOCAB  # noqa: E402

from .test_hf import char_tokenizer  # noqa: E402

EASY, HARD = set("0123456789+*="), set("ac")  # first character: ~13 / 20 vs ~2 / 20 tokens of a
# near-uniform policy


def _first_in(allowed):
    def f(prompts, completions, **kw):
        return [1.0 if c[:1] in allowed else 0.0 for c in completions]
    return f


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=0, eos_token_id=VOCAB.index(";"), bos_token_id=None,
                      initializer_range=0.002)  # near-uniform next-token distribution
    path = tmp_path_factory.mktemp("trl_llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def _run(tiny, tmp_path, **kw):
    from datasets import Dataset
    from mtgrpo.trl import MTGRPOConfig, MTGRPOTrainer, per_task_reward
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = [{"prompt": f"c{i % 10}{(i * 7) % 10}=", "task": t} for i in range(16) for t in ("easy", "hard")]
    args = MTGRPOConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=16,
                        num_generations=4, max_completion_length=3, learning_rate=1e-5,
                        use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                        logging_steps=1, seed=0, disable_tqdm=True, **kw)
    tr = MTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny),
                       processing_class=AutoTokenizer.from_pretrained(tiny),
                       reward_funcs=per_task_reward({"easy": _first_in(EASY), "hard": _first_in(HARD)}),
                       args=args, train_dataset=Dataset.from_list(rows))
    tr.train()
    return tr


def test_trl_trainer_quotas_hold_and_weights_move_to_the_worse_task(tiny, tmp_path):
    tr = _run(tiny, tmp_path)
    h = tr.mt_history
    assert len(h) == 3 and tr.state.global_step == 3
    hard = tr.task_names.index("hard")
    for rec in h:  # RPS: the realised batch holds exactly the requested count per task
        assert rec["realized"] == rec["requested"], rec
        assert sum(rec["realized"]) == 4
        assert rec["acc"][hard] < rec["acc"][1 - hard]  # the planted difficulty
        assert len(rec["improvement"]) == 1  # one IWU update per optimizer step
    z = tr.weighter.z
    assert z[hard] > 0.5 > z[1 - hard], z  # IWU moves weight toward the worse task
    assert h[0]["z"] == [0.5, 0.5]


def test_trl_uniform_dynamic_sampling_keeps_z_fixed(tiny, tmp_path):
    tr = _run(tiny, tmp_path, weighting="uniform", sampling="dynamic")
    assert np.allclose(tr.z, 0.5) and all(rec["z"] == [0.5, 0.5] for rec in tr.mt_history)
    assert all(sum(rec["realized"]) == 4 for rec in tr.mt_history)
