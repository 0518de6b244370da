"""The utility–fairness (Pareto) plot of ``front`` and the reproduction."""

from __future__ import annotations

from pathlib import Path


def pareto_plot(mean: dict, path: Path, title: str) -> None:
    """``mean``: {(method, setting): {"acc", "balance_ratio", ...}} → scatter, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    methods = sorted({m for m, _ in mean})
    for meth in methods:
        pts = sorted((v["acc"], v["balance_ratio"]) for (m, _), v in mean.items() if m == meth)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if len(pts) > 1 else "s", label=meth)
    ax.set(xlabel="ACC", ylabel="Balance (ratio)", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
