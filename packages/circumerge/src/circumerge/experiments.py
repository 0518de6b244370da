"""The laptop-scale reproduction: (a) merge time and sketch error against the stacked rank R on
synthetic Llama-3-8B-MLP-shaped LoRA factors, every method side by side in one run; (b) fp32
shared-init numerics; (c) normalized accuracy of merged digits LoRA adapters (λ chosen on dev,
scored on test).

Timings run with one torch thread and are quoted as ratios to the fastest exact Core Space
measured in the same interleaved ``compare`` rounds (per-round ratios give the interval).
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np
import torch

from icml26_shared import ClaimCheck, Results
from icml26_shared.eval import paired_interval
from icml26_shared.runner import check_scale

from .registry import CLAIMS, DESCRIPTOR
from .synthetic import bench, relative_error, shared_init_factors

RULES = ("ta", "ties", "magnitude_prune", "dare", "dare_ties", "tsv", "iso")
CFG = {
    "smoke": dict(m=256, n=192, sweep=((4, 8), (8, 8)), repeats=1, knots_max_R=64, peft=None,
                  fp32=(4, 8, 160, 120), tasks=4, base_steps=30, lora_steps=25,
                  acc_rules=("ta", "ties"), acc_seeds=1, acc_sketch=64),
    "quick": dict(m=14336, n=4096, sweep=((8, 16), (16, 16), (32, 16)), repeats=3, knots_max_R=256,
                  peft=(1024, 1024, 8, 16), fp32=(8, 16, 1024, 1024), tasks=8, base_steps=300,
                  lora_steps=200, acc_rules=RULES, acc_seeds=3, acc_sketch=128),
}
LAMBDAS = (0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
TIME_TARGET, ERROR_TARGET, GAP_TARGET, FP32_TARGET = 0.56, 0.02, -0.5, 1e-4


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    if scale == "full":
        from .full import reproduce_full

        return reproduce_full(out_dir, seed)
    cfg = CFG[scale]
    out_dir = Path(out_dir)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        records = _timing(res, cfg, seed)
        _fp32(res, cfg, seed)
        acc = _accuracy(res, cfg, seed)
    finally:
        torch.set_num_threads(threads)
    _write_csv(records, out_dir / "bench.csv")
    from .plots import plot_all

    res.figures += plot_all(records, acc, out_dir) + ["bench.csv"]
    res.notes += [
        "Core Space, KnOTS, full-space merging, peft's add_weighted_adapter and the rules follow "
        "their public code [C], each by its fastest exact route (core: float64 Grams + R×R eigh; "
        "knots: QR of the factors + one R×R SVD). The circulant space is OUR RECONSTRUCTION from "
        "the CircuMerge abstract: one seeded circulant transform (torch.fft) shared by all tasks, "
        "uniform row sampling, sketched Grams, the rule on R×R coordinates, one lift.",
        "circulant@none = the transform without sampling (mechanism ablation: equals core).",
        "Timings: one torch thread, medians of interleaved rounds on a 2-core machine shared with "
        "other jobs; ratios are per round.",
    ]
    return res


def _timing(res: Results, cfg: dict, seed: int) -> list[dict]:
    m, n = cfg["m"], cfg["n"]
    records = []
    for T, r in cfg["sweep"]:
        R = T * r
        spaces = ["core", "circulant", "circulant@none"]
        if R <= cfg["knots_max_R"]:  # the slower exact routes only where they fit the budget
            spaces += ["core_svd", "knots"]
        records += bench(m, n, T, r, spaces=spaces, rules=("ties",), seed=seed, repeats=cfg["repeats"],
                         warmup=1, error_rules=("ta", "tsv", "iso"))
    for x in records:
        exp = f"timing_{x['m']}x{x['n']}_T{x['T']}_r{x['r']}"
        if x["median_s"] is not None:
            res.add(exp, f"{x['space']}/{x['rule']}", "merge_time_s", x["median_s"], unit="s",
                    seeds=[seed], p20=x["p20_s"], p80=x["p80_s"], s_A=x["s_A"], s_B=x["s_B"])
            res.add(exp, f"{x['space']}/{x['rule']}", "ratio_time_to_core", x["ratio_to_core"],
                    unit="x", seeds=[seed])
        res.add(exp, f"{x['space']}/{x['rule']}", "sketch_error_to_core", x["rel_error_to_core"],
                seeds=[seed], s_A=x["s_A"], s_B=x["s_B"])
    # the claim: circulant (auto) vs the fastest exact core at the largest shape, per-round ratios
    T, r = cfg["sweep"][-1]
    by = {(x["space"], x["rule"]): x for x in records if (x["T"], x["r"]) == (T, r)}
    circ = by[("circulant", "ties")]
    per_round = np.array(circ["times_s"]) / np.array(circ["core_times_s"])
    iv = paired_interval(per_round)
    errs = {ru: by[("circulant", ru)]["rel_error_to_core"] for ru in ("ties", "tsv", "iso")}
    worst = max(errs.values())
    check = ClaimCheck.compare(
        CLAIMS[0], float(per_round.mean()), threshold=TIME_TARGET, interval=(iv.low, iv.high),
        note=f"m={m}, n={n}, T={T}, r={r} (R={T * r}), TIES, auto sketch s_A={circ['s_A']}, "
             f"s_B={circ['s_B']}; sketch error ties/tsv/iso "
             + "/".join(f"{v:.3f}" for v in errs.values())
             + f" (target ≤ {ERROR_TARGET}); held needs both")
    if check.held and worst > ERROR_TARGET:
        check.held = False
    res.claims.append(check)
    crossover = [x["R"] for x in records if x["space"] == "circulant" and x["rule"] == "ties"
                 and x["ratio_to_core"] < 1.0 and x["rel_error_to_core"] <= ERROR_TARGET]
    res.add("timing_crossover", "circulant", "crossover_R_by_time",
            float(min(crossover)) if crossover else float("nan"), seeds=[seed],
            note="R with circulant/core < 1 and sketch error ≤ 2 % (NaN: none in the measured range)")
    if cfg["peft"] and importlib.util.find_spec("peft") is not None:
        pm, pn, pT, pr = cfg["peft"]
        recs = bench(pm, pn, pT, pr, spaces=["core", "circulant", "peft"], rules=("ties",), seed=seed,
                     repeats=2, warmup=0)
        records += recs
        for x in recs:
            exp = f"timing_{pm}x{pn}_T{pT}_r{pr}"
            res.add(exp, f"{x['space']}/ties", "merge_time_s", x["median_s"], unit="s", seeds=[seed])
            res.add(exp, f"{x['space']}/ties", "ratio_time_to_core", x["ratio_to_core"], unit="x",
                    seeds=[seed])
    return records


def _fp32(res: Results, cfg: dict, seed: int) -> None:
    """fp32 shared-init adapters (A_t = A₀ + 1e-3 noise): circulant without sampling vs core, and
    both vs the float64 SVD reference; the float32-Gram route shows the drift it replaces."""
    from .gram import merge_from_grams
    from .spaces import SpaceOptions, merge_layer

    T, r, m, n = cfg["fp32"]
    As, Bs = shared_init_factors(T, r, m, n, seed=seed + 7)
    exp = f"fp32_shared_init_{m}x{n}_T{T}_r{r}"
    worst = 0.0
    for rule in RULES:
        core = merge_layer(As, Bs, space="core", rule=rule, seed=seed)
        circ = merge_layer(As, Bs, space="circulant", rule=rule, seed=seed,
                           opts=SpaceOptions(sketch_size="none"))
        ref = merge_layer([a.double() for a in As], [b.double() for b in Bs], space="core_svd",
                          rule=rule, seed=seed)
        A_s, B_s = torch.cat(As), torch.cat(Bs, 1)
        g32 = merge_from_grams(As, Bs, (A_s @ A_s.T).double(), (B_s.T @ B_s).double(), rule=rule,
                               weights=torch.ones(T), density=None,
                               generator=torch.Generator().manual_seed(seed * 1_000_003),
                               rank_tol=1e-5)
        e = relative_error(*circ, *core)
        worst = max(worst, e)
        res.add(exp, f"circulant@none/{rule}", "rel_diff_to_core", e, seeds=[seed])
        res.add(exp, f"core/{rule}", "rel_diff_to_fp64_svd", relative_error(*core, *ref), seeds=[seed])
        res.add(exp, f"fp32_gram_core/{rule}", "rel_diff_to_fp64_svd", relative_error(*g32, *ref),
                seeds=[seed])
    res.claims.append(ClaimCheck.compare(
        CLAIMS[2], worst, threshold=FP32_TARGET,
        note=f"max over {len(RULES)} rules, fp32 factors m={m}, n={n}, T={T}, r={r}, A_t = A₀ + 1e-3 noise"))


def _accuracy(res: Results, cfg: dict, seed: int) -> dict:
    from .accuracy import TASKS, run_accuracy

    names = list(TASKS)[: cfg["tasks"]]
    s = cfg["acc_sketch"]
    spaces = ["full", "knots", "core", "circulant@none", f"circulant@{s}"]
    seeds = [seed + i for i in range(cfg["acc_seeds"])]
    runs = [run_accuracy(names, seed=sd, rank=4, base_steps=cfg["base_steps"],
                         lora_steps=cfg["lora_steps"], spaces=spaces, rules=cfg["acc_rules"],
                         lambdas=LAMBDAS) for sd in seeds]
    exp = f"digits_T{len(names)}_r4"
    res.add(exp, "individual", "mean_accuracy", [np.mean(list(r["individual"].values())) for r in runs],
            seeds=seeds, split="test")
    table = {}
    for key in runs[0]["merged"]:
        vals = [100 * r["merged"][key]["norm_acc"] for r in runs]
        table[key] = float(np.mean(vals))
        res.add(exp, f"{key[0]}/{key[1]}", "normalized_accuracy", vals, seeds=seeds, unit="%",
                split="test", lambda_chosen_on="dev", lambdas=[r["merged"][key]["lambda"] for r in runs])
    rules = cfg["acc_rules"]

    def gaps(label: str) -> list[float]:  # per seed: mean over rules of label − core (points)
        return [100 * float(np.mean([r["merged"][(label, ru)]["norm_acc"] - r["merged"][("core", ru)]["norm_acc"]
                                     for ru in rules])) for r in runs]

    g_s, g_none = gaps(f"circulant@{s}"), gaps("circulant@none")
    res.add(exp, f"circulant@{s}-core", "normalized_accuracy_gap_points", g_s, seeds=seeds)
    res.add(exp, "circulant@none-core", "normalized_accuracy_gap_points", g_none, seeds=seeds)
    iv = paired_interval(g_s)
    per_rule = ", ".join(f"{ru} {table[(f'circulant@{s}', ru)] - table[('core', ru)]:+.2f}" for ru in rules)
    res.claims.append(ClaimCheck.compare(
        CLAIMS[1], float(np.mean(g_s)), threshold=GAP_TARGET, interval=(iv.low, iv.high),
        note=f"circulant with sampling engaged (s={s} rows on the 256-wide sides, R={4 * len(names)}) − "
             f"core, mean over {len(rules)} rules, {len(seeds)} seeds, λ chosen on dev, test split; "
             f"per rule: {per_rule}; without sampling: {np.mean(g_none):+.2f}"))
    return table


def _write_csv(records: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = [k for k in records[0] if k not in ("times_s", "core_times_s")]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(records)
