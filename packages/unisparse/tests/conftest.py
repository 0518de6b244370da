"""Fixtures shared by the unisparse tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def tiny():
    """A random 2-layer Llama (GQA: 4 query heads, 2 KV heads), the same in every module."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=512)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny Llama folder on disk (config.json, model.safetensors, tokenizer)."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from icml26_shared.testing import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture
def model_copy(tiny_dir, tmp_path):
    """A fresh copy of ``tiny_dir`` to break one way."""
    import shutil

    return shutil.copytree(tiny_dir, tmp_path / "model")
