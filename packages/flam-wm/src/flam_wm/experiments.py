"""The laptop-scale reproduction on SpriteWorld 32x32: FLAM vs the monolithic LAMs (continuous
``lam``; VQ ``lam-vq`` in ``full``; parameter counts matched) and FLAM without temporal attention,
equal data / steps / seeds, one frozen learned tokenizer per data set (fit on its training clips);
clips split train / dev / test. On dev: the learning rate and beta of every
model, FLAM's K, the probes' and the BC decoder's C and the strongest baseline; every claimed figure
on test. At the largest E the data are ``--controlled`` and pseudo-label BC is measured."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch

from icml26_shared import Results, UserError
from icml26_shared.runner import check_scale

from .baselines import build
from .bc import DECODER_C, pseudo_label_bc, true_action_bc
from .config import ModelConfig, TrainConfig
from .core import n_params
from .evaluate import (
    chance_per_entity,
    correspondence,
    latents,
    probe_matrix,
    rollout_metrics,
    slot_recon_error,
)
from .registry import DESCRIPTOR
from .sprites import generate
from .train import train

QUICK_STEPS = 600  # Adam steps x batch 32 for every model, at width 64: where slots bind on dev [R]
CFG = {
    "smoke": dict(entities=(1, 2), clips=20, frames=6, steps=3, batch=4, seeds=2, horizon=4, width=16,
                  device="cpu", probe_c=(1.0,), lr=(2e-3,), beta=(0.01,), k_offset=(1,), grid_steps=2,
                  labels=(0.1,), bc_steps=5, episodes=10, fit_clips=14, models=("flam", "lam"), decoder_c=(1.0,),
                  tok=dict(grid=8, channels=8, hidden=8, steps=5)),
    "quick": dict(entities=(1, 4), clips=600, frames=12, steps=QUICK_STEPS, batch=32, seeds=3, horizon=10, width=64,
                  unroll=4, unroll_from=QUICK_STEPS // 2, workers=2, device="cpu", probe_c=(0.1, 1.0),
                  lr=(1e-3, 3e-3), beta=(0.01, 0.03), k_offset=(1, 2), grid_steps=80, labels=(0.01, 0.1), bc_steps=400, episodes=200, fit_clips=210,
                  models=("flam", "lam"), decoder_c=DECODER_C, tok=dict(grid=8, channels=8, hidden=16, steps=300)),
    "full": dict(entities=(1, 2, 4, 6), clips=2000, frames=16, steps=3000, batch=32, seeds=5, horizon=10,
                 width=64, unroll=4, unroll_from=1500, device="cuda", probe_c=(0.1, 1.0), lr=(3e-4, 1e-3, 3e-3),
                 beta=(0.001, 0.01, 0.03, 0.1),
                 k_offset=(1, 2, 4), grid_steps=1000, labels=(0.01, 0.1), bc_steps=2000, episodes=500, fit_clips=1400,
                 models=("flam", "lam", "lam-vq"), decoder_c=DECODER_C, tok=dict(grid=8, channels=16, hidden=32, steps=3000)),
}
PROBE_C = (0.1, 1.0)
LATENT_DIM = 12  # d, divisible by K = 2..6 [R]


def _split(n: int) -> tuple[slice, slice, slice]:
    a, b = int(0.7 * n), int(0.85 * n)
    return slice(0, a), slice(a, b), slice(b, n)


def _evaluate(model, video, acts, sl, horizon, grid=PROBE_C, fit_clips=None) -> dict:
    tr, dv, te = sl
    if fit_clips is not None:  # probes / BC decoders and policies fit on the first fit_clips training clips
        tr = slice(tr.start, min(tr.stop, tr.start + fit_clips))
    out = {"dev": rollout_metrics(model, video[dv], horizon), "test": rollout_metrics(model, video[te], horizon),
           "slot_recon": slot_recon_error(model, video[te])}
    lat = {k: latents(model, video[s]) for k, s in (("train", tr), ("dev", dv), ("test", te))}
    act = {k: acts[s].reshape(-1, acts.shape[-1]) for k, s in (("train", tr), ("dev", dv), ("test", te))}
    # the probes' regularisation is chosen on dev, the correspondence is scored on test
    best_c = grid[0] if len(grid) == 1 else max(grid, key=lambda c: correspondence(
        probe_matrix(lat["train"], act["train"], lat["dev"], act["dev"], c), chance_per_entity(act["dev"]))[0])
    acc = probe_matrix(lat["train"], act["train"], lat["test"], act["test"], best_c)
    out["corr"], out["match"] = correspondence(acc, chance_per_entity(act["test"]))
    out["best_probe"] = float(acc.max(0).mean())  # each entity's best factor, no one-to-one matching
    out["probe_c"], out["latents"] = best_c, lat
    return out


def _model_cfg(name: str, e: int, width: int, choice: dict, tok=None, unroll: int = 1):
    kw = {} if tok is None else dict(tokenizer="conv", token_grid=tok.grid, token_channels=tok.channels,
                                     token_hidden=tok.hidden)
    cfg = build(name, e, width=width, latent_dim=LATENT_DIM, beta=choice["beta"], k_offset=choice.get("k_offset", 1),
                **kw)
    return ModelConfig(**{**cfg.to_dict(), "unroll": unroll})  # the same multi-step loss for every model


def _tokenizer(cfg: dict, video, sl, seed: int) -> tuple:
    """One frozen tokenizer per data set, fit on its training clips; (tokenizer, test PSNR, CPU s)."""
    from .evaluate import frame_metrics
    from .tokenizer import fit_tokenizer

    t0 = time.process_time()
    k = cfg["tok"]
    tok = fit_tokenizer(video[sl[0]], grid=k["grid"], channels=k["channels"], hidden=k["hidden"], steps=k["steps"],
                        seed=seed)
    cpu = time.process_time() - t0
    test = video[sl[2]].reshape(-1, *video.shape[-3:])
    with torch.no_grad():
        rec = tok.decode(tok.encode(torch.from_numpy(test))).clamp(0, 1).numpy()
    return tok, frame_metrics(rec, test.astype("float32") / 255.0)["psnr"], cpu


def _pool(cfg: dict):
    """``cfg["workers"]`` processes (spawned, one torch thread each) that run the independent
    training jobs side by side, or None for one process (smoke, full)."""
    if cfg.get("workers", 1) <= 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(cfg["workers"], mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker)


def _init_worker() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def _map(pool, fn, jobs: list) -> list:
    return [fn(*j) for j in jobs] if pool is None else list(pool.map(fn, *zip(*jobs, strict=True)))


def _grid_score(name, e, cfg, choice, video, sl, seed, tok) -> float:
    mcfg = _model_cfg(name, e, cfg["width"], choice, tok, cfg.get("unroll", 1))
    tcfg = TrainConfig(steps=cfg["grid_steps"], batch_size=cfg["batch"], window=5, lr=choice["lr"], seed=seed,
                       unroll_from=cfg.get("unroll_from", 0) * cfg["grid_steps"] // cfg["steps"])  # same share
    m = rollout_metrics(train(mcfg, tcfg, video[sl[0]], device=cfg["device"], tokenizer=tok), video[sl[1]],
                        cfg["horizon"])
    return m[f"psnr_{m['horizon']}"]


def _choose(name: str, e: int, cfg: dict, video, sl, seed: int, log: list, tok=None, pool=None) -> dict:
    """A small grid on dev at ``grid_steps`` steps and the first seed: lr x beta (lr only for
    lam-vq, which has no KL), then FLAM's K = E + offset; the best dev 10-step PSNR wins."""
    def scores(choices):
        vals = _map(pool, _grid_score, [(name, e, cfg, c, video, sl, seed, tok) for c in choices])
        log.extend({"entities": e, "model": name, **c, "dev_psnr_h": v} for c, v in zip(choices, vals, strict=True))
        return vals

    betas = cfg["beta"] if name != "lam-vq" else cfg["beta"][:1]
    grid = [{"lr": lr, "beta": b, "k_offset": cfg["k_offset"][0]} for lr in cfg["lr"] for b in betas]
    if len(grid) == 1 and (name != "flam" or len(cfg["k_offset"]) == 1):
        return grid[0]
    vals = scores(grid)
    best = grid[max(range(len(grid)), key=vals.__getitem__)]
    if name == "flam" and len(cfg["k_offset"]) > 1:
        ks = [best] + [{**best, "k_offset": k} for k in cfg["k_offset"][1:]]
        ks_scores = [max(vals)] + scores(ks[1:])
        best = ks[max(range(len(ks)), key=ks_scores.__getitem__)]
    return best


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
    pool = _pool(cfg)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn convergence chatter on tiny probes
            recs, grid_log, bc_recs = _run(res, cfg, seed, pool)
    finally:
        torch.set_num_threads(threads)
        if pool is not None:
            pool.shutdown()
    from .report import claims, notes, write_csv

    claims(res, recs, bc_recs, cfg, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in (("runs.csv", recs), ("dev_grid.csv", grid_log), ("bc.csv", bc_recs)):
        if rows:
            write_csv(out_dir / name, rows)
            res.figures.append(name)
    res.notes += notes(cfg, time.time() - t0)
    res.elapsed_s = time.time() - t0
    return res


def _one_run(name, e, sd, mcfg, lr, cfg, video, acts, sl, tok, controlled) -> tuple[dict, list]:
    """Train one model at one seed, score it on test (the probes' C chosen on dev) and, on
    controlled data, run pseudo-label BC: ``(runs.csv row, bc.csv rows)``."""
    tcfg = TrainConfig(steps=cfg["steps"], batch_size=cfg["batch"], window=5, lr=lr, seed=sd,
                       unroll_from=cfg.get("unroll_from", 0))
    t0 = time.process_time()
    model = train(mcfg, tcfg, video[sl[0]], device=cfg["device"], tokenizer=tok)
    train_cpu = time.process_time() - t0
    ev = _evaluate(model, video, acts, sl, cfg["horizon"], cfg["probe_c"], cfg["fit_clips"])
    t, d, h = ev["test"], ev["dev"], ev["test"]["horizon"]
    rec = {"entities": e, "model": name, "seed": sd, "params": n_params(model), "steps": cfg["steps"],
           "batch": cfg["batch"], "unroll": mcfg.unroll,
           "unroll_from": tcfg.unroll_from, "width": mcfg.width, "train_cpu_s": round(train_cpu, 1),
           "slots": mcfg.slots, "latent_per_slot": mcfg.slot_latent, "lr": lr,
           "beta": mcfg.beta, "psnr_1": t["psnr_1"], "psnr_h": t[f"psnr_{h}"],
           "ssim_1": t["ssim_1"], "ssim_h": t[f"ssim_{h}"], "mse_h": t[f"mse_{h}"],
           "dev_psnr_h": d[f"psnr_{h}"], "copy_1": t["copy_1"], "copy_h": t[f"copy_{h}"],
           "copy_ssim_h": t[f"copy_ssim_{h}"], "dev_copy_h": d[f"copy_{h}"],
           "corr": ev["corr"], "best_probe": ev["best_probe"], "probe_c": ev["probe_c"],
           "slot_recon": ev["slot_recon"]}
    bc = _bc_rows(name, e, sd, ev["latents"], video, acts, sl, cfg) if controlled and name in (
        "flam", "lam", "lam-vq") else []
    return rec, bc


def _true_bc(e, sd, video, acts, sl, cfg) -> dict:
    act, frames = _bc_inputs(video, acts, sl, cfg["fit_clips"])
    return {"entities": e, "model": "true-actions", "seed": sd, "labels": 1.0,
            "success": true_action_bc(act, frames, e, video.shape[2], seed=sd, bc_steps=cfg["bc_steps"],
                                      episodes=cfg["episodes"])}


def _run(res: Results, cfg: dict, seed: int, pool=None) -> tuple[list, list, list]:
    from .report import add_rows

    seeds = [seed + i for i in range(cfg["seeds"])]
    big = max(cfg["entities"])
    recs, grid_log, bc_recs, chosen = [], [], [], {}
    for e in sorted(cfg["entities"], reverse=True):  # the largest E first: its dev grid sets the choices
        controlled = e == big
        video, acts = generate(e, cfg["clips"], cfg["frames"], seed=seed * 1000 + e, controlled=controlled)
        sl = _split(cfg["clips"])
        tok, tok_psnr, tok_cpu = _tokenizer(cfg, video, sl, seed)
        res.add(f"sprites_E{e}", "tokenizer", "recon_psnr", [tok_psnr], seeds=[seed], unit="dB", split="test",
                grid=tok.grid, channels=tok.channels, fit_cpu_s=round(tok_cpu, 1))
        if e == big:
            chosen = {n: _choose(n, e, cfg, video, sl, seeds[0], grid_log, tok, pool) for n in cfg["models"]}
            chosen["flam-no-temporal"] = chosen["flam"]
        names = list(cfg["models"]) + (["flam-no-temporal"] if e == big else [])
        # every (model, seed) run is independent: side by side in the pool, results in a fixed order
        jobs = [(n, e, sd, _model_cfg(n, e, cfg["width"], chosen[n], tok, cfg.get("unroll", 1)), chosen[n]["lr"],
                 cfg, video, acts, sl, tok, controlled) for n in names for sd in seeds]
        for rec, bc in _map(pool, _one_run, jobs):
            recs.append(rec)
            bc_recs += bc
        if controlled:  # the reference: the same policy cloned from every true action
            bc_recs += _map(pool, _true_bc, [(e, sd, video, acts, sl, cfg) for sd in seeds])
        add_rows(res, recs, e, names, seeds, cfg)
    return recs, grid_log, bc_recs


def _bc_inputs(video, acts, sl, fit_clips=None):
    size = video.shape[2]
    if fit_clips is not None:
        sl = (slice(sl[0].start, min(sl[0].stop, sl[0].start + fit_clips)), *sl[1:])
    keys = ("train", "dev", "test")
    act = {k: acts[s][..., 0].reshape(-1) for k, s in zip(keys, sl, strict=True)}
    frames = {k: video[s][:, :-1].reshape(-1, size, size, 3) for k, s in zip(keys, sl, strict=True)}
    return act, frames


def _bc_rows(name, e, sd, lat, video, acts, sl, cfg) -> list[dict]:
    act, frames = _bc_inputs(video, acts, sl, cfg["fit_clips"])
    rows = []
    for frac in cfg["labels"]:
        out = pseudo_label_bc(lat, act, frames, frac, e, video.shape[2], seed=sd, bc_steps=cfg["bc_steps"],
                              episodes=cfg["episodes"], decoder_c=cfg["decoder_c"])
        rows.append({"entities": e, "model": name, "seed": sd, "labels": frac, **out})
    return rows
