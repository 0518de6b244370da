"""The dev check behind 0.4's Slot Attention fix (README, "Dev check of slot binding"): one FLAM or
lam run on the E = 4 quick data (seed 4, --controlled, 600 clips x 12 frames; its tokenizer fit on
the 420 training clips as in quick), scored on the 90 dev clips only. One torch thread.

    uv run python packages/flam-wm/scripts/dev_binding.py --width 64 --beta 0.03 --steps 600
    uv run python packages/flam-wm/scripts/dev_binding.py --width 64 --beta 0.03 --steps 600 --pos-keys

Prints one JSON line: dev PSNR at 1 / 10 steps (and copying frame 0), the slot reconstruction error
||z_0 - Agg(s_0)||^2 as a fraction of the tokens' variance, the Hungarian-matched correspondence
(probes fit on the first 210 training clips' transitions, C = 1, scored on dev), the probe matrix,
the training losses every 50 steps (one-step error, the mean unrolled error, recon, KL), the run's
training CPU seconds and, with --eval-at, the same dev scores at earlier steps of the same run.

    uv run python packages/flam-wm/scripts/dev_binding.py --width 64 --steps 600 --unroll 4 --eval-at 300
    uv run python packages/flam-wm/scripts/dev_binding.py --model lam --width 64 --steps 600 --unroll 4

0.7 (README, "Dev check of slot binding, 0.7"): FLAM also reports ``mask_ari`` (do Slot Attention's
masks put each sprite in its own slot? foreground ARI on the first 40 dev clips, 1 = yes, 0 = one slot
holds them all); ``--set`` overrides ModelConfig fields, e.g. 0.6's model and quick setting:

    uv run python packages/flam-wm/scripts/dev_binding.py --width 64 --steps 600 --unroll 4 --unroll-from 300 \
        --set slot_pos=False,seeding=learned,decoder=mlp,recon_all=False
    uv run python packages/flam-wm/scripts/dev_binding.py --width 32 --steps 800 --unroll 4 --unroll-from 400

0.9 (README, "Dev check of local slot attention"): dev seeds 10-12, K = 6, local slot attention:

    uv run python packages/flam-wm/scripts/dev_binding.py --width 32 --beta 0.03 --steps 800 --unroll 4 \
        --unroll-from 400 --seed 10 --set slots=6,latent_dim=12,local_sigma=1.0

0.9.1 (README, "Dev check of the per-slot latents"): ``--diagnose`` adds each sprite's slot-index
consistency, a probe on the latent of the slot that owns it, the latents' KL per slot and the dev PSNR
with the latents zeroed; the free-bits floor adopted there:

    uv run python packages/flam-wm/scripts/dev_binding.py --width 32 --beta 0.03 --steps 800 --unroll 4 \
        --unroll-from 400 --seed 13 --diagnose --set slots=6,latent_dim=12,local_sigma=1.0,free_bits=1.6

0.9.3 (README, "Dev check of latent use"): dev seeds 10-32 at that setting; the remedies tried (neither
adopted) are ``--slot-warmup 200`` (reconstruction alone for the first 200 steps) and
``logvar_init=-4.0`` in ``--set`` (the IDM's log-variance head started small); ``--eval-at
50,100,200,300,400`` traced the latents' use over one run (seeds 16, 18).

0.9.4 (README, "Dev check of best-of-R starts"): ``--starts 2 --start-steps 200`` (best-of-R starts,
``TrainConfig.starts``) at that setting, dev seeds 10-32; the JSON gains ``start`` (the candidate that
continued, its index, R and each candidate's score). Candidates' steps are logged with their index as a
sixth field; ``--eval-at`` scores only the continuing run (steps after the choice)."""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import torch
from flam_wm.baselines import build
from flam_wm.config import ModelConfig, TrainConfig
from flam_wm.evaluate import (
    chance_per_entity,
    correspondence,
    latents,
    mask_ari,
    probe_matrix,
    rollout_metrics,
    slot_recon_error,
)
from flam_wm.experiments import LATENT_DIM, _split
from flam_wm.sprites import entity_labels, generate
from flam_wm.tokenizer import fit_tokenizer
from flam_wm.train import train


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="flam", choices=["flam", "lam"])
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--beta", type=float, default=0.03)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument(
        "--pos-keys", action="store_true", help="position in Slot Attention's keys (0.3's form)"
    )
    p.add_argument("--unroll", type=int, default=1, help="FDM steps unrolled in the loss (0.4.1)")
    p.add_argument("--unroll-from", type=int, default=0, help="one-step loss until this step")
    p.add_argument("--eval-at", default="", help="also score dev at these steps, e.g. 300,450")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kl-warmup", type=int, default=0, help="beta ramps from 0 over these steps (0.7)")
    p.add_argument("--slot-warmup", type=int, default=0, help="reconstruction alone until this step (0.9.3)")
    p.add_argument("--starts", type=int, default=1, help="best-of-R starts (0.9.4)")
    p.add_argument("--start-steps", type=int, default=0, help="each best-of-R candidate's steps (0.9.4)")
    p.add_argument("--diagnose", action="store_true", help="0.9.1's latent diagnostics (see diagnose)")
    p.add_argument("--set", default="", help="ModelConfig overrides, k=v,k=v (0.7)")
    a = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    video, acts = generate(4, 600, 12, seed=4, controlled=True)
    dv = _split(600)[1]

    def score(model) -> dict:
        m = rollout_metrics(model, video[dv], 10)
        fit = slice(0, 210)
        acc = probe_matrix(
            latents(model, video[fit]),
            acts[fit].reshape(-1, 4),
            latents(model, video[dv]),
            acts[dv].reshape(-1, 4),
            1.0,
        )
        corr, _ = correspondence(acc, chance_per_entity(acts[dv].reshape(-1, 4)))
        return {
            "dev_psnr_1": round(m["psnr_1"], 2),
            "dev_psnr_10": round(m["psnr_10"], 2),
            "copy_1": round(m["copy_1"], 2),
            "copy_10": round(m["copy_10"], 2),
            "slot_recon": round(slot_recon_error(model, video[dv]), 3),
            "corr": round(corr, 3),
            "probe_matrix": np.round(acc, 2).tolist(),
            **({"mask_ari": round(mask_ari(model, video[dv][:40], entity_labels(video[dv][:40], 4)), 3)}
               if a.model == "flam" else {}),
            **((diagnose(model) if a.model == "flam" else use(model)) if a.diagnose else {}),
        }

    @torch.no_grad()
    def owned(model, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(each sprite's owning slot per transition [M, E]: the slot most attending to its cells on the
        transition's first frame, the last owner where hidden; posterior means [M, K, d/K]; KL [M, K])."""
        z = model.tokenize(v)
        s, attn = model.factorizer.encode(z)
        mu, logvar = model.infer(s)
        kl = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1)
        lab = entity_labels(v, 4)
        own = np.zeros((len(v), v.shape[1] - 1, 4), np.int64)
        for e in range(4):
            mass = (attn[:, :-1] * torch.as_tensor(lab[:, :-1, :, None] == e)).sum(2).numpy()  # [N, T-1, K]
            o = mass.argmax(-1)
            for t in range(1, o.shape[1]):
                hid = mass[:, t].sum(-1) == 0
                o[hid, t] = o[hid, t - 1]
            own[..., e] = o
        return own.reshape(-1, 4), mu.reshape(-1, *mu.shape[2:]).numpy(), kl.reshape(-1, kl.shape[-1]).numpy()

    @torch.no_grad()
    def diagnose(model) -> dict:
        """0.9.1 (README, "Dev check of the per-slot latents"): is each sprite in the same slot index in
        every clip (``own_consistency``: the share of dev transitions in which its modal slot owns it)?
        Does the latent of the slot that owns the sprite in that clip say its move (``owner_probe``:
        a probe per sprite on its owner's latent, fit on the first 210 training clips, scored on dev)?
        What the latents cost (``kl_slot``: mean KL per slot index, ``kl_owner`` per sprite's owner)
        and do (dev PSNR at 1 / 10 steps with latents inferred vs zeroed, mean over clips of
        ``core.psnr``)."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        fit, ev = video[:210], video[dv]
        of, mf, _ = owned(model, fit)
        oe, me, kle = owned(model, ev)
        af, ae = acts[:210].reshape(-1, 4), acts[dv].reshape(-1, 4)
        probe, cons, klo = [], [], []
        for e in range(4):
            xf, xe = mf[np.arange(len(mf)), of[:, e]], me[np.arange(len(me)), oe[:, e]]
            sc = StandardScaler().fit(xf)
            clf = LogisticRegression(C=1.0, max_iter=200, tol=1e-3).fit(sc.transform(xf), af[:, e])
            probe.append(round(clf.score(sc.transform(xe), ae[:, e]), 3))
            cons.append(round(float(np.mean(oe[:, e] == np.bincount(oe[:, e]).argmax())), 3))
            klo.append(round(float(kle[np.arange(len(kle)), oe[:, e]].mean()), 3))
        return {"own_consistency": cons, "owner_probe": probe, "owner_probe_mean": round(float(np.mean(probe)), 3),
                "kl_owner": klo, **use(model)}

    @torch.no_grad()
    def use(model) -> dict:
        """Any model (0.9.2: ``lam`` too): the mean KL per slot on dev (one slot for ``lam``) and the dev
        PSNR at 1 / 10 steps with the latents inferred vs zeroed: a latent the FDM ignores costs nothing."""
        from flam_wm.core import psnr

        ev = video[dv]
        z = model.tokenize(ev[:, :11])
        s = model.slots(z)
        mu, logvar = model.infer(s)
        kl = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1)  # [N, T-1, K]
        true = torch.as_tensor(ev[:, 1:11].astype(np.float32) / 255.0)
        out = {"kl_slot": [round(float(x), 3) for x in kl.flatten(0, 1).mean(0)]}
        for name, lat in (("inferred", mu), ("zeroed", torch.zeros_like(mu))):
            p = psnr(model.detokenize(model.rollout(z, lat)), true)  # [N, 10]
            out[f"psnr_1_10_{name}"] = [round(float(p[:, 0].mean()), 2), round(float(p[:, -1].mean()), 2)]
        return out

    tr = _split(600)[0]
    tok = fit_tokenizer(video[tr], grid=8, channels=8, hidden=16, steps=300, seed=0)
    cfg = build(
        a.model,
        4,
        width=a.width,
        latent_dim=LATENT_DIM,
        beta=a.beta,
        tokenizer="conv",
        token_grid=8,
        token_channels=8,
        token_hidden=16,
    )
    over = {}
    for kv in filter(None, a.set.split(",")):
        k, v = kv.split("=")
        cur = getattr(cfg, k)
        over[k] = (v == "True") if isinstance(cur, bool) else type(cur)(v)
    cfg = ModelConfig(**{**cfg.to_dict(), "pos_keys": a.pos_keys, "unroll": a.unroll, **over})
    log, early, eval_cpu = [], {}, [0.0]
    at = {int(x) for x in a.eval_at.split(",") if x}

    def on_step(s, m, i):
        if s % 50 == 0:
            log.append([s, *(round(i[k], 2) for k in ("pred", "pred_unroll", "recon", "kl")),
                        *([i["start"]] if "start" in i else [])])
        if s in at and "start" not in i:  # score dev mid-way (no random numbers drawn: the run itself is unchanged)
            c0 = time.process_time()
            m.eval()
            early[s] = score(m)
            m.train()
            eval_cpu[0] += time.process_time() - c0

    t0 = time.process_time()
    model = train(
        cfg,
        TrainConfig(
            steps=a.steps,
            batch_size=32,
            window=5,
            lr=a.lr,
            seed=a.seed,
            unroll_from=a.unroll_from,
            kl_warmup=a.kl_warmup,
            slot_warmup=a.slot_warmup,
            starts=a.starts,
            start_steps=a.start_steps,
        ),
        video[tr],
        tokenizer=tok,
        on_step=on_step,
    )
    cpu = time.process_time() - t0 - eval_cpu[0]  # training only
    final = score(model)
    print(
        json.dumps(
            {
                **vars(a),
                "train_cpu_s": round(cpu, 1),
                "start": model.train_info,
                **final,
                "at_step": early,
                "log_step_pred_pred_unroll_recon_kl": log,
            }
        )
    )


if __name__ == "__main__":
    main()
