"""The reproduction on the mini Model Jungle [R]: every method and ablation on the same zoo, the same
train/val/test models, the same epoch budget and the same seeds; claims computed on test with
paired 95% bootstrap intervals over seeds; Theorems 1 and 3 checked; a branch-norm report.

Chosen on val: the epoch kept (best val per-label accuracy, early stopping) for every torch
learner and StatNN's tree settings. Reported on test: every figure and claim.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from icml26_shared import ClaimCheck, Results, UserError
from icml26_shared.eval import paired_interval_clustered
from icml26_shared.io import write_json
from icml26_shared.runner import check_scale

from .baselines import METHODS, StatNN, build
from .config import ProbeConfig, TrainConfig, ZooConfig
from .registry import CLAIMS, DESCRIPTOR
from .train import metrics

CLAIM_ARMS = ("mvprobe", "probex", "probex4", "no_std")
ABLATIONS = ("first_order", "xu_only", "second_order", "no_std")
BASELINES = ("probex", "probex4", "probex_recipe", "statnn", "flat", "mlp")
ANCHORS = ("prior",)
ARMS = ("mvprobe", *ABLATIONS, *BASELINES, *ANCHORS)
LR_GRID = (3e-4, 1e-3, 3e-3)  # holds both published values: MVProbe 3e-4 [C], ProbeX 1e-3 [P]
SCALES = {
    "smoke": dict(zoo=dict(n_models=40, steps=(5, 15), ancestor_steps=30), seeds=1, layer="fc2",
                  probe=dict(n_probes=8, proj_dim=8, rep_dim=32), epochs=4, patience=None,
                  lr_grid=(1e-3,), recipe_epochs=4,
                  statnn=dict(grid=({"learning_rate": 0.1, "max_leaf_nodes": 7},), max_iter=10),
                  thm3_trials=200),
    "quick": dict(zoo=dict(n_models=1500), seeds=3, layer="fc2",
                  probe=dict(n_probes=32, proj_dim=32, rep_dim=128), epochs=300, patience=40,
                  lr_grid=LR_GRID, recipe_epochs=500, statnn=dict(), thm3_trials=3000),
}

# --- a harder mini jungle, chosen on the baselines' val accuracy only (issue 58 item 6) ----------
# Each candidate changes one or two knobs of quick's zoo generator (ZooConfig) or the layer read.
HARD_CANDIDATES = {
    "fc1": dict(zoo=dict(), layer="fc1"),  # the same zoo, the layer farthest from the head
    "short": dict(zoo=dict(steps=(5, 20)), layer="fc2"),  # a quarter of the fine-tuning steps
    "shorter": dict(zoo=dict(steps=(3, 10)), layer="fc2"),  # an eighth
    "short_fc1": dict(zoo=dict(steps=(5, 20)), layer="fc1"),
    "start_noise": dict(zoo=dict(weight_noise=0.25), layer="fc2"),  # each child starts 0.25σ off
}
# The rule, written before any candidate was screened: a candidate is admissible when ProbeX's val
# per-label accuracy lies in [0.70, 0.90] (below the 90 % ceiling rule, well above the 0.5 prior)
# and StatNN's is <= 0.80; among the admissible ones the pick is the one whose ProbeX val accuracy
# is closest to the paper's ProbeX on Model-J (0.8161), ties to the earlier candidate above.
# Screened: ProbeX at its published lr 1e-3, flat logistic regression at lr 1e-3 (cap 300,
# patience 40, seed 0), StatNN with its tree grid on val. Test models are never read.
HARD_RULE = dict(probex_band=(0.70, 0.90), statnn_max=0.80, target=0.8161)
SCREEN_ARMS = ("flat", "statnn", "probex")


def screen_candidate(zoo, layer: str, probe: ProbeConfig, train: TrainConfig, statnn_kw: dict | None = None
                     ) -> dict[str, float]:
    """The baselines' best val per-label accuracy on one candidate zoo: reads the train and val
    models only (never ``zoo.split["test"]``)."""
    data = {p: (zoo.layer(layer, p), torch.tensor(zoo.part_labels(p))) for p in ("train", "val")}
    out = {}
    for arm in SCREEN_ARMS:
        _, info = _fit_one(arm, data, probe, replace(train, lr=1e-3), statnn_kw or {})
        out[arm] = float(info["best_val_accuracy"])
        if "best_epoch" in info:
            out[f"{arm}_kept_epoch"] = int(info["best_epoch"])
    return out


def choose_benchmark(screened: dict[str, dict[str, float]], rule: dict = HARD_RULE) -> str | None:
    """Apply ``HARD_RULE`` to the screened val accuracies (candidate order breaks ties); None when
    no candidate is admissible."""
    lo, hi = rule["probex_band"]
    ok = [(abs(v["probex"] - rule["target"]), i, name) for i, (name, v) in enumerate(screened.items())
          if lo <= v["probex"] <= hi and v["statnn"] <= rule["statnn_max"]]
    return min(ok)[2] if ok else None


def screen(seed: int = 0, candidates: dict = HARD_CANDIDATES, base_zoo: dict | None = None,
           probe: ProbeConfig | None = None, train: TrainConfig | None = None,
           statnn_kw: dict | None = None, progress=print) -> tuple[str | None, dict]:
    """Build each candidate's zoo (seed ``seed``), screen the baselines on val, pick by the rule."""
    from .zoo import make_model_zoo

    base_zoo = dict(SCALES["quick"]["zoo"]) if base_zoo is None else base_zoo
    probe = probe or ProbeConfig(**SCALES["quick"]["probe"])
    train = train or TrainConfig(epochs=SCALES["quick"]["epochs"], patience=SCALES["quick"]["patience"])
    zoos: dict = {}
    screened = {}
    for name, c in candidates.items():
        key = tuple(sorted(c["zoo"].items()))
        if key not in zoos:
            zoos[key] = make_model_zoo(ZooConfig(seed=seed, **{**base_zoo, **c["zoo"]}))
        screened[name] = screen_candidate(zoos[key], c["layer"], probe, train, statnn_kw)
        if progress is not None:
            progress(name, screened[name])
    return choose_benchmark(screened), screened


