"""Tiny random-init causal LMs (two architectures) and adapters made by peft itself."""

from __future__ import annotations

import warnings

import pytest
import torch

ARCHS = ("llama", "qwen2")
TARGETS = ["q_proj", "v_proj"]


def tiny_lm(arch: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    kw = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    if arch == "llama":
        return LlamaForCausalLM(LlamaConfig(**kw)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**kw)).eval()


def make_adapter(base_dir, out, peft_config, seed):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = get_peft_model(model, peft_config)
    pm.save_pretrained(out)
    return out


def oft_config(**kw):
    from peft import OFTConfig

    args = dict(oft_block_size=8, r=0, target_modules=TARGETS, init_weights=False, use_cayley_neumann=False)
    args.update(kw)
    return OFTConfig(**args)


def _lm(arch, tmp_path_factory):
    root = tmp_path_factory.mktemp(arch)
    base_dir = root / "base"
    tiny_lm(arch).save_pretrained(base_dir)
    adapters = [make_adapter(base_dir, root / f"oft{i}", oft_config(), seed=i + 1) for i in range(3)]
    return {"arch": arch, "root": root, "base": base_dir, "oft": adapters}


@pytest.fixture(scope="session")
def lm(tmp_path_factory):
    """A tiny Llama base model folder and three OFT adapters (exact Cayley path) on it."""
    return _lm("llama", tmp_path_factory)


@pytest.fixture(scope="session", params=ARCHS)
def lm_arch(request, tmp_path_factory, lm):
    """The same for each architecture (Llama, Qwen2)."""
    return lm if request.param == "llama" else _lm(request.param, tmp_path_factory)


def load_peft(base_dir, adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(adapter_dir)).eval()


def logits(model, seed=0):
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model(input_ids=ids).logits


class Kit:
    """The helpers above, handed to tests as a fixture (test modules cannot import conftest)."""

    load_peft = staticmethod(load_peft)
    logits = staticmethod(logits)
    make_adapter = staticmethod(make_adapter)
    oft_config = staticmethod(oft_config)
    tiny_lm = staticmethod(tiny_lm)


@pytest.fixture(scope="session")
def kit():
    return Kit
