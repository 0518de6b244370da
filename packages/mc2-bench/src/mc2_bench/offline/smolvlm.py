"""``smol-vlm``: a LLaVA-architecture VLM around a frozen SmolLM2-135M-Instruct [R].

A small CLIP-style tower (16x16 inputs, 8x8 patches: 4 image tokens after the CLS token is
dropped) and LLaVA's two-layer projector are trained on the train split of scikit-learn digits
WITHOUT backpropagating through the LM: every image token regresses onto SmolLM2's input
embedding of the digit's name ("seven"), so the frozen LM reads the image as that word. The result
is saved with its ``LlavaProcessor`` (``CLIPImageProcessorPil``, a SmolLM2 chat template without the
default system turn) and reloads by ``AutoProcessor`` + ``AutoModelForImageTextToText`` alone;
builds are cached under ``icml26_shared.data.cache_dir("mc2-bench")``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from icml26_shared.io import dumps_json

from ..config import DIGITS

#: SmolLM2's own chat format, image first in the user turn, without the default system turn [R]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}"
    "{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>\n"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass(frozen=True)
class SmolVLMConfig:
    """All [R] (issue 27 item 4: a small CLIP-style tower + projector, LM frozen)."""

    image_size: int = 16  # [R] digits 8x8 upsampled by the processor
    patch_size: int = 8  # [R] 4 patches = 4 image tokens (every SmolLM2 token costs ~10-20 ms)
    hidden: int = 64  # [R] tower width
    layers: int = 2  # [R] tower depth
    heads: int = 4  # [R]
    steps: int = 400  # [R] seconds on 2 cores (no LM pass during training)
    batch: int = 64  # [R]
    lr: float = 2e-3  # [R]

    def key(self, seed: int) -> str:
        blob = json.dumps({**asdict(self), "seed": seed, "v": 1}, sort_keys=True).encode()
        return hashlib.sha1(blob).hexdigest()[:10]


def _to_rgb16(img8: np.ndarray):
    from PIL import Image

    return Image.fromarray(np.clip(np.asarray(img8) / 16.0 * 255.0, 0, 255).astype(np.uint8)).convert("RGB")


def _features(vlm, pix):
    """Projected image-token features (B, n_tokens, d) of LLaVA's tower + projector."""
    import torch

    out = vlm.model.get_image_features(pixel_values=pix)
    feats = getattr(out, "pooler_output", out)
    return feats if torch.is_tensor(feats) else torch.stack(list(feats))


def build_smol_vlm(out, images: np.ndarray, labels: np.ndarray, cfg: SmolVLMConfig = SmolVLMConfig(),
                   seed: int = 0, progress=None) -> dict:
    """Train the tower + projector on (train-split) digits and save the VLM to ``out`` (written
    under a temporary name, then renamed). Returns training stats."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.utils import logging as hf_logging

    from icml26_shared.data import smollm2_hf_dir

    hf_logging.set_verbosity_error()  # no weight-loading / shard-writing progress bars on stderr
    hf_logging.disable_progress_bar()
    src = smollm2_hf_dir()
    lm = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_id = tok.convert_tokens_to_ids("<image>")
    vocab = len(tok)
    name_ids = [tok.encode(d, add_special_tokens=False)[0] for d in DIGITS]
    emb = lm.get_input_embeddings().weight.detach()
    targets = emb[name_ids].clone()  # (10, 576): what the LM reads for each digit's name

    vcfg = CLIPVisionConfig(hidden_size=cfg.hidden, intermediate_size=4 * cfg.hidden,
                            num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                            image_size=cfg.image_size, patch_size=cfg.patch_size)
    tcfg = lm.config
    tcfg.vocab_size = vocab
    lcfg = LlavaConfig(vision_config=vcfg, text_config=tcfg, image_token_index=image_id,
                       vision_feature_layer=-1, vision_feature_select_strategy="default",
                       projector_hidden_act="gelu", tie_word_embeddings=True)
    torch.manual_seed(seed)
    vlm = LlavaForConditionalGeneration(lcfg)
    lm.resize_token_embeddings(vocab, mean_resizing=False)
    with torch.no_grad():
        lm.get_input_embeddings().weight[image_id:] = 0.0
    vlm.model.language_model.load_state_dict(lm.model.state_dict())
    vlm.lm_head.weight = vlm.model.language_model.embed_tokens.weight
    for p in vlm.model.language_model.parameters():
        p.requires_grad_(False)

    ip = CLIPImageProcessorPil(size={"shortest_edge": cfg.image_size},
                               crop_size={"height": cfg.image_size, "width": cfg.image_size})
    proc = LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=cfg.patch_size,
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          image_token="<image>", chat_template=CHAT_TEMPLATE)
    pix = ip([_to_rgb16(x) for x in images], return_tensors="pt")["pixel_values"]
    y = torch.as_tensor(labels, dtype=torch.long)
    params = [p for n, p in vlm.named_parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    g = torch.Generator().manual_seed(seed)
    scale = float(targets.norm(dim=-1).mean())
    vlm.train()
    loss = torch.tensor(0.0)
    for step in range(cfg.steps):
        idx = torch.randint(len(y), (cfg.batch,), generator=g)
        feats = _features(vlm, pix[idx]).view(cfg.batch, -1, targets.shape[1])
        tgt = targets[y[idx]][:, None, :].expand_as(feats)
        loss = ((feats - tgt) ** 2).sum(-1).mean() / scale ** 2  # regression onto the name's embedding
        opt.zero_grad()
        loss.backward()
        lr = cfg.lr * 0.5 * (1 + np.cos(np.pi * step / cfg.steps))
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        if progress is not None:
            progress(step, float(loss.detach()))
    vlm.eval()
    with torch.no_grad():  # nearest-name accuracy of the image tokens (no LM pass)
        f = _features(vlm, pix).reshape(len(y), -1, targets.shape[1]).mean(1)
        train_acc = float((torch.cdist(f, targets).argmin(1) == y).float().mean())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    vlm.to(torch.bfloat16).save_pretrained(tmp)
    proc.save_pretrained(tmp)
    stats = {"final_loss": float(loss.detach()), "train_nearest_name_accuracy": train_acc,
             "config": asdict(cfg), "seed": seed}
    (tmp / "mc2_smol_vlm.json").write_text(dumps_json(stats, indent=1))
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return stats


def cached_smol_vlm(images, labels, cfg: SmolVLMConfig = SmolVLMConfig(), seed: int = 0) -> Path:
    """The cached build for (cfg, seed), built once under ``cache_dir("mc2-bench")``."""
    from icml26_shared.data import cache_dir

    path = cache_dir("mc2-bench") / f"smol-vlm-{cfg.key(seed)}"
    if not (path / "config.json").is_file():
        build_smol_vlm(path, images, labels, cfg, seed)
    return path


def copy_model(src: Path, out: Path) -> Path:
    """Copy a model folder to ``out`` (temporary name, then rename; ``atomic_dir``)."""
    from icml26_shared.io import atomic_dir

    with atomic_dir(out, exists_error="{path} already exists (choose another path; nothing was "
                                      "overwritten)") as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
    return out
