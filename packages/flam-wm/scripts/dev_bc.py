"""0.9.3's dev check of pseudo-label BC at 1% vs 10% labels (README, "Dev check of BC at 10% labels"):
one FLAM run on the E = 4 quick data (as ``dev_binding.py``: seed-4 data, its tokenizer on the 420 training
clips, quick's FLAM setting), then, for each label fraction, the decoder (input and C chosen on the dev
transitions), the pseudo-labels' accuracy on the fit and dev transitions, and for each of the policy's
Adam starts (0.9.3: all ten, and which one the old and the new restart rules keep) its training cross-entropy on its labels, its accuracy against the *true* actions of the fit
transitions and its reach-target success; beside the same for the true actions. Dev clips and fresh
episodes only (no test clip is read).

    OMP_NUM_THREADS=1 uv run python packages/flam-wm/scripts/dev_bc.py --seed 16
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import torch
from flam_wm.baselines import build
from flam_wm.bc import (
    MAX_RESTARTS,
    RESTARTS,
    Policy,
    _fit_loss,
    fit_decoder,
    fit_start,
    keep_starting,
    label_entropy,
    reach_target_success,
)
from flam_wm.config import ModelConfig, TrainConfig
from flam_wm.evaluate import latents
from flam_wm.experiments import LATENT_DIM, _split
from flam_wm.sprites import generate
from flam_wm.tokenizer import fit_tokenizer
from flam_wm.train import train


def starts(frames, labels, true, size, seed, steps=400, batch=64, restarts=MAX_RESTARTS, episodes=200):
    """``bc.clone``'s loop, every one of ``MAX_RESTARTS`` starts reported: (fit CE on its labels, accuracy
    vs true, success); ``summary`` adds which start 0.8-0.9.2's rule (best of 3) and 0.9.3's (more starts
    while all sit on the plateau) keep."""
    x = torch.cat([Policy.pool(torch.from_numpy(frames[i:i + 4096])) for i in range(0, len(frames), 4096)])
    y = torch.as_tensor(labels, dtype=torch.long)
    out = []
    for r in range(restarts):
        pol = fit_start(x, y, size, seed + 7919 * r, steps, batch)
        with torch.no_grad():
            pred = pol.from_pooled(x).argmax(-1).numpy()
        out.append({"fit_ce": round(_fit_loss(pol, x, y), 3), "agree_labels": round(float(np.mean(pred == labels)), 3),
                    "acc_true": round(float(np.mean(pred == true)), 3),
                    "success": reach_target_success(pol.act, 4, size, episodes=episodes, seed=10_000 + seed)})
    return out


def summary(out: list, labels) -> dict:
    """The success of the start each rule keeps (the lowest fit CE among the starts it makes)."""
    h = label_entropy(labels)
    n = RESTARTS
    while n < len(out) and keep_starting(n, min(o["fit_ce"] for o in out[:n]), h, RESTARTS, len(out)):
        n += 1
    pick = lambda k: min(out[:k], key=lambda o: o["fit_ce"])["success"]  # noqa: E731
    return {"entropy": round(h, 3), "old_best_of_3": pick(RESTARTS), "new_starts": n, "new_kept": pick(n)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--set", default="slots=6,latent_dim=12,local_sigma=1.0,free_bits=1.6")
    p.add_argument("--labels", default="0.01,0.1")
    a = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    video, acts = generate(4, 600, 12, seed=4, controlled=True)
    tr, dv, _ = _split(600)
    tok = fit_tokenizer(video[tr], grid=8, channels=8, hidden=16, steps=300, seed=0)
    cfg = build("flam", 4, width=32, latent_dim=LATENT_DIM, beta=0.03, tokenizer="conv", token_grid=8,
                token_channels=8, token_hidden=16)
    over = {}
    for kv in filter(None, a.set.split(",")):
        k, v = kv.split("=")
        over[k] = type(getattr(cfg, k))(v)
    cfg = ModelConfig(**{**cfg.to_dict(), "unroll": 4, **over})
    model = train(cfg, TrainConfig(steps=800, batch_size=32, window=5, lr=3e-3, seed=a.seed, unroll_from=400),
                  video[tr], tokenizer=tok)
    fit = slice(0, 210)
    lat = {"train": latents(model, video[fit]), "dev": latents(model, video[dv])}
    act = {"train": acts[fit][..., 0].reshape(-1), "dev": acts[dv][..., 0].reshape(-1)}
    frames = video[fit][:, :-1].reshape(-1, 32, 32, 3)
    res = {"seed": a.seed, "true": starts(frames, act["train"], act["train"], 32, a.seed)}
    res["true_rule"] = summary(res["true"], act["train"])
    for frac in (float(x) for x in a.labels.split(",")):
        rng = np.random.default_rng(a.seed)
        m = len(act["train"])
        lab = rng.choice(m, max(5, int(round(frac * m))), replace=False)
        decode, c, dev_acc, view = fit_decoder(lat["train"][lab], act["train"][lab], lat["dev"], act["dev"])
        pseudo = decode(lat["train"])
        conf = np.zeros((5, 5), int)
        np.add.at(conf, (act["train"], pseudo), 1)
        res[str(frac)] = {"labelled": len(lab), "decoder_c": c, "factor": view, "decoder_dev_acc": round(dev_acc, 3),
                          "pseudo_fit_acc": round(float(np.mean(pseudo == act["train"])), 3),
                          "pseudo_label_counts": np.bincount(pseudo, minlength=5).tolist(),
                          "true_label_counts": np.bincount(act["train"], minlength=5).tolist(),
                          "confusion_true_x_pseudo": conf.tolist(),
                          "starts": starts(frames, pseudo, act["train"], 32, a.seed)}
        res[str(frac)]["rule"] = summary(res[str(frac)]["starts"], pseudo)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
