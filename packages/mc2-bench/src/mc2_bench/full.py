"""The GPU recipe of ``reproduce --scale full`` [C + R]: a user's local VLM folder (Qwen2.5-VL-7B,
LLaVA, ...) on the authors' MC2 file and COCO-2014 images, bf16 on CUDA. The first 10% of items
(seeded) are dev (they fit the diffmean direction at layers 20-23, the authors' window [C]
Rebuttal_Update); the rest are reported: every mode, both orders, letter answers (the paper's),
and a 7-point alpha sweep against a random direction of matched norm."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26_shared import Results

from .core import preference_direction
from .io import load_mc2
from .protocol import alpha_sweep, evaluate

ALPHAS = (-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3)  # [R] the authors' search_scale values were not readable
LAYERS = (20, 21, 22, 23)  # [C] Rebuttal_Update logit lens, Qwen2.5-VL-7B


def run_full(res: Results, paths: dict, out_dir, seed: int, device: str = "cuda", dtype=None,
             alphas=ALPHAS, layers=LAYERS, batch: int = 16, answer_mode: str = "letter") -> None:
    """The recipe on ``paths`` (MC2_MODEL, MC2_JSON, MC2_IMAGES). ``device`` / ``dtype``: where the
    model runs (default CUDA in bf16: the weights load straight onto the device). ``answer_mode``:
    ``letter`` (generate and parse, the paper's). The tests run this same function on a tiny
    random-init 24-layer LLaVA: on CPU with ``letter-logprob`` (one forward per answer), on CUDA
    with ``letter``. Results record the device the weights sat on and the layers each hook touched."""
    import torch

    from .hf import HFVisionChatAdapter

    items = load_mc2(paths["MC2_JSON"], paths["MC2_IMAGES"])
    perm = np.random.default_rng(seed).permutation(len(items))
    n_dev = max(2, len(items) // 10)
    dev = [items[i] for i in perm[:n_dev]]
    test = [items[i] for i in perm[n_dev:]]
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    ad = HFVisionChatAdapter.from_pretrained(paths["MC2_MODEL"], device=device, dtype=dtype, batch=batch)
    layers = tuple(x for x in layers if x < ad.n_layers) or (ad.n_layers // 2,)
    name = Path(paths["MC2_MODEL"]).name
    on = next(ad.model.parameters()).device
    res.add("full_env", name, "n_test_items", len(test), device=str(on), dtype=str(dtype),
            n_dev_items=len(dev), layers=list(layers))
    for mode in ("single", "base_image", "base_text", "icc"):
        r = evaluate(ad, test, mode, answer_mode)
        for k in ("vision_ratio", "text_ratio", "order_consistency", "invalid_rate", "instruction_following"):
            if k in r:
                res.add(f"full_{mode}", name, k, r[k], n=len(test))
    # the icc states of every layer in one pass per (order, instruction) (= protocol.hidden_pairs)
    hv = np.concatenate([ad.hidden(dev, "icc", o, "vision") for o in (0, 1)])
    ht = np.concatenate([ad.hidden(dev, "icc", o, "text") for o in (0, 1)])
    vecs = {L: preference_direction(hv[:, L], ht[:, L], "diffmean", seed) for L in layers}
    rand = {L: np.random.default_rng(seed + 104729 + L).standard_normal(len(vecs[L])) for L in layers}
    for dname, vv in (("diffmean", vecs), ("random", rand)):
        for r in alpha_sweep(ad, test, layers, vv, alphas, answer_mode):
            res.add("full_steer", f"{name}_{dname}", f"vision_ratio_alpha{r['alpha']:+g}", r["vision_ratio"],
                    layers=r["hook"]["layers"], touched=r["hook"]["touched_positions"])
            res.add("full_steer", f"{name}_{dname}", f"single_accuracy_alpha{r['alpha']:+g}",
                    r["single_accuracy"])
