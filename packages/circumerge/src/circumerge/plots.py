"""The reproduction's figures: merge time and sketch error against the stacked rank R, and the
digits accuracy per space × rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_all(records: list[dict], acc: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4))
    shape = (records[0]["m"], records[0]["n"])
    sweep = [x for x in records if (x["m"], x["n"]) == shape]
    for space in dict.fromkeys(x["space"] for x in sweep):
        pts = sorted((x["R"], x["median_s"], x["rel_error_to_core"]) for x in sweep
                     if x["space"] == space and x["rule"] == "ties" and x["median_s"] is not None)
        if pts:
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=space)
            if space != "core":
                ax2.plot([p[0] for p in pts], [max(p[2], 1e-12) for p in pts], "o-", label=space)
    peft = [x for x in records if x["space"] == "peft" and x["median_s"] is not None]
    for x in peft:
        ax1.plot([x["R"]], [x["median_s"]], "k*", label=f"peft ties_svd ({x['m']}x{x['n']})")
    ax1.set(xscale="log", yscale="log", xlabel="stacked rank R = T·r",
            ylabel="merge time per layer (s)", title=f"TIES merge time, {shape[0]}x{shape[1]}, 1 thread")
    ax1.legend(fontsize=7)
    ax2.axhline(0.02, color="grey", ls="--", lw=0.8)
    ax2.set(xscale="log", yscale="log", xlabel="stacked rank R", ylabel="‖ΔW* − ΔW*_core‖ / ‖ΔW*_core‖",
            title="sketch error (TIES; dashed: 2 %)")
    ax2.legend(fontsize=7)
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
