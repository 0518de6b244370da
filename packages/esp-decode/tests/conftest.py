import pytest
import torch

torch.set_num_threads(1)


def _tiny(kind: str, vocab: int = 40, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    Cfg, M = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[kind]
    cfg = Cfg(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, eos_token_id=None,
              bos_token_id=None)
    cfg._attn_implementation = "sdpa"
    return M(cfg).eval()


@pytest.fixture(scope="session")
def tiny_models():
    return {"llama": _tiny("llama"), "qwen2": _tiny("qwen2", seed=1)}


@pytest.fixture(scope="session")
def tiny_llama(tiny_models):
    return tiny_models["llama"]


@pytest.fixture(scope="session")
def make_tiny():
    return _tiny


@pytest.fixture(scope="session")
def greedy():
    return _hf_greedy


def _hf_greedy(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()



@pytest.fixture(scope="session")
def two_step_law_pvalue():
    return _two_step_law_pvalue


def _two_step_law_pvalue(model, prompt, new):
    """Chi-square p-value of the sampled (token 2, token 3) pairs in ``new`` (rows ``[t1, t2, t3]``)
    against the model's joint law of tokens 2–3, marginalised over token 1 (vocabulary 5)."""
    import numpy as np
    from scipy.stats import chisquare

    counts = np.zeros((5, 5))
    for _, b, c in new:
        counts[b, c] += 1
    with torch.no_grad():
        p1 = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], -1)
        p2 = torch.softmax(model(input_ids=torch.tensor([[*prompt, t] for t in range(5)])).logits[:, -1], -1)
        seqs = torch.tensor([[*prompt, a, b] for a in range(5) for b in range(5)])
        p3 = torch.softmax(model(input_ids=seqs).logits[:, -1], -1).reshape(5, 5, 5)
    expected = (p1[:, None, None] * p2[:, :, None] * p3).sum(0).double().numpy().ravel()
    return chisquare(counts.ravel(), expected * len(new) / expected.sum()).pvalue


@pytest.fixture(scope="session")
def trained_tiny():
    """A small model whose masks predict: the package's tiny character LM (d 64, 2 layers) trained
    400 fixed steps on its three regimes (~8 CPU-s on one thread), and 4 prompts per regime
    (48 characters). Shared by the mechanism tests (``test_mechanism.py``)."""
    from esp_decode.tiny import REGIMES, tiny_prompts, train_tiny

    model, tok, _ = train_tiny(0, float("inf"), 400, d=64, layers=2, seq=64, batch=16)
    prompts = [tok.encode(p) for r in REGIMES for p in tiny_prompts(r, 4, 0, 48)]
    return model, prompts
