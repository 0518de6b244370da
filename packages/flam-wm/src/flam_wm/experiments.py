"""The laptop-scale reproduction on SpriteWorld 32x32: FLAM vs the monolithic LAM (parameter
counts matched) and FLAM without temporal attention, equal data / steps / seeds; clips split
train / dev / test; the probe regularisation and the strongest PSNR baseline chosen on dev,
every claimed figure measured on test."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
import torch

from icml26_shared import ClaimCheck, Results, UserError
from icml26_shared.eval import paired_interval
from icml26_shared.runner import check_scale

from .baselines import build
from .config import TrainConfig
from .core import n_params
from .registry import CLAIMS, DESCRIPTOR
from .sprites import generate
from .train import chance_per_entity, correspondence, latents, probe_matrix, rollout_psnr, train

CFG = {
    "smoke": dict(entities=(1, 2), clips=20, frames=6, steps=3, batch=4, seeds=2, horizon=4, width=16,
                  device="cpu", probe_c=(1.0,)),
    "quick": dict(entities=(1, 4), clips=300, frames=12, steps=200, batch=16, seeds=3, horizon=10,
                  width=32, device="cpu"),
    "full": dict(entities=(1, 2, 4, 6), clips=2000, frames=16, steps=3000, batch=32, seeds=5, horizon=10,
                 width=64, device="cuda"),
}
PROBE_C = (0.1, 1.0)
CLAIM = {c.id: c for c in CLAIMS}


def _split(n: int) -> tuple[slice, slice, slice]:
    a, b = int(0.7 * n), int(0.85 * n)
    return slice(0, a), slice(a, b), slice(b, n)


def _evaluate(model, video, acts, sl, horizon, grid=PROBE_C) -> dict:
    tr, dv, te = sl
    out = {"dev": rollout_psnr(model, video[dv], horizon), "test": rollout_psnr(model, video[te], horizon)}
    lat = {k: latents(model, video[s]) for k, s in (("train", tr), ("dev", dv), ("test", te))}
    act = {k: acts[s].reshape(-1, acts.shape[-1]) for k, s in (("train", tr), ("dev", dv), ("test", te))}
    # the probes' regularisation is chosen on dev, the correspondence is scored on test
    best_c = grid[0] if len(grid) == 1 else max(grid, key=lambda c: correspondence(
        probe_matrix(lat["train"], act["train"], lat["dev"], act["dev"], c), chance_per_entity(act["dev"]))[0])
    acc = probe_matrix(lat["train"], act["train"], lat["test"], act["test"], best_c)
    out["corr"], out["match"] = correspondence(acc, chance_per_entity(act["test"]))
    out["best_probe"] = float(acc.max(0).mean())  # each entity's best factor, no one-to-one matching
    out["probe_c"] = best_c
    return out


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    cfg = CFG[scale]
    if cfg["device"] == "cuda" and not torch.cuda.is_available():
        raise UserError("the full scale needs a CUDA device (E in {1,2,4,6}, 2000 clips, 3000 steps, 5 seeds); "
                        "run --scale quick on CPU")
    t0 = time.time()
    out_dir = Path(out_dir)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        recs = _run(res, cfg, seed)
    finally:
        torch.set_num_threads(threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "runs.csv.tmp"
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    tmp.replace(out_dir / "runs.csv")
    res.figures.append("runs.csv")
    res.notes += [
        "Faithful [P]: the loss ||z'-z'_hat||^2 + beta*sum_k KL, per-slot Gaussian latents of size d/K with "
        "a N(0, I) prior, Slot Attention with slots carried over time and causal temporal attention, IDM and "
        "FDM shared across slots, an aggregator rebuilding z_{t+1}, the monolithic baseline and the "
        "no-temporal-attention ablation. Reconstructed [R]: the tokenizer (a frozen exact 4x4 patch "
        "tokenizer instead of a VQ-VAE), the FDM's cross-slot attention, the mixture aggregator, an "
        "auxiliary slot-reconstruction term, every default, SpriteWorld and the correspondence score.",
        "Splits: 70/15/15 clips train/dev/test per data set. Chosen on dev: the probes' C (from "
        f"{PROBE_C}) and the strongest PSNR baseline (lam vs copying frame 0). beta, lr and K are NOT "
        "tuned (fixed defaults, beta=0.01, lr=2e-3, K=E+1). All claimed figures are on test.",
        f"Budget: {cfg['steps']} Adam steps x batch {cfg['batch']} x 5-frame windows for every model, "
        f"{cfg['seeds']} seeds, {cfg['clips']} clips x {cfg['frames']} frames; one torch thread. "
        f"Wall time {time.time() - t0:.0f} s (the 2-core machine may be shared).",
        "Not done here: BC from pseudo-labels, lam-vq, the texture-distractor rows (the generator has it; "
        "the reproduction does not use it), checkpoint resume and accelerate (see README).",
    ]
    res.elapsed_s = time.time() - t0
    return res


def _run(res: Results, cfg: dict, seed: int) -> list[dict]:
    seeds = [seed + i for i in range(cfg["seeds"])]
    big = max(cfg["entities"])
    recs, table = [], {}
    for e in cfg["entities"]:
        video, acts = generate(e, cfg["clips"], cfg["frames"], seed=seed * 1000 + e)
        sl = _split(cfg["clips"])
        names = ["flam", "lam"] + (["flam-no-temporal"] if e == big else [])
        for name in names:
            mcfg = build(name, e, width=cfg["width"])
            chosen: list[float] = []
            for sd in seeds:
                tcfg = TrainConfig(steps=cfg["steps"], batch_size=cfg["batch"], window=5, seed=sd)
                model = train(mcfg, tcfg, video[sl[0]], device=cfg["device"])
                # the probes' C is chosen on dev at the first seed, then kept for the others
                grid = (chosen[0],) if chosen else cfg.get("probe_c", PROBE_C)
                ev = _evaluate(model, video, acts, sl, cfg["horizon"], grid)
                chosen.append(ev["probe_c"])
                h = ev["test"]["horizon"]
                rec = {"entities": e, "model": name, "seed": sd, "params": n_params(model),
                       "slots": mcfg.slots, "latent_per_slot": mcfg.slot_latent,
                       "psnr_1": ev["test"]["psnr_1"], "psnr_h": ev["test"][f"psnr_{h}"],
                       "dev_psnr_h": ev["dev"][f"psnr_{h}"], "copy_1": ev["test"]["copy_1"],
                       "copy_h": ev["test"][f"copy_{h}"], "dev_copy_h": ev["dev"][f"copy_{h}"],
                       "corr": ev["corr"], "best_probe": ev["best_probe"], "probe_c": ev["probe_c"]}
                recs.append(rec)
                table[(e, name, sd)] = rec
            for metric, unit in (("psnr_1", "dB"), ("psnr_h", "dB"), ("corr", ""), ("best_probe", "")):
                vals = [table[(e, name, s)][metric] for s in seeds]
                res.add(f"sprites_E{e}", name, metric.replace("_h", f"_{cfg['horizon']}"), vals, seeds=seeds,
                        unit=unit, params=table[(e, name, seeds[0])]["params"], split="test")
        for metric in ("copy_1", "copy_h"):
            res.add(f"sprites_E{e}", "copy-frame-0", metric.replace("copy_h", f"psnr_{cfg['horizon']}")
                    .replace("copy_1", "psnr_1"), [table[(e, "flam", s)][metric] for s in seeds],
                    seeds=seeds, unit="dB", split="test")
    _claims(res, table, seeds, cfg, big)
    return recs


def _claims(res: Results, table: dict, seeds: list[int], cfg: dict, big: int) -> None:
    small = min(cfg["entities"])
    col = lambda e, m, k: np.array([table[(e, m, s)][k] for s in seeds])  # noqa: E731
    # strongest PSNR baseline at E=big chosen on dev: the monolithic LAM or copying frame 0
    lam_dev, copy_dev = col(big, "lam", "dev_psnr_h").mean(), col(big, "flam", "dev_copy_h").mean()
    base, key = ("lam", "psnr_h") if lam_dev >= copy_dev else ("copy-frame-0", "copy_h")
    ours = col(big, "flam", "psnr_h")
    theirs = col(big, "lam", "psnr_h") if base == "lam" else col(big, "flam", "copy_h")
    iv = paired_interval(ours, theirs)
    res.claims.append(ClaimCheck.compare(
        CLAIM["psnr10_gap_E4"], float(ours.mean()), float(theirs.mean()), base, margin=2.0,
        interval=(iv.low, iv.high),
        note=f"E={big}, test clips, {len(seeds)} seeds; baseline chosen on dev (lam {lam_dev:.2f} vs copy "
             f"{copy_dev:.2f} dB); no-temporal ablation {col(big, 'flam-no-temporal', 'psnr_h').mean():.2f} dB"))
    gap_big = col(big, "flam", "psnr_h") - col(big, "lam", "psnr_h")
    gap_small = col(small, "flam", "psnr_h") - col(small, "lam", "psnr_h")
    iv = paired_interval(gap_big, gap_small)
    res.claims.append(ClaimCheck.compare(
        CLAIM["gap_grows"], float(gap_big.mean()), float(gap_small.mean()), f"FLAM-lam gap at E={small}",
        interval=(iv.low, iv.high), note=f"paired over seeds; gap at E={small} is the baseline"))
    corr = col(big, "flam", "corr")
    iv = paired_interval(corr)
    res.claims.append(ClaimCheck.compare(
        CLAIM["corr_E4"], float(corr.mean()), threshold=0.93, interval=(iv.low, iv.high),
        note=f"E={big}, test transitions; no-temporal ablation {col(big, 'flam-no-temporal', 'corr').mean():.3f}"))
    lam_corr = col(big, "lam", "best_probe")
    iv = paired_interval(corr, lam_corr)
    res.claims.append(ClaimCheck.compare(
        CLAIM["corr_vs_lam"], float(corr.mean()), float(lam_corr.mean()), "lam (best probe per entity)",
        margin=0.1, interval=(iv.low, iv.high),
        note="the monolithic latent's best per-entity probe (no one-to-one matching), a generous baseline"))
