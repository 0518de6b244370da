"""The reproduction: GRPO, DAPO and MT-GRPO (plus the no-RPS ablation) on the same synthetic tasks,
warm start, budget of global steps and seeds; held-out worst-task and average accuracy, steps to a
worst-task threshold, and realised batch share against z."""

from __future__ import annotations

import copy
import os
import time
from functools import partial
from pathlib import Path

import numpy as np

from icml26_shared import Results, UserError
from icml26_shared.registry import package_version

from .config import TinyPolicyConfig, TrainConfig

SCALES = {
    "smoke": dict(tasks=["copy", "sort", "sort:hard"], mix=[0.35, 0.6, 0.05], seeds=1, steps=3,
                  batch=4, group=4, sft_steps=15, eval_prompts=8, n_val=1, eval_every=3,
                  final_prompts=8, methods=["grpo", "dapo", "mtgrpo", "iwu_only"], threshold=0.5,
                  n_rs=2),
    "quick": dict(tasks=["copy", "sort", "sort:hard"], mix=[0.35, 0.6, 0.05], seeds=5, steps=50,
                  batch=16, group=8, sft_steps=200, eval_prompts=50, n_val=2, eval_every=10,
                  final_prompts=200, methods=["grpo", "dapo", "mtgrpo", "iwu_only"], threshold=0.5,
                  n_rs=10),
}
FULL_RECIPE = """full scale = the paper's Exp-1 on a GPU: reasoning-gym Countdown / Zebra / ARC-1D (medium),
a local Qwen2.5-1.5B/3B-class model, G=8-16, 64-256 prompts per step, 300-700 steps:
  export MTGRPO_MODEL=/path/to/Qwen2.5-3B  MTGRPO_DATA=/path/with/{countdown,zebra,arc_1d}.jsonl
  mtgrpo reproduce --scale full      # GRPO / DAPO / MT-GRPO, 3 seeds (MTGRPO_STEPS, _SEEDS, _LORA_R...)
or one method at a time, multi-GPU:
  accelerate launch -m mtgrpo train --method mtgrpo --model $MTGRPO_MODEL \\
     --tasks countdown=$MTGRPO_DATA/countdown.jsonl,zebra=$MTGRPO_DATA/zebra.jsonl,arc=$MTGRPO_DATA/arc_1d.jsonl \\
     --verifier number --lam 0.2 --steps 720 --batch-prompts 32 --group-size 16 --max-new-tokens 1024"""


def run_method(method: str, warm_state: dict, tasks, cfg: TrainConfig, build, eval_prompts: int,
               final_prompts: int) -> dict:
    """Train one method from the shared warm start; held-out curve + final evaluation."""
    from .trainer import MTGRPOTrainer

    policy = build()
    if warm_state is not None:
        policy.model.load_state_dict(copy.deepcopy(warm_state))
    tr = MTGRPOTrainer(policy, tasks, cfg)
    curve = [(0, tr.evaluate(n_prompts=eval_prompts, seed=cfg.seed + 1000))]
    t0 = time.perf_counter()
    for s in range(1, cfg.steps + 1):
        tr.step()
        if s % cfg.eval_every == 0 or s == cfg.steps:
            curve.append((s, tr.evaluate(n_prompts=eval_prompts, seed=cfg.seed + 1000 + s)))
    train_s = time.perf_counter() - t0
    final = tr.evaluate(n_prompts=final_prompts, seed=cfg.seed + 99_999)
    return {"curve": curve, "final": final, "history": tr.history, "train_s": train_s}


def steps_to(curve, threshold: float, budget: int) -> float:
    """First evaluated step whose worst-task accuracy reaches ``threshold`` (``budget`` + one eval
    interval when never reached: a censored value, reported as such)."""
    for s, acc in curve:
        if min(acc.values()) >= threshold:
            return float(s)
    return float("nan")


def _add(res: Results, exp: str, method: str, metric: str, values, seeds, **extra) -> None:
    """Add a row over the seeds whose value is finite (JSON has no NaN); skip it if none is."""
    keep = [(v, sd) for v, sd in zip(values, seeds, strict=True) if np.isfinite(v)]
    if keep:
        res.add(exp, method, metric, [v for v, _ in keep], seeds=[sd for _, sd in keep], **extra)


