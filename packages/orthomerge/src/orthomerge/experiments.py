"""The reproduction: ``reproduce(scale, out_dir, seed) -> Results`` on the digits benchmark [R].

Every strength (λ, TIES/DARE density, residual scale) is chosen per method on the dev split
(mean over seeds of dev normalised accuracy); every claim is computed on test, paired by seed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from icml26_shared import ClaimCheck, Results
from icml26_shared.eval import paired_interval
from icml26_shared.io import dumps_json
from icml26_shared.runner import check_scale

from .config import AUTHORS_TIES
from .registry import CLAIMS, DESCRIPTOR

ALL_TASKS = ("parity", "high", "mod3", "rot90", "perm")
CFG = {
    "smoke": dict(seeds=1, tasks=("parity", "rot90"), base_steps=40, expert_steps=20, block=16,
                  densities=(0.2,), rules=("ta", "ties"), oft_methods=("orthomerge", "avg", "ta", "ties"),
                  geometry_T=(2,), grid_step=3, grid_offset=2, peft=False),
    "quick": dict(seeds=5, tasks=ALL_TASKS, base_steps=300, expert_steps=200, block=16,
                  densities=(0.2, 0.5), rules=("ta", "ties", "ties_tensor", "dare_ties", "tsv"),
                  oft_methods=("orthomerge", "avg", "ta", "ties", "ties_tensor", "dare_ties", "tsv"),
                  geometry_T=(2, 3, 4, 5), grid_step=1, peft=True, neumann=True),
}
EUCLID = ("ta", "ties", "ties_tensor", "dare_ties", "tsv")


def reproduce(scale: str, out_dir: Path, seed: int = 0) -> Results:
    check_scale(scale)
    if scale == "full":
        from .full import reproduce_full

        return reproduce_full(Path(out_dir), seed)
    import torch

    from .benchmark import peft_check, run_seed

    cfg = CFG[scale]
    out_dir = Path(out_dir)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale=scale, seed=seed)
    seeds = [seed + i for i in range(cfg["seeds"])]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        runs = [run_seed(cfg, s, out_dir / "experts") for s in seeds]
        gaps = []
        if cfg["peft"]:
            from .benchmark import Adapter, merge_oft_adapters
            from .io import Tensors, write_adapter

            for s, r in zip(seeds, runs, strict=True):
                ads = [Adapter.open(d) for d in r["dirs"]["oft"]]
                tensors, config = merge_oft_adapters(ads)
                (out_dir / "merged").mkdir(parents=True, exist_ok=True)
                merged = write_adapter(out_dir / "merged" / f"seed{s}", config, tensors, force=True)
                bt = Tensors.open(r["dirs"]["base"])
                base = {k: bt[k] for k in bt.keys()}
                X = torch.randn(64, 64, generator=torch.Generator().manual_seed(s))
                gaps.append(peft_check(base, merged, r["dirs"]["oft"][0], X))
    finally:
        torch.set_num_threads(threads)
    res.add("digits", "all", "benchmark_seconds", time.perf_counter() - t0, unit="s")
    _report(res, runs, seeds, cfg, gaps)
    (out_dir / "runs.json").write_text(dumps_json(
        [{k: v for k, v in r.items() if k != "dirs"} for r in runs], indent=1, default=float))
    res.figures += _plot(runs, out_dir)
    res.notes += [
        "Faithful [C]: the OFT merge (magnitude-corrected, Cayley chart, norms over a module's blocks), "
        "the Procrustes rotation R_i = UVᵀ of svd(W0ᵀT_i), the G/C targets, the inverse-Cayley merge of "
        "the rotations and the residual rules. Reconstructed [R]: the digits benchmark, frozen random "
        "task heads, strength grids, the forgetting-at-equal-accuracy interpolation and the guards.",
        "Splits: digits 60/20/20 train/dev/test per seed (stratified). Every strength and density is "
        "chosen per method on dev (mean over seeds); the best Euclidean merge and the G/C variant are "
        "chosen on dev; the equal-accuracy level comes from dev curves; all claims are on test.",
        "OFT experts are trained through peft's get_peft_model (OFTConfig on l1/l2, exact Cayley path) "
        "and saved with save_pretrained; a second set on peft's default Neumann path (5 terms) is "
        "trained for the geometry tables only; quick loads the experts and the merged adapter with "
        "PeftModel.from_pretrained. TIES trims each expert's top density over every tensor it merges "
        "(model scope, the authors'); ties_tensor is the authors' setting with peft's per-tensor trim. "
        "The SmolLM2 OFT language-model run (issue 62 item 7) is not done.",
        f"Versions: torch {torch.__version__}, peft {_peft_version()}, one torch thread.",
        "The machine's 2 CPU cores were shared with other jobs: wall times are as measured.",
    ]
    return res


def _peft_version() -> str:
    from importlib.metadata import version

    return version("peft")


def _at(rows, scale: float, density: float | None) -> int | None:
    """Index of the grid point at ``scale`` (and ``density``), None if the grid lacks it."""
    for i, x in enumerate(rows):
        if x["scale"] == scale and (density is None or x["density"] == density):
            return i
    return None


def _choose(runs, key_fn) -> int:
    """Index into the strength grid with the best mean dev normalised accuracy over seeds."""
    grids = [key_fn(r) for r in runs]
    dev = np.mean([[row["dev_norm"] for row in g] for g in grids], axis=0)
    return int(np.argmax(dev))


def _report(res: Results, runs, seeds, cfg, gaps) -> None:
    base_test = [r["base"]["test"] for r in runs]
    res.add("digits", "base", "base_accuracy_test", base_test, seeds=seeds)
    for kind in ("oft", "full"):
        res.add(f"digits_{kind}_T{len(cfg['tasks'])}", "experts", "mean_expert_accuracy_test",
                [float(np.mean(list(r[f"indiv_{kind}"]["test"].values()))) for r in runs], seeds=seeds,
                note="each expert on its own task (the normalised-accuracy denominators)")
    chosen: dict[str, dict] = {}
    groups = [("oft", m, (lambda r, m=m: r["oft"][m])) for m in cfg["oft_methods"]]
    groups += [("full", k, (lambda r, k=k: r["full"][k])) for k in runs[0]["full"]]
    for kind, name, fn in groups:
        i = _choose(runs, fn)
        rows = [fn(r)[i] for r in runs]
        norm = [100 * x["test_norm"] for x in rows]
        forget = [100 * (r["base"]["test"] - x["test_base"]) for r, x in zip(runs, rows, strict=True)]
        chosen[f"{kind}:{name}"] = {"norm": norm, "forget": forget, "i": i}
        exp = f"digits_{kind}_T{len(cfg['tasks'])}"
        rule = name.split("/")[-1]
        res.add(exp, name, "normalized_accuracy_test", norm, seeds=seeds, unit="%",
                scale=rows[0]["scale"], density=rows[0]["density"],
                chosen_on="fixed (the authors' TIES setting, per-tensor trim)" if rule == "ties_tensor" else "dev")
        res.add(exp, name, "forgetting_points_test", forget, seeds=seeds, unit="points")
        # the paper's / authors' fixed settings beside the dev-swept row: OrthoMerge and avg at
        # λ = 1, TIES at density 0.2 and λ = 1 (model-scope trim; ties_tensor is that point per tensor)
        fixed = (1.0, None) if name in ("orthomerge", "avg") else AUTHORS_TIES if rule == "ties" else None
        j = _at(fn(runs[0]), *fixed) if fixed else None
        if j is not None:
            rows = [fn(r)[j] for r in runs]
            norm = [100 * x["test_norm"] for x in rows]
            chosen[f"{kind}:{name}@fixed"] = {"norm": norm, "i": j}
            label = f"{name} (λ 1, the paper's)" if fixed[1] is None else f"{name} (authors: density 0.2, λ 1)"
            res.add(exp, label, "normalized_accuracy_test", norm, seeds=seeds, unit="%",
                    scale=rows[0]["scale"], density=rows[0]["density"], chosen_on="fixed")
            res.add(exp, label, "forgetting_points_test",
                    [100 * (r["base"]["test"] - x["test_base"]) for r, x in zip(runs, rows, strict=True)],
                    seeds=seeds, unit="points")
    # C1: orthogonality on the exact path and peft loading
    orth = max(r["orth_err"] for r in runs)
    res.add("digits_oft", "orthomerge", "max_orthogonality_error", orth, seeds=seeds)
    check = ClaimCheck.compare(CLAIMS[0], orth, threshold=1e-6,
                               note=("peft loaded every merged adapter; max |peft − ours| output gap "
                                     f"{max(gaps):.2e}" if gaps else "peft load not run at this scale"))
    if gaps:
        res.add("digits_oft", "orthomerge", "peft_output_gap", max(gaps), seeds=seeds)
        check.held = bool(check.held and max(gaps) < 1e-4)
    res.claims.append(check)
    # C2/C3: forgetting at equal target accuracy, from the λ sweeps
    for claim, other in ((CLAIMS[1], "ta"), (CLAIMS[2], "ties")):
        if other not in cfg["oft_methods"]:
            continue
        f_om, f_b, level = _equal_accuracy(runs, chosen, "oft", "orthomerge", other)
        ok = ~(np.isnan(f_om) | np.isnan(f_b))
        reach = (f"not reached on test: OrthoMerge {int(np.isnan(f_om).sum())}, {other} "
                 f"{int(np.isnan(f_b).sum())} of {len(f_om)} seeds")
        name = f"forgetting_at_equal_accuracy_vs_{other}"
        res.add("digits_oft", "orthomerge", f"{name}_points", list(f_om), unit="points", seeds=seeds,
                note="NaN: the dev-chosen level is not reached on that seed's test sweep")
        res.add("digits_oft", other, f"{name}_points", list(f_b), unit="points", seeds=seeds)
        if ok.sum() == 0:
            res.claims.append(ClaimCheck.compare(claim, None, note=f"no seed where both reach the level; {reach}"))
            continue
        d = paired_interval(f_om[ok] - 0.7 * f_b[ok])
        ratio = float(f_om[ok].mean() / f_b[ok].mean()) if f_b[ok].mean() != 0 else float("nan")
        c = ClaimCheck.compare(claim, ratio, threshold=0.7, baseline_name=other, note=(
            f"OrthoMerge {f_om[ok].mean():.2f} vs {other} {f_b[ok].mean():.2f} forgetting points at "
            f"normalised accuracy {np.mean(np.array(level)[ok]):.1f}% (level chosen per seed on dev: the "
            f"highest both reach on dev; {reach}); paired 95% CI of f_om − 0.7·f_{other}: {d} over "
            f"{int(ok.sum())} seeds; held iff the CI is below 0"))
        if d.defined:
            c.held = d.clears(0.0, "lower")
        else:
            c.mark_not_evaluated("fewer than 3 seeds where both reach the level: no interval")
        res.claims.append(c)
    # C4: normalised accuracy vs the best Euclidean merge (best chosen on dev)
    eu = [m for m in EUCLID if m in cfg["oft_methods"]]
    dev_mean = {m: np.mean([r["oft"][m][chosen[f"oft:{m}"]["i"]]["dev_norm"] for r in runs]) for m in eu}
    best = max(eu, key=dev_mean.get)
    om, bb = np.array(chosen["oft:orthomerge"]["norm"]), np.array(chosen[f"oft:{best}"]["norm"])
    d = paired_interval(om, bb)
    avg = np.array(chosen["oft:avg"]["norm"])
    c = ClaimCheck.compare(CLAIMS[3], float(om.mean()), float(bb.mean()), best, margin=1.0, note=(
        f"paired 95% CI of OrthoMerge − {best}: {d} points ({len(seeds)} seeds); held iff it clears +1; "
        f"ablation avg (no magnitude correction): {avg.mean():.2f} (CI vs OrthoMerge {paired_interval(om, avg)})"))
    c.held = d.clears(1.0, "higher")
    res.claims.append(c)
    # C7: the magnitude correction isolated: OrthoMerge vs avg (the same merge without it), same
    # experts and run, at the paper's strength λ = 1 and at each one's dev-chosen strength
    if "oft:orthomerge@fixed" in chosen and "oft:avg@fixed" in chosen:
        om1, av1 = (np.array(chosen[f"oft:{m}@fixed"]["norm"]) for m in ("orthomerge", "avg"))
        d1, dd = paired_interval(om1, av1), paired_interval(om, avg)
        lam = {m: runs[0]["oft"][m][chosen[f"oft:{m}"]["i"]]["scale"] for m in ("orthomerge", "avg")}
        more = "more than a rescale" if dd.clears(0.0, "higher") else "no more than a rescale here"
        res.claims.append(ClaimCheck.compare(CLAIMS[6], float(om1.mean()), float(av1.mean()), "avg (λ 1)",
                                             interval=d1, note=(
            f"λ = 1: OrthoMerge {om1.mean():.2f} vs avg {av1.mean():.2f}, paired 95% CI {d1}; at dev-chosen "
            f"strength: OrthoMerge {om.mean():.2f} (λ {lam['orthomerge']:g}) vs avg {avg.mean():.2f} "
            f"(λ {lam['avg']:g}), CI {dd}: the correction is {more} (the interval at dev strength "
            f"{'clears' if dd.clears(0.0, 'higher') else 'does not clear'} 0)")))
    # C5: OrthoMerge-G/C + TIES vs TIES on full fine-tunes (variant chosen on dev)
    if "ties" in cfg["rules"]:
        def dev_of(k):
            return np.mean([r["full"][k][chosen[f"full:{k}"]["i"]]["dev_norm"] for r in runs])
        var = max(("general/ties", "conflict/ties"), key=dev_of)
        a, b = np.array(chosen[f"full:{var}"]["norm"]), np.array(chosen["full:none/ties"]["norm"])
        d = paired_interval(a, b)
        c = ClaimCheck.compare(CLAIMS[4], float(a.mean()), float(b.mean()), "TIES (--ortho none)", note=(
            f"variant {var.split('/')[0]} chosen on dev; paired 95% CI {d} points; held iff above 0"))
        c.held = d.clears(0.0, "higher")
        res.claims.append(c)
    # C6: geometry, on the exact path (a check: it holds by construction) and, beside it, the
    # Neumann path peft uses by default (measured)
    geo = [g for r in runs for g in r["geometry"]]
    for path in sorted({g["path"] for g in geo}):
        exp = "geometry" if path == "exact" else f"geometry_{path}"
        for method in sorted({g["method"] for g in geo if g["path"] == path}):
            for T in sorted({g["T"] for g in geo if g["method"] == method}):
                sel = [g for g in geo if g["path"] == path and g["method"] == method and g["T"] == T]
                for key in ("he_rel_change", "spectral_rel_change", "orthogonality_error"):
                    if sel[0][key] is not None:
                        res.add(exp, method, f"{key}_T{T}", float(np.max([g[key] for g in sel])),
                                note="max over both layers and all seeds")
    ex = [g for g in geo if g["path"] == "exact"]
    worst = max(max(g["he_rel_change"], g["spectral_rel_change"]) for g in ex if g["method"] == "orthomerge")
    ta_worst = max(max(g["he_rel_change"], g["spectral_rel_change"]) for g in ex if g["method"] == "ta")
    neu = [g for g in geo if g["path"] == "neumann"]
    neu_note = ""
    if neu:
        def mx(m, k):
            return max(g[k] for g in neu if g["method"] == m)
        neu_note = (f"; Neumann path (peft's default, same tasks): experts ‖RᵀR − I‖_F up to "
                    f"{mx('expert', 'orthogonality_error'):.3g} and spectral-norm change {mx('expert', 'spectral_rel_change'):.3g}; "
                    f"OrthoMerge up to {mx('orthomerge', 'orthogonality_error'):.3g} / "
                    f"{mx('orthomerge', 'spectral_rel_change'):.3g}; written with --exact-cayley "
                    f"{mx('orthomerge --exact-cayley', 'orthogonality_error'):.2g} / "
                    f"{mx('orthomerge --exact-cayley', 'spectral_rel_change'):.2g}")
    res.claims.append(ClaimCheck.compare(CLAIMS[5], worst, threshold=1e-9, note=(
        f"exact Cayley path: max relative change over T in {sorted({g['T'] for g in ex if g['T'] > 1})}, both "
        f"layers, all seeds; TA (λ=0.3) on the same experts: {ta_worst:.3g}" + neu_note)))
    if neu and res.claims[0].claim_id == CLAIMS[0].id:
        res.claims[0].note += (f"; Neumann path: merged ‖RᵀR − I‖_F up to "
                               f"{max(g['orthogonality_error'] for g in neu if g['method'] == 'orthomerge'):.3g}")


def _equal_accuracy(runs, chosen, kind, a, b):
    """Per seed: forgetting of ``a`` and ``b`` at one normalised-accuracy level, interpolated on
    their λ sweeps (densities fixed at their dev choice). The level is chosen on dev only: the
    highest accuracy both methods reach on that seed's dev sweep. Nothing is capped by test: a
    method whose test sweep does not reach the level is "not reached" (NaN) on that seed."""
    def sweep(r, m):
        rows = r[kind][m]
        d = rows[chosen[f"{kind}:{m}"]["i"]]["density"]
        return [x for x in rows if x["density"] == d]
    fa, fb, levels = [], [], []
    for r in runs:
        level = min(max(x["dev_norm"] for x in sweep(r, m)) for m in (a, b))
        curves = {m: [(x["test_norm"], r["base"]["test"] - x["test_base"]) for x in sweep(r, m)] for m in (a, b)}
        levels.append(100 * level)
        fa.append(100 * _forgetting_at(curves[a], level))
        fb.append(100 * _forgetting_at(curves[b], level))
    return np.array(fa), np.array(fb), levels


def _forgetting_at(curve, level) -> float:
    """Least forgetting on the piecewise-linear (accuracy, forgetting) curve at accuracy ≥ level."""
    cands = [f for acc, f in curve if acc >= level]
    for (a1, f1), (a2, f2) in zip(curve, curve[1:]):
        if a1 != a2 and (a1 - level) * (a2 - level) <= 0:
            cands.append(f1 + (level - a1) / (a2 - a1) * (f2 - f1))
    return min(cands) if cands else float("nan")


def _plot(runs, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for m in runs[0]["oft"]:
        acc = np.mean([[x["test_norm"] for x in r["oft"][m]] for r in runs], 0)
        fg = np.mean([[r["base"]["test"] - x["test_base"] for x in r["oft"][m]] for r in runs], 0)
        ax[0].plot(100 * acc, 100 * fg, "o-", label=m, ms=3)
    ax[0].set(xlabel="normalised accuracy, test (%)", ylabel="base-task forgetting (points)",
              title="OFT experts: strength sweeps")
    ax[0].legend(fontsize=7)
    for k in runs[0]["full"]:
        acc = np.mean([[x["test_norm"] for x in r["full"][k]] for r in runs], 0)
        fg = np.mean([[r["base"]["test"] - x["test_base"] for x in r["full"][k]] for r in runs], 0)
        ax[1].plot(100 * acc, 100 * fg, "o-" if k.startswith("none") else "s--", label=k, ms=3)
    ax[1].set(xlabel="normalised accuracy, test (%)", title="Full fine-tunes: ± decoupling")
    ax[1].legend(fontsize=6)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / "orthomerge.png", dpi=100)
    plt.close(fig)
    return ["orthomerge.png", "runs.json"]