HARD_PICK = "shorter"  # from the screen in docs/experiments.md (val only), before any test figure
HARD_SCREEN = {  # that screen's val per-label accuracies (zoo seed 0), carried into the results
    "fc1": {"flat": 0.7500, "statnn": 0.6120, "probex": 0.7504},
    "short": {"flat": 0.8128, "statnn": 0.6732, "probex": 0.8632},
    "shorter": {"flat": 0.7488, "statnn": 0.6596, "probex": 0.7740},
    "short_fc1": {"flat": 0.7212, "statnn": 0.5844, "probex": 0.7372},
    "start_noise": {"flat": 0.8068, "statnn": 0.5196, "probex": 0.9112},
}
LONG_ARMS = ("mvprobe", "probex", "probex4", "probex_recipe", "statnn", "flat", "prior")
if HARD_PICK is not None:
    SCALES["long"] = dict(SCALES["quick"], zoo={**SCALES["quick"]["zoo"], **HARD_CANDIDATES[HARD_PICK]["zoo"]},
                          layer=HARD_CANDIDATES[HARD_PICK]["layer"], arms=LONG_ARMS,
                          experiment=f"hard_jungle_{HARD_PICK}")


FULL_ENV = "MVPROBE_MODELJ"  # a folder with train.jsonl / val.jsonl / test.jsonl and layer.txt


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale, DESCRIPTOR)
    if scale == "long" and "long" not in SCALES:
        raise UserError("mvprobe's long scale needs a harder jungle chosen on val (none is set)")
    if scale == "full":
        return _full(Path(out_dir), seed)
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the 2 cores are shared: one thread is faster and steadier here
    try:
        with threadpool_limits(1):
            return _jungle(scale, Path(out_dir), seed)
    finally:
        torch.set_num_threads(threads)