def share_gap(history) -> float:
    """max over tasks of |time-averaged realised share − time-averaged z| (the paper's §5.4
    comparison of assigned weight and realised share; per-step multinomial noise averages out)."""
    h = [r for r in history if r["batch_size"] > 0]
    if not h:
        return float("nan")
    share = np.mean([r["share"] for r in h], 0)
    z = np.mean([r["z"] for r in h], 0)
    return float(np.max(np.abs(share - z)))


def _full_scale() -> tuple[dict, list, object]:
    """The GPU recipe, configured from the environment: MTGRPO_MODEL (a local HF folder),
    MTGRPO_DATA (a folder of <task>.jsonl files with prompt / answer [/ split]), optional
    MTGRPO_VERIFIER (default number), MTGRPO_STEPS (300), MTGRPO_SEEDS (3), MTGRPO_LORA_R (0)."""
    import torch

    from .io import load_hf_policy, load_task

    model, data = os.environ.get("MTGRPO_MODEL"), os.environ.get("MTGRPO_DATA")
    if not model or not data:
        raise UserError("the full scale is a GPU recipe that needs a local model and data "
                        "(set MTGRPO_MODEL and MTGRPO_DATA) and a CUDA device; the recipe:\n" + FULL_RECIPE)
    if not torch.cuda.is_available() and os.environ.get("MTGRPO_DEVICE") != "cpu":
        raise UserError("the full scale is a GPU recipe (hours of RL on a 1.5B-3B model) and needs "
                        "a CUDA device; none is visible here (MTGRPO_DEVICE=cpu runs it anyway)")
    if not Path(model).is_dir():
        raise UserError(f"MTGRPO_MODEL={model} is not a folder (a local Hugging Face model)")
    files = sorted(Path(data).glob("*.jsonl"))
    if not files:
        raise UserError(f"MTGRPO_DATA={data} holds no .jsonl task files")
    verifier = os.environ.get("MTGRPO_VERIFIER", "number")
    tasks = [load_task(f"{f.stem}={f}", verifier=verifier) for f in files]
    steps = int(os.environ.get("MTGRPO_STEPS", "300"))
    sc = dict(seeds=int(os.environ.get("MTGRPO_SEEDS", "3")), steps=steps,
              batch=int(os.environ.get("MTGRPO_BATCH", "32")),
              group=int(os.environ.get("MTGRPO_GROUP", "16")), eval_prompts=100, n_val=8,
              eval_every=max(1, steps // 10), final_prompts=200, methods=["grpo", "dapo", "mtgrpo"],
              threshold=0.5, n_rs=10, lr=1e-6,
              max_new=int(os.environ.get("MTGRPO_MAX_NEW_TOKENS", "1024")))
    lora_r = int(os.environ.get("MTGRPO_LORA_R", "0"))
    return sc, tasks, lambda s: load_hf_policy(model, lora_r=lora_r, chat_template=True)


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    import torch

    from .io import build_tiny, sft_warmstart
    from .registry import DESCRIPTOR
    from .tasks import make_synthetic

    if scale not in (*SCALES, "full"):
        raise UserError(f"unknown scale {scale!r}")
    out_dir = Path(out_dir)
    if scale == "full":
        sc, tasks, build = _full_scale()
    else:
        sc = dict(SCALES[scale], lr=3e-4, max_new=8)
        torch.set_num_threads(1)  # tiny matrices: extra threads only add contention on shared cores
        tasks = [make_synthetic(n, n_train=2000, n_test=200, seed=seed) for n in sc["tasks"]]
        tiny = TinyPolicyConfig(sft_steps=sc["sft_steps"])
    names = [t.name for t in tasks]
    seeds = [seed + i for i in range(sc["seeds"])]
    runs: dict[str, list[dict]] = {m: [] for m in sc["methods"]}
    init_acc = []
    for sd in seeds:
        if scale == "full":  # the pretrained model is the common starting point
            warm, make = None, partial(build, sd)
        else:
            pol = build_tiny(sd, tiny)
            sft_warmstart(pol, tasks, tiny, seed=sd, mix=sc["mix"])
            warm = copy.deepcopy(pol.model.state_dict())
            make = partial(build_tiny, sd, tiny)
        for m in sc["methods"]:
            cfg = TrainConfig(method=m, steps=sc["steps"], batch_prompts=sc["batch"],
                              group_size=sc["group"], n_val=sc["n_val"], eval_every=sc["eval_every"],
                              seed=sd, max_new_tokens=sc["max_new"], lr=sc["lr"], N_rs=sc["n_rs"])
            runs[m].append(run_method(m, warm, tasks, cfg, make, sc["eval_prompts"],
                                      sc["final_prompts"]))
        init_acc.append(runs[sc["methods"][0]][-1]["curve"][0][1])

    res = Results(package="mtgrpo", version=package_version("mtgrpo"), scale=scale, seed=seed)
    exp = "3task-" + "-".join(names)
    summary: dict[str, dict[str, float]] = {}
    for m, rs in runs.items():
        worst = [min(r["final"].values()) for r in rs]
        avg = [float(np.mean(list(r["final"].values()))) for r in rs]
        stt = [steps_to(r["curve"], sc["threshold"], sc["steps"]) for r in rs]
        gap = [share_gap(r["history"]) for r in rs]
        gen = [float(np.mean([h["prompts_generated"] for h in r["history"]])) for r in rs]
        _add(res, exp, m, "worst_task_acc", worst, seeds=seeds)
        _add(res, exp, m, "avg_acc", avg, seeds=seeds)
        for k, n in enumerate(names):
            _add(res, exp, m, f"acc_{n}", [r["final"][n] for r in rs], seeds=seeds)
            _add(res, exp, m, f"zero_grad_rate_{n}",
                    [float(np.nanmean([h["zero_grad_rate"][k] for h in r["history"]])) for r in rs],
                    seeds=seeds)
            _add(res, exp, m, f"mean_z_{n}", [float(np.mean([h["z"][k] for h in r["history"]])) for r in rs],
                    seeds=seeds)
            _add(res, exp, m, f"mean_share_{n}",
                    [float(np.mean([h["share"][k] for h in r["history"]])) for r in rs], seeds=seeds)
        reached = [s for s in stt if not np.isnan(s)]
        _add(res, exp, m, "steps_to_threshold", [s if not np.isnan(s) else sc["steps"] + sc["eval_every"]
                                               for s in stt], seeds=seeds,
                reached=f"{len(reached)}/{len(stt)}", threshold=sc["threshold"])
        _add(res, exp, m, "share_gap_abs", gap, seeds=seeds)
        _add(res, exp, m, "prompts_generated_per_step", gen, seeds=seeds)
        _add(res, exp, m, "train_seconds", [r["train_s"] for r in rs], seeds=seeds, unit="s")
        summary[m] = {"worst": float(np.mean(worst)), "avg": float(np.mean(avg)),
                      "steps": float(np.mean([s if not np.isnan(s) else sc["steps"] + sc["eval_every"]
                                              for s in stt])),
                      "gap": float(np.mean(gap)), "reached": len(reached)}
    worst_of = {m: [min(r["final"].values()) for r in rs] for m, rs in runs.items()}
    for base in ("grpo", "dapo"):  # paired by seed: the same warm start and held-out prompts
        if "mtgrpo" in runs and base in runs:
            _add(res, exp, "mtgrpo", f"worst_task_acc_minus_{base}_paired",
                 [a - b for a, b in zip(worst_of["mtgrpo"], worst_of[base], strict=True)], seeds)
    from .report import claim_checks, figures

    res.claims = claim_checks(DESCRIPTOR, summary, sc)
    res.figures = figures(runs, names, out_dir)
    ia = {n: float(np.mean([a[n] for a in init_acc])) for n in names}
    res.notes += [
        f"tasks {names}; warm-start held-out accuracy (mean over seeds) {ia}",
        f"scale {scale}: {len(seeds)} seeds, {sc['steps']} global steps each, B={sc['batch']} prompts x G={sc['group']} "
        f"rollouts; every method starts from the same warm start per seed and draws the same held-out "
        f"prompts; accuracy = mean over {sc['n_val']} samples at T=1 of {sc['final_prompts']} held-out "
        "prompts per task (the paper: avg@8 at T=1).",
        "Budget = global steps, as in the paper; DAPO / MT-GRPO generate more rollouts per step "
        "(oversampling and resampling) — see prompts_generated_per_step.",
        "[R] policy, tasks, warm start, SEC constants; [P/C] advantages, clip-higher loss, IWU, RP-Sampler, "
        "defaults (λ=0.2, β=0.025, M_os=3, N_rs=10, M_acc=5, strict filter, 4 mini-batches).",
    ]
    return res
