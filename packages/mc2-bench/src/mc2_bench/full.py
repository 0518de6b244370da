"""The GPU recipe of ``reproduce --scale full`` [C + R]: a user's local VLM folder (Qwen2.5-VL-7B,
LLaVA, ...) on the authors' MC2 file and COCO-2014 images, bf16 on CUDA. The first 10% of items
(seeded) are dev (they fit the diffmean direction at layers 20-23, the authors' window [C]
Rebuttal_Update); the rest are reported: every mode, both orders, letter answers (the paper's),
and a 7-point alpha sweep against a random direction of matched norm."""

from __future__ import annotations

import numpy as np

from icml26_shared import Results

from .core import preference_direction
from .io import load_mc2
from .protocol import alpha_sweep, evaluate, hidden_pairs

ALPHAS = (-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3)  # [R] the authors' search_scale values were not readable
LAYERS = (20, 21, 22, 23)  # [C] Rebuttal_Update logit lens, Qwen2.5-VL-7B


def run_full(res: Results, paths: dict, out_dir, seed: int) -> None:
    import torch

    from .hf import HFVisionChatAdapter

    items = load_mc2(paths["MC2_JSON"], paths["MC2_IMAGES"])
    perm = np.random.default_rng(seed).permutation(len(items))
    n_dev = max(2, len(items) // 10)
    dev = [items[i] for i in perm[:n_dev]]
    test = [items[i] for i in perm[n_dev:]]
    ad = HFVisionChatAdapter.from_pretrained(paths["MC2_MODEL"], device="cuda", dtype=torch.bfloat16,
                                             batch=16)
    layers = tuple(x for x in LAYERS if x < ad.n_layers) or (ad.n_layers // 2,)
    name = paths["MC2_MODEL"].name
    for mode in ("single", "base_image", "base_text", "icc"):
        r = evaluate(ad, test, mode, "letter")
        for k in ("vision_ratio", "text_ratio", "order_consistency", "invalid_rate", "instruction_following"):
            if k in r:
                res.add(f"full_{mode}", name, k, r[k], n=len(test))
    vecs = {}
    for L in layers:
        hv, ht = hidden_pairs(ad, dev, L)
        vecs[L] = preference_direction(hv, ht, "diffmean", seed)
    rand = {L: np.random.default_rng(seed + 104729 + L).standard_normal(len(vecs[L])) for L in layers}
    for dname, vv in (("diffmean", vecs), ("random", rand)):
        for r in alpha_sweep(ad, test, layers, vv, ALPHAS, "letter"):
            res.add("full_steer", f"{name}_{dname}", f"vision_ratio_alpha{r['alpha']:+g}", r["vision_ratio"],
                    layers=r["hook"]["layers"], touched=r["hook"]["touched_positions"])
            res.add("full_steer", f"{name}_{dname}", f"single_accuracy_alpha{r['alpha']:+g}",
                    r["single_accuracy"])
