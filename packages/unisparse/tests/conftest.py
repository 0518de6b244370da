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


def save_tiny_folder(out):
    """A tiny Llama saved as a Hugging Face folder with a word-level tokenizer (the core's
    shared/tests/test_hf.py recipe)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    LlamaForCausalLM(config).save_pretrained(out)
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(61)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", bos_token="<s>",
                            eos_token="</s>").save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny Llama folder on disk (config.json, model.safetensors, tokenizer)."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    return save_tiny_folder(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture
def model_copy(tiny_dir, tmp_path):
    """A fresh copy of ``tiny_dir`` to break one way."""
    import shutil

    return shutil.copytree(tiny_dir, tmp_path / "model")
