"""Claim checks and figures of the reproduction (I/O only; the numbers come from experiments.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26_shared import ClaimCheck
from icml26_shared.report import line_plot


def claim_checks(desc, summary: dict[str, dict[str, float]], sc: dict) -> list[ClaimCheck]:
    claims = {c.id: c for c in desc.claims}
    mt, grpo, dapo = summary["mtgrpo"], summary["grpo"], summary["dapo"]
    best_avg = max(grpo["avg"], dapo["avg"])
    pct = 100.0  # claims in percent / points, as the paper reports them (rows hold fractions)
    out = [
        ClaimCheck.compare(claims["worst_vs_grpo"], pct * mt["worst"], pct * grpo["worst"], "grpo",
                           margin=10.0, note="target: MT-GRPO ≥ GRPO + 10 points (mean over seeds)"),
        ClaimCheck.compare(claims["worst_vs_dapo"], pct * mt["worst"], pct * dapo["worst"], "dapo",
                           margin=3.0, note="target: MT-GRPO ≥ DAPO + 3 points (mean over seeds)"),
        ClaimCheck.compare(claims["avg_competitive"], pct * (mt["avg"] - best_avg), None, "",
                           threshold=-2.0,
                           note=f"MT-GRPO average {pct * mt['avg']:.1f}% minus the best baseline's "
                                f"{pct * best_avg:.1f}%; held if ≥ −2 points"),
    ]
    ratio = mt["steps"] / dapo["steps"] if dapo["steps"] > 0 else float("nan")
    out.append(ClaimCheck.compare(
        claims["steps_to_threshold"], ratio, None, "", threshold=0.6,
        note=f"steps to worst-task ≥ {sc['threshold']}: MT-GRPO {mt['steps']:.1f} "
             f"(reached {mt['reached']}/{sc['seeds']}) vs DAPO {dapo['steps']:.1f} "
             f"(reached {dapo['reached']}/{sc['seeds']}); a run that never reaches it counts as "
             f"budget + one eval interval; held if ratio ≤ 0.6"))
    no_rps = ", ".join(f"{m} {summary[m]['gap']:.3f}" for m in ("dapo", "iwu_only") if m in summary)
    out.append(ClaimCheck.compare(
        claims["rps_share"], mt["gap"], None, "", threshold=0.05,
        note="max over tasks of |time-averaged realised share − time-averaged z| with RPS; "
             f"without RPS (mixture fixed before filtering): {no_rps}"))
    return out


def figures(runs: dict[str, list[dict]], names: list[str], out_dir: Path) -> list[str]:
    out_dir = Path(out_dir)
    figs = []
    series = {}
    for m, rs in runs.items():
        steps = [s for s, _ in rs[0]["curve"]]
        worst = np.array([[min(a.values()) for _, a in r["curve"]] for r in rs])
        series[m] = (steps, worst.mean(0).tolist(), worst.std(0).tolist())
    line_plot(out_dir / "worst_task_acc.png", series, xlabel="global step",
              ylabel="held-out worst-task accuracy", title="worst-task accuracy (mean ± std over seeds)")
    figs.append("worst_task_acc.png")
    for m in ("mtgrpo", "iwu_only"):
        if m not in runs:
            continue
        h = runs[m][0]["history"]
        steps = [r["step"] for r in h]
        ser = {}
        for k, n in enumerate(names):
            ser[f"z {n}"] = (steps, [r["z"][k] for r in h])
            ser[f"share {n}"] = (steps, _smooth([r["share"][k] for r in h]))
        line_plot(out_dir / f"z_vs_share_{m}.png", ser, xlabel="global step", ylabel="fraction",
                  title=f"{m}: task weight z vs realised batch share (seed 0, share smoothed)")
        figs.append(f"z_vs_share_{m}.png")
    for m, rs in runs.items():
        steps = [s for s, _ in rs[0]["curve"]]
        ser = {n: (steps, np.mean([[a[n] for _, a in r["curve"]] for r in rs], 0).tolist())
               for n in names}
        line_plot(out_dir / f"per_task_acc_{m}.png", ser, xlabel="global step",
                  ylabel="held-out accuracy", title=f"{m}: per-task accuracy (mean over seeds)")
        figs.append(f"per_task_acc_{m}.png")
    return figs


def _smooth(x: list[float], w: int = 5) -> list[float]:
    a = np.asarray(x, float)
    return [float(a[max(0, i - w + 1): i + 1].mean()) for i in range(len(a))]
