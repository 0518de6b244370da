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
from icml26_shared.eval import paired_interval
from icml26_shared.io import write_json
from icml26_shared.runner import check_scale

from .baselines import METHODS, StatNN, build
from .config import ProbeConfig, TrainConfig, ZooConfig
from .registry import CLAIMS, DESCRIPTOR
from .train import metrics

ARMS = ("mvprobe", "first_order", "second_order", "no_std", "probex", "probex4", "statnn", "flat", "mlp")
BASELINES = ("probex", "probex4", "statnn", "flat", "mlp")
SCALES = {
    "smoke": dict(zoo=dict(n_models=40, steps=(5, 15), ancestor_steps=30), seeds=1, layer="fc2",
                  probe=dict(n_probes=8, proj_dim=8, rep_dim=32), epochs=4, patience=None,
                  statnn=dict(grid=({"learning_rate": 0.1, "max_leaf_nodes": 7},), max_iter=10),
                  thm3_trials=200),
    "quick": dict(zoo=dict(n_models=1500), seeds=3, layer="fc2",
                  probe=dict(n_probes=32, proj_dim=32, rep_dim=128), epochs=100, patience=15,
                  statnn=dict(), thm3_trials=3000),
}
FULL_ENV = "MVPROBE_MODELJ"  # a folder with train.jsonl / val.jsonl / test.jsonl and layer.txt


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
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
    res.add("zoo", "children", "own_class_accuracy", float(child_accuracy(zoo, zoo.split["test"]).mean()),
            seeds=[seed], n_models=zoo_cfg.n_models, split=list(zoo_cfg.split_sizes()),
            permuted_fraction=float(zoo.nuisances["permuted"].mean()))
    res.add("zoo", "children", "build_seconds", time.perf_counter() - t0, seeds=[seed], unit="s")
    data = {part: (zoo.layer(cfg["layer"], part), torch.tensor(zoo.part_labels(part)))
            for part in ("train", "val", "test")}
    probe = ProbeConfig(**cfg["probe"])
    seeds = [seed + i for i in range(cfg["seeds"])]
    table, first = run_arms(data, probe, TrainConfig(epochs=cfg["epochs"], patience=cfg["patience"]),
                            seeds, cfg["statnn"], res, experiment=f"jungle_{cfg['layer']}")
    _claims(res, table, seeds)
    _theory(res, data, probe, seeds[0], cfg["thm3_trials"], first)
    write_json(out_dir / "per_seed.json",
               {m: {k: [float(x) for x in v] for k, v in d.items()} for m, d in table.items()}, indent=2)
    res.figures.append("per_seed.json")
    res.notes += [
        "Benchmark [R]: one Model Tree of digits MLPs 64→64→64→10; each child fine-tuned from the "
        "ancestor on 5 random classes with its own lr, steps, input noise and batch order; half the "
        "children have their first hidden layer's neurons permuted (a function-preserving symmetry). "
        "Without that permutation a flat logistic regression read the subset off the 64×64 layer "
        "at >99% (measured on an earlier, longer-trained version of this zoo), i.e. at ceiling. "
        "The permutation leaves fc2's row Gram X Xᵀ unchanged, so it favours the Gram views by "
        "construction: this benchmark tests the paper's invariance argument, not Model-J itself.",
        "Chosen on val: the kept epoch of every torch learner (best val per-label accuracy, "
        f"patience {cfg['patience']}, at most {cfg['epochs']} epochs) and StatNN's tree settings; "
        "every figure and claim is on test. ProbeX and ProbeX×4 use ProbeX's lr 1e-3, MVProbe and "
        "its ablations the authors' 3e-4; nothing else was tuned.",
        f"Size cut for every probe alike: n_probes={probe.n_probes}, proj_dim={probe.proj_dim}, "
        f"rep_dim={probe.rep_dim} (paper 128/128/512); ProbeX×4 has 4×{probe.n_probes} probes.",
        "Population std in the per-sample standardisation (issue 17); the authors' code uses "
        "torch.std (n-1). Ablations build only their active branches (the authors zero-mask).",
    ]
    res.elapsed_s = time.perf_counter() - t0
    return res


def run_arms(data, probe: ProbeConfig, train: TrainConfig, seeds, statnn_kw: dict, res: Results,
             experiment: str, arms=ARMS) -> tuple[dict[str, dict[str, list[float]]], dict]:
    """Train and test every arm on the same data and seeds; one row per arm and metric. Returns
    the per-seed metrics and each arm's first-seed learner."""
    (Xtr, Ytr), (Xva, Yva), (Xte, Yte) = data["train"], data["val"], data["test"]
    shape, k = tuple(Xtr.shape[1:]), Ytr.shape[1]
    table: dict[str, dict[str, list[float]]] = {}
    first: dict = {}
    for arm in arms:
        per: dict[str, list[float]] = {}
        for sd in seeds:
            torch.manual_seed(sd)
            learner = StatNN(**statnn_kw) if arm == "statnn" else build(arm, shape, k, probe)
            t = time.perf_counter()
            info = learner.fit(Xtr, Ytr, Xva, Yva, replace(train, seed=sd))
            fit_s = time.perf_counter() - t
            for name, v in metrics(learner.predict_proba(Xte), Yte.cpu().numpy()).items():
                per.setdefault(name, []).append(v)
            per.setdefault("fit_seconds", []).append(fit_s)
            for key in ("best_epoch", "params"):
                if key in info:
                    per.setdefault(key, []).append(float(info[key]))
            if sd == seeds[0]:
                first[arm] = learner
        for name, vals in per.items():
            res.add(experiment, arm, name, vals, seeds=seeds, unit="s" if name == "fit_seconds" else "",
                    description=METHODS[arm].description)
        table[arm] = per
    return table, first


