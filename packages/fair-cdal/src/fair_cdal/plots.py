"""The utility–fairness (Pareto) plot of ``front`` and the reproduction."""

from __future__ import annotations

import io
from pathlib import Path

from icml26_shared.io import atomic_write_bytes


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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue(), mkdir=False)
