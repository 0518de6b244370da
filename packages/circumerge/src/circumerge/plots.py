"""The figures: merge time and sketch error against the stacked rank R (``bench --plot`` and the
reproduction), and the digits accuracy per space × rule (the reproduction)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from icml26_shared.io import atomic_write_bytes

_STYLE = {16: "o-", 64: "s--"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_sweep(ax_time, ax_err, records: list[dict], rule: str = "ties") -> None:
    """Time (left) and error to core (right) against R, one line per (space, LoRA rank r) at the
    first shape of ``records``; other shapes (peft's) are drawn as stars with their own label."""
    shape = (records[0]["m"], records[0]["n"])
    sweep = [x for x in records if (x["m"], x["n"]) == shape and x["rule"] == rule]
    for space in dict.fromkeys(x["space"] for x in sweep):
        for r in sorted({x["r"] for x in sweep if x["space"] == space}):
            pts = sorted((x["R"], x["median_s"], x["rel_error_to_core"]) for x in sweep
                         if x["space"] == space and x["r"] == r and x["median_s"] is not None)
            if not pts:
                continue
            style, label = _STYLE.get(r, "^-."), f"{space} (r={r})"
            line, = ax_time.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
            if space != "core":
                ax_err.plot([p[0] for p in pts], [max(p[2], 1e-12) for p in pts], style,
                            color=line.get_color(), label=label)
    for x in records:
        if (x["m"], x["n"]) != shape and x["rule"] == rule and x["median_s"] is not None:
            mark = "k*" if x["space"] == "peft" else "x"
            ax_time.plot([x["R"]], [x["median_s"]], mark, ms=9 if x["space"] == "peft" else 6,
                         label=f"{x['space']} at {x['m']}x{x['n']}")
            if x["space"] not in ("core",):
                ax_err.plot([x["R"]], [max(x["rel_error_to_core"], 1e-12)], mark,
                            label=f"{x['space']} at {x['m']}x{x['n']}")
    Rs = sorted({x["R"] for x in records})
    for ax in (ax_time, ax_err):
        ax.set_xscale("log")
        ax.set_xticks(Rs, [str(R) for R in Rs])
        ax.minorticks_off()
    ax_time.set(yscale="log", xlabel="stacked rank R = T·r",
                ylabel="merge time per layer (s)",
                title=f"{rule.upper()} merge time, {shape[0]}x{shape[1]}, 1 thread")
    ax_time.legend(fontsize=6)
    ax_err.axhline(0.02, color="grey", ls="--", lw=0.8)
    ax_err.set(yscale="log", xlabel="stacked rank R = T·r",
               ylabel="‖ΔW* − ΔW*_core‖ / ‖ΔW*_core‖", title=f"error to core ({rule}; dashed: 2 %)")
    ax_err.legend(fontsize=6)


def plot_bench(records: list[dict], path: Path) -> Path:
    """``circumerge bench --plot FILE``: merge time and sketch error against R (the timed rule)."""
    plt = _pyplot()
    rule = next(x["rule"] for x in records if x["median_s"] is not None)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    draw_sweep(ax1, ax2, records, rule)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower(), dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())  # never a half-written figure


def plot_all(records: list[dict], acc: dict, out_dir: Path) -> list[str]:
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4))
    draw_sweep(ax1, ax2, records, "ties")
    labels = sorted({k[0] for k in acc})
    rules = sorted({k[1] for k in acc})
    width = 0.8 / len(labels)
    for i, lab in enumerate(labels):
        ax3.bar(np.arange(len(rules)) + i * width, [acc[(lab, ru)] for ru in rules], width, label=lab)
    ax3.set_xticks(np.arange(len(rules)) + 0.4 - width / 2, rules, rotation=30, fontsize=7)
    ax3.set(ylabel="normalized accuracy (%, test)", title="Digits LoRA merging (λ on dev)")
    ax3.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "circumerge.png", dpi=110)
    plt.close(fig)
    return ["circumerge.png"]