def _interval_note(iv) -> str:
    return f"paired 95% interval {iv.mean:+.4f} [{iv.low:+.4f}, {iv.high:+.4f}] over {iv.n} seeds"


def _claims(res: Results, table, seeds) -> None:
    c = {cl.id: cl for cl in CLAIMS}
    err = {m: 1 - np.asarray(table[m]["per_label_accuracy"]) for m in table}
    acc = {m: np.asarray(table[m]["per_label_accuracy"]) for m in table}
    for cid, base, factor in (("err_vs_probex", "probex", 0.6), ("err_vs_probex4", "probex4", 0.8)):
        ratio = float(err["mvprobe"].mean() / max(err[base].mean(), 1e-12))
        iv = paired_interval(err["mvprobe"], factor * err[base])  # < 0: MVProbe's error below target
        chk = ClaimCheck.compare(c[cid], ratio, threshold=factor,
                                 note=f"MVProbe error − {factor}×{base} error: {_interval_note(iv)}; "
                                      f"held only when the interval is below 0")
        chk.held = bool(chk.held) and iv.clears(0.0, "lower")
        chk.baseline, chk.baseline_name = float(err[base].mean()), f"{base} per-label error"
        res.claims.append(chk)
    best = max(BASELINES, key=lambda m: acc[m].mean())
    iv = paired_interval(acc["mvprobe"], acc[best])
    chk = ClaimCheck.compare(c["beats_best_baseline"], float(acc["mvprobe"].mean()), float(acc[best].mean()),
                             best, note=f"strongest baseline on test: {best}; {_interval_note(iv)}")
    chk.held = bool(chk.held) and iv.clears(0.0, "higher")
    res.claims.append(chk)
    iv = paired_interval(acc["mvprobe"], acc["no_std"])
    chk = ClaimCheck.compare(c["no_std_below"], float(acc["mvprobe"].mean()), float(acc["no_std"].mean()),
                             "no_std", note=f"MVProbe − no standardisation: {_interval_note(iv)}")
    chk.held = bool(chk.held) and iv.clears(0.0, "higher")
    res.claims.append(chk)
    for cid, m, limit in (("probex_below_ceiling", "probex", 0.9), ("statnn_below_ceiling", "statnn", 0.8)):
        res.claims.append(ClaimCheck.compare(
            c[cid], float(acc[m].mean()), threshold=limit,
            note=f"benchmark validity: per-seed {', '.join(f'{v:.4f}' for v in acc[m])}"))


def _theory(res: Results, data, probe: ProbeConfig, seed: int, trials: int, first: dict) -> None:
    from .core import branch_norm_report, theorem1_pair, theorem3_monte_carlo, theorem3_ratio

    c = {cl.id: cl for cl in CLAIMS}
    Xte = data["test"][0]
    d_H, d_W = Xte.shape[1:]
    sigma = float(Xte.std())
    mc, exact = theorem3_monte_carlo(d_H, d_W, sigma, trials=trials, seed=seed), theorem3_ratio(d_H, d_W, sigma)
    res.add("theorem3", "monte_carlo", "ratio", mc, seeds=[seed], formula=exact, n=d_H, m=d_W, sigma=sigma)
    res.claims.append(ClaimCheck.compare(c["thm3"], abs(mc / exact - 1), threshold=0.05,
                                         note=f"Monte-Carlo {mc:.4g} vs n(n+m+1)σ²/m = {exact:.4g} "
                                              f"({trials} Gaussian {d_H}×{d_W} matrices, σ = layer std)"))
    mv, px = first["mvprobe"], first["probex"]
    for b, v in branch_norm_report(mv.module, Xte).items():
        res.add("branch_norms", b, "raw_sq_norm", v["raw_sq_norm"], seeds=[seed])
        res.add("branch_norms", b, "std_sq_norm", v["std_sq_norm"], seeds=[seed], entries=v["entries"])
    # Thm 1 on a real test layer: a collision of ProbeX's trained U, seen by MVProbe
    U = px.module.U.detach().double()
    X1, X2 = theorem1_pair(U, Xte[0].double(), seed=seed)
    X1, X2 = X1.float(), X2.float()
    with torch.no_grad():
        px_gap = float((px.module(X1[None]) - px.module(X2[None])).abs().max())
        mv_gap = float((mv.module(X1[None]) - mv.module(X2[None])).abs().max())
        first = float((X1.double() @ U - X2.double() @ U).abs().max())
    res.add("theorem1", "probex", "max_logit_gap", px_gap, seeds=[seed])
    res.add("theorem1", "mvprobe", "max_logit_gap", mv_gap, seeds=[seed])
    res.claims.append(ClaimCheck.compare(
        c["thm1"], mv_gap, px_gap, "probex", margin=1e-3,
        note=f"X₂ = X₁ + N with N U = 0 for ProbeX's trained U: |X₁U − X₂U| ≤ {first:.1e} (float64), "
             f"ProbeX logits differ by {px_gap:.1e} (rounding), MVProbe's by {mv_gap:.3g}"))


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
        table, _ = run_arms(jd, ProbeConfig(), paper, seeds, {}, res, experiment=f"jungle_{layer}")
        if layer == "fc2":
            _claims(res, table, seeds)
    cuda = {k: (X.cuda(), Y.cuda()) for k, (X, Y) in data.items()}
    run_arms(cuda, ProbeConfig(), paper, seeds, {}, res, experiment=f"modelj_{mj_layer}")
    res.notes.append(f"Mini jungle at paper settings (fc2 claimed, fc1 reported) and the Model-J "
                     f"subset ${FULL_ENV}={root}, layer {mj_layer} (reported) [C]. Not yet run on a GPU "
                     "by us; the cross-tree stress test and SD LoRA zero-shot are not implemented.")
    return res