def _jungle(scale: str, out_dir: Path, seed: int) -> Results:
    cfg = SCALES[scale]
    out_dir.mkdir(parents=True, exist_ok=True)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    t0 = time.perf_counter()
    from .zoo import child_accuracy, make_model_zoo

    zoo_cfg = ZooConfig(seed=seed, **cfg["zoo"])
    zoo = make_model_zoo(zoo_cfg)
    permuted = zoo.nuisances["permuted"][zoo.split["test"]].astype(bool)
    res.add("zoo", "children", "own_class_accuracy", float(child_accuracy(zoo, zoo.split["test"]).mean()),
            seeds=[seed], n_models=zoo_cfg.n_models, split=list(zoo_cfg.split_sizes()),
            permuted_fraction=float(permuted.mean()))
    res.add("zoo", "children", "build_seconds", time.perf_counter() - t0, seeds=[seed], unit="s")
    data = {part: (zoo.layer(cfg["layer"], part), torch.tensor(zoo.part_labels(part)))
            for part in ("train", "val", "test")}
    probe = ProbeConfig(**cfg["probe"])
    seeds = [seed + i for i in range(cfg["seeds"])]
    train = TrainConfig(epochs=cfg["epochs"], patience=cfg["patience"])
    experiment = cfg.get("experiment", f"jungle_{cfg['layer']}")
    arms = run_arms(data, probe, train, seeds, cfg["statnn"], res, experiment=experiment,
                    arms=cfg.get("arms", ARMS), lr_grid=cfg["lr_grid"], recipe_epochs=cfg["recipe_epochs"],
                    permuted=permuted)
    _claims(res, arms, seeds)
    _theory(res, data, probe, seeds[0], cfg["thm3_trials"], arms["mvprobe"]["first"])
    write_json(out_dir / "per_seed.json",
               {m: {k: [float(x) for x in v] for k, v in a["metrics"].items()} for m, a in arms.items()},
               indent=2)
    res.figures.append("per_seed.json")
    res.notes += [
        "Benchmark [R]: one Model Tree of digits MLPs 64→64→64→10; each child fine-tuned from the "
        "ancestor on 5 random classes with its own lr, steps, input noise and batch order; half the "
        "children have their first hidden layer's neurons permuted (a function-preserving symmetry). "
        "The permutation leaves fc2's row Gram X Xᵀ unchanged, so it favours the Gram views by "
        "construction: every arm's accuracy is also reported on the permuted and unpermuted test "
        "children apart.",
        f"Chosen on val, per arm: the learning rate from {list(cfg['lr_grid'])} on seed {seeds[0]} "
        f"(then fixed for the other seeds), the kept epoch (best val per-label accuracy; at most "
        f"{cfg['epochs']} epochs, patience {cfg['patience']}) and StatNN's tree settings; the "
        "strongest baseline of the beats_best_baseline claim. Every figure and claim is on test. "
        f"ProbeX's published recipe (lr 1e-3, {cfg['recipe_epochs']} epochs, best val epoch kept) is "
        "its own row. An arm whose kept epoch lies within the patience of the cap is 'not converged' "
        "and its claims are not evaluated.",
        f"Size cut for every probe alike: n_probes={probe.n_probes}, proj_dim={probe.proj_dim}, "
        f"rep_dim={probe.rep_dim} (paper 128/128/512); ProbeX×4 has 4×{probe.n_probes} probes.",
        "Intervals: per-test-model differences nested in seeds (two-stage bootstrap, "
        "icml26_shared.eval.paired_interval_clustered).",
        "Population std in the per-sample standardisation; the authors' code uses torch.std (n-1). "
        "Ablations build only their active branches (the authors zero-mask).",
    ]
    if scale == "long":
        for name, v in HARD_SCREEN.items():
            for arm, acc in v.items():
                res.add("hard_jungle_screen", arm, f"val_per_label_accuracy_{name}", acc, seeds=[0],
                        split="val", knobs=str(HARD_CANDIDATES[name]), picked=name == HARD_PICK)
        res.notes.append(
            f"Harder jungle '{HARD_PICK}' ({HARD_CANDIDATES[HARD_PICK]}; otherwise quick's zoo), picked "
            f"before any MVProbe figure by a rule on the baselines' val accuracy only: ProbeX val in "
            f"{list(HARD_RULE['probex_band'])}, StatNN val <= {HARD_RULE['statnn_max']}, closest to the "
            f"paper's ProbeX {HARD_RULE['target']} (screen rows: hard_jungle_screen; docs/experiments.md). "
            f"Arms here: {', '.join(cfg['arms'])} (no ablations, for the CPU budget).")
    res.elapsed_s = time.perf_counter() - t0
    return res


