"""Tiny random-init Hugging Face VLM checkpoints of two families, built in-process [R]: the
adapter tests and the smoke scale use them (no weights are downloaded, ever).

- ``tiny_llava``: ``LlavaForConditionalGeneration`` (CLIP tower, Llama LM) with a ``LlavaProcessor``
  around ``CLIPImageProcessorPil`` (torchvision is not in the lock): one ``<image>`` per patch;
- ``tiny_idefics3``: ``Idefics3ForConditionalGeneration`` with an ``Idefics3Processor``
  (``Idefics3ImageProcessorPil``, no image splitting): ``<fake_token_around_image><global-img>``
  then ``image_seq_len`` ``<image>`` tokens.

Both get a byte-level BPE tokenizer trained on the MC2 prompt words and a small chat template.
"""

from __future__ import annotations

from pathlib import Path

from ..config import ANSWER_INSTRUCTION, CONTEXT_PREFIX, DIGITS, FOLLOW

_CORPUS = " ".join([CONTEXT_PREFIX, ANSWER_INSTRUCTION, *FOLLOW.values(), "Which digit is shown?",
                    "Report the handwritten digit in the picture is", *DIGITS, "A. B."])


def _template(image: str) -> str:
    return ("{% for m in messages %}<|{{ m['role'] }}|>\n{% if m['content'] is string %}"
            "{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}"
            + image + "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def _tokenizer(specials: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<|end|>", "<|pad|>", "<|user|>",
                                                                   "<|assistant|>", *specials],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator([_CORPUS] * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|end|>", pad_token="<|pad|>")


def _text_config(vocab: int, layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                       tie_word_embeddings=False)


def _save(cls, cfg, proc, path, seed: int) -> Path:
    import torch

    torch.manual_seed(seed)
    path = Path(path)
    cls(cfg).save_pretrained(path)
    proc.save_pretrained(path)
    return path


def tiny_llava(path, seed: int = 0, layers: int = 3) -> Path:
    """Save a random-init tiny LLaVA (16x16 images, 4x4 patches: 16 image tokens) to ``path``."""
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tok = _tokenizer(["<image>"])
    ip = CLIPImageProcessorPil(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    proc = LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=4, image_token="<image>",
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          chat_template=_template("<image>\n"))
    cfg = LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, image_size=16, patch_size=4),
        text_config=_text_config(len(tok), layers), image_token_index=tok.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1, vision_feature_select_strategy="default")
    return _save(LlavaForConditionalGeneration, cfg, proc, path, seed)


def tiny_idefics3(path, seed: int = 0, layers: int = 3) -> Path:
    """Save a random-init tiny Idefics3 (16x16 images, 16 patches merged 2x2: 4 image tokens)."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    tok = _tokenizer(["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"])
    ip = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": 16},
                                   max_image_size={"longest_edge": 16})
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=4,
                             chat_template=_template("<image>\n"))
    cfg = Idefics3Config(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, image_size=16, patch_size=4),
        text_config=_text_config(len(tok), layers), scale_factor=2,
        image_token_id=tok.convert_tokens_to_ids("<image>"))
    return _save(Idefics3ForConditionalGeneration, cfg, proc, path, seed)


def tiny_qwen2_vl(path, seed: int = 0, layers: int = 3) -> Path:
    """Save a random-init tiny Qwen2-VL (images resized to 16x16, 4x4 patches, 2x2 merge: 4
    ``<|image_pad|>`` tokens between ``<|vision_start|>`` and ``<|vision_end|>``; M-RoPE), with
    ``Qwen2VLImageProcessor`` and ``Qwen2VLVideoProcessor`` (torchvision) as in the real folders."""
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tok = _tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    px = dict(min_pixels=256, max_pixels=256, patch_size=4, merge_size=2, temporal_patch_size=2)
    ip = Qwen2VLImageProcessor(size={"shortest_edge": 256, "longest_edge": 256}, **px)
    vp = Qwen2VLVideoProcessor(size={"shortest_edge": 256, "longest_edge": 256}, **px)
    proc = Qwen2VLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp,
                            chat_template=_template("<|vision_start|><|image_pad|><|vision_end|>"))
    ids = tok.convert_tokens_to_ids
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                bos_token_id=None, eos_token_id=ids("<|end|>"), pad_token_id=ids("<|pad|>"))
    cfg = Qwen2VLConfig(
        text_config=text,
        vision_config=dict(depth=2, embed_dim=16, hidden_size=32, num_heads=2, patch_size=4,
                           spatial_merge_size=2, temporal_patch_size=2, mlp_ratio=2),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    return _save(Qwen2VLForConditionalGeneration, cfg, proc, path, seed)


FAMILIES = {"llava": tiny_llava, "idefics3": tiny_idefics3, "qwen2_vl": tiny_qwen2_vl}