def _per_model_accuracy(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return ((np.asarray(probs) >= 0.5) == (np.asarray(labels) > 0.5)).mean(axis=1)


def _fit_one(arm, data, probe, cfg: TrainConfig, statnn_kw):
    (Xtr, Ytr), (Xva, Yva) = data["train"], data["val"]
    shape, k = tuple(Xtr.shape[1:]), Ytr.shape[1]
    learner = StatNN(**statnn_kw) if arm == "statnn" else build(arm, shape, k, probe)
    t = time.perf_counter()
    info = learner.fit(Xtr, Ytr, Xva, Yva, cfg)
    info["fit_seconds"] = time.perf_counter() - t
    return learner, info


def run_arms(data, probe: ProbeConfig, train: TrainConfig, seeds, statnn_kw: dict, res: Results,
             experiment: str, arms=ARMS, lr_grid=LR_GRID, recipe_epochs: int = 500,
             permuted: np.ndarray | None = None) -> dict[str, dict]:
    """Train and test every arm on the same data and seeds. A torch arm picks its lr on val from
    ``lr_grid`` on the first seed and keeps it for the others; ``probex_recipe`` runs ProbeX's
    published lr and epochs. One row per arm and metric, a grid row per lr tried, the train-loss
    and val-accuracy curves of every kept run. Returns, per arm: ``metrics`` (per seed),
    ``per_model`` (test per-label accuracy of each model, per seed), ``infos`` and ``first``."""
    Xte, Yte = data["test"]
    out: dict[str, dict] = {}
    for arm in arms:
        per: dict[str, list[float]] = {}
        per_model, infos, first = [], [], None
        for i, sd in enumerate(seeds):
            cfg = replace(train, seed=sd)
            if arm == "probex_recipe":
                cfg = replace(cfg, epochs=recipe_epochs, patience=None)
            if arm in ("statnn", "prior") or arm == "probex_recipe":
                learner, info = _fit_one(arm, data, probe, cfg, statnn_kw)
            elif i == 0:
                tried = []
                for lr in lr_grid:
                    learner, info = _fit_one(arm, data, probe, replace(cfg, lr=lr), statnn_kw)
                    res.add(f"{experiment}_lr_grid", arm, "val_per_label_accuracy",
                            info["best_val_accuracy"], seeds=[sd], lr=lr, kept_epoch=info["best_epoch"],
                            split="val")
                    tried.append((info["best_val_accuracy"], -lr, learner, info))
                _, _, learner, info = max(tried, key=lambda x: (x[0], x[1]))  # ties: the smaller lr
                chosen_lr = info["lr"]
            else:
                learner, info = _fit_one(arm, data, probe, replace(cfg, lr=chosen_lr), statnn_kw)
            probs = learner.predict_proba(Xte)
            labels = Yte.cpu().numpy()
            for name, v in metrics(probs, labels).items():
                per.setdefault(name, []).append(v)
            pm = _per_model_accuracy(probs, labels)
            per_model.append(pm)
            if permuted is not None and permuted.any() and (~permuted).any():
                per.setdefault("per_label_accuracy_permuted", []).append(float(pm[permuted].mean()))
                per.setdefault("per_label_accuracy_unpermuted", []).append(float(pm[~permuted].mean()))
            for key in ("fit_seconds", "best_epoch", "lr", "params", "best_val_accuracy"):
                if key in info:
                    per.setdefault(key, []).append(float(info[key]))
            hist = info.pop("history", None)
            if hist is not None:
                stopped = hist.epochs_run if hist.epochs_run < cfg.epochs else None
                res.add_curve(experiment, arm, "train_loss", range(1, len(hist.train_loss) + 1),
                              hist.train_loss, split="train", seed=sd, direction="lower",
                              budget=cfg.epochs, stopped_at=stopped)
                if hist.val_accuracy:
                    res.add_curve(experiment, arm, "val_per_label_accuracy", hist.val_epochs,
                                  hist.val_accuracy, split="dev", seed=sd, budget=cfg.epochs,
                                  stopped_at=stopped)
            infos.append(info)
            if i == 0:
                first = learner
        for name, vals in per.items():
            res.add(experiment, arm, name, vals, seeds=seeds,
                    unit="s" if name == "fit_seconds" else "", description=METHODS[arm].description,
                    split="val" if name == "best_val_accuracy" else "test",
                    converged=[bool(x.get("converged", True)) for x in infos])
        out[arm] = {"metrics": per, "per_model": per_model, "infos": infos, "first": first}
    return out


def _not_converged(arms, names) -> list[str]:
    return [f"{m} (seed index {i}, kept epoch {int(x['best_epoch'])})"
            for m in names for i, x in enumerate(arms[m]["infos"]) if not x.get("converged", True)]


def _versus(res: Results, claim, arms, ours: str, base: str, seeds, extra: str = "") -> None:
    a, b = np.concatenate(arms[ours]["per_model"]), np.concatenate(arms[base]["per_model"])
    clusters = np.concatenate([np.full(len(x), s) for x, s in zip(arms[ours]["per_model"], seeds, strict=True)])
    iv = paired_interval_clustered(a - b, clusters)
    chk = ClaimCheck.compare(claim, float(a.mean()), float(b.mean()), base, interval=iv,
                             note=f"{ours} − {base}: {iv.mean:+.4f} [{iv.low:+.4f}, {iv.high:+.4f}] over "
                                  f"{len(a)} test models in {len(seeds)} seeds ({iv.method}){extra}")
    late = _not_converged(arms, (ours, base))
    if late:
        chk.mark_not_evaluated("not converged: " + ", ".join(late))
    res.claims.append(chk)


def _claims(res: Results, arms, seeds) -> None:
    c = {cl.id: cl for cl in CLAIMS}
    acc = {m: np.asarray(a["metrics"]["per_label_accuracy"]) for m, a in arms.items()}
    for cid, base, factor in (("mvprobe_vs_probex", "probex", 0.6), ("mvprobe_vs_probex4", "probex4", 0.8)):
        ratio = float((1 - acc["mvprobe"]).mean() / max((1 - acc[base]).mean(), 1e-12))
        _versus(res, c[cid], arms, "mvprobe", base, seeds,
                extra=f"; error ratio {ratio:.3f} (paper's target ≤ {factor})")
    val = {m: np.nanmean(arms[m]["metrics"].get("best_val_accuracy", [np.nan])) for m in BASELINES if m in arms}
    best = max((m for m in val if np.isfinite(val[m])), key=lambda m: val[m])
    _versus(res, c["beats_best_baseline"], arms, "mvprobe", best, seeds,
            extra=f"; strongest baseline on val: {best} ({val[best]:.4f})")
    if "no_std" in arms:
        _versus(res, c["no_std_below"], arms, "mvprobe", "no_std", seeds)
    else:  # the long scale runs the claim arms and the anchors only
        res.claims.append(ClaimCheck.compare(c["no_std_below"], None).mark_not_evaluated(
            "the no-standardisation ablation is not run at this scale"))
    for cid, m, limit in (("probex_below_ceiling", "probex", 0.9), ("statnn_below_ceiling", "statnn", 0.8)):
        res.claims.append(ClaimCheck.compare(
            c[cid], float(acc[m].mean()), threshold=limit,
            note=f"benchmark validity: per-seed {', '.join(f'{v:.4f}' for v in acc[m])}"))


def _theory(res: Results, data, probe: ProbeConfig, seed: int, trials: int, trained) -> None:
    from .core import (
        MVProbe,
        branch_norm_report,
        theorem1_gaps,
        theorem3_monte_carlo,
        theorem3_ratio,
    )

    c = {cl.id: cl for cl in CLAIMS}
    Xte = data["test"][0]
    d_H, d_W = Xte.shape[1:]
    sigma = float(Xte.std())
    mc, exact = theorem3_monte_carlo(d_H, d_W, sigma, trials=trials, seed=seed), theorem3_ratio(d_H, d_W, sigma)
    res.add("theorem3", "monte_carlo", "ratio", mc, seeds=[seed], formula=exact, n=d_H, m=d_W, sigma=sigma)
    res.claims.append(ClaimCheck.compare(c["thm3"], abs(mc / exact - 1), threshold=0.05,
                                         note=f"Monte-Carlo {mc:.4g} vs n(n+m+1)σ²/m = {exact:.4g} "
                                              f"({trials} Gaussian {d_H}×{d_W} matrices, σ = layer std)"))
    for b, v in branch_norm_report(trained.module, Xte).items():
        res.add("branch_norms", b, "raw_sq_norm", v["raw_sq_norm"], seeds=[seed])
        res.add("branch_norms", b, "std_sq_norm", v["std_sq_norm"], seeds=[seed], entries=v["entries"])
    model, which = trained.module, f"the trained MVProbe (r = {probe.n_probes})"
    if 2 * probe.n_probes >= min(d_H, d_W):  # the collision needs 2r < min(d_H, d_W)
        r = min(d_H, d_W) // 4
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = MVProbe((d_H, d_W), n_probes=r, proj_dim=probe.proj_dim, rep_dim=probe.rep_dim,
                            n_outputs=data["train"][1].shape[1])
        which = f"an untrained MVProbe at r = {r} (the trained r = {probe.n_probes} leaves no room: 2r ≥ d)"
    gaps = theorem1_gaps(model, Xte[0], seed=seed)
    for k, v in gaps.items():
        res.add("theorem1", "mvprobe", k, v, seeds=[seed])
    chk = ClaimCheck.compare(c["thm1"], gaps["mvprobe_logit_gap"], threshold=1e-2,
                             note=f"{which}: X₂ = X₁ + N, N U = N Z = 0, Nᵀ V = Nᵀ W = 0 (‖N‖ = ‖X₁‖); "
                                  f"first-order responses differ by {gaps['first_order_response_gap_rel']:.1e} "
                                  f"(relative), Gram responses by ≥ {gaps['gram_response_gap_rel']:.2f}; "
                                  f"logit gap {gaps['mvprobe_logit_gap']:.3g} with the Gram views, "
                                  f"{gaps['first_order_logit_gap']:.1e} through the first-order views only")
    chk.held = bool(chk.held) and gaps["first_order_logit_gap"] < 1e-5
    res.claims.append(chk)


def _full(out_dir: Path, seed: int) -> Results:
    """The GPU recipe: paper settings, 5 seeds, on a user-supplied Model-J subset."""
    root = os.environ.get(FULL_ENV)
    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA device")
    if not root or not all((Path(root) / f).is_file() for f in ("train.jsonl", "val.jsonl", "test.jsonl",
                                                                  "layer.txt")):
        missing.append(f"${FULL_ENV} = a folder with train.jsonl, val.jsonl, test.jsonl (Model-J "
                       "checkpoints, `mvprobe index` format) and layer.txt (the layer name)")
    if missing:
        raise UserError("the full scale is the GPU recipe and needs " + " and ".join(missing))
    from .io import WeightDataset

    root_p = Path(root)
    mj_layer = (root_p / "layer.txt").read_text().strip()
    train = WeightDataset.from_jsonl(root_p / "train.jsonl", mj_layer)
    data = {"train": (torch.tensor(train.weights), torch.tensor(train.labels))}
    for part in ("val", "test"):
        ds = WeightDataset.from_jsonl(root_p / f"{part}.jsonl", mj_layer, label_names=train.label_names,
                                      expect_shape=train.shape)
        data[part] = (torch.tensor(ds.weights), torch.tensor(ds.labels))
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
    seeds = [seed + i for i in range(5)]
    paper = TrainConfig(patience=300)  # [C] settings; 3000 epochs, best-on-val kept
    from .zoo import make_model_zoo

    zoo = make_model_zoo(ZooConfig(seed=seed))
    for layer in ("fc2", "fc1"):
        jd = {p: (zoo.layer(layer, p).cuda(), torch.tensor(zoo.part_labels(p)).cuda())
              for p in ("train", "val", "test")}
        arms = run_arms(jd, ProbeConfig(), paper, seeds, {}, res, experiment=f"jungle_{layer}")
        if layer == "fc2":
            _claims(res, arms, seeds)
    cuda = {k: (X.cuda(), Y.cuda()) for k, (X, Y) in data.items()}
    run_arms(cuda, ProbeConfig(), paper, seeds, {}, res, experiment=f"modelj_{mj_layer}")
    res.notes.append(f"Mini jungle at paper settings (fc2 claimed, fc1 reported) and the Model-J "
                     f"subset ${FULL_ENV}={root}, layer {mj_layer} (reported) [C]. Not yet run on a GPU "
                     "by us; the cross-tree stress test and SD LoRA zero-shot are not implemented.")
    return res
