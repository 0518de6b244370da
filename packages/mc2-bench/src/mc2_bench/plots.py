"""The PCA plot of preference states [C] pca.py: one layer's last-prompt-position states under
follow-image, follow-text and no instruction, projected on their top two principal components,
with arrows from the no-instruction centroid to the two instructed centroids."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def pca_2d(groups: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Project every group on the top two PCs of all states pooled (centred)."""
    allx = np.concatenate([np.asarray(g, float) for g in groups.values()])
    mu = allx.mean(0)
    _, _, vt = np.linalg.svd(allx - mu, full_matrices=False)
    return {k: (np.asarray(g, float) - mu) @ vt[:2].T for k, g in groups.items()}


def pca_plot(groups: dict[str, np.ndarray], path, title: str = "") -> Path:
    """Write the PCA scatter with centroid arrows to ``path`` (PNG, written atomically)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icml26_shared.io import atomic_write_bytes

    pts = pca_2d(groups)
    colours = {"follow_image": "tab:blue", "follow_text": "tab:red", "no_instruction": "tab:gray"}
    fig, ax = plt.subplots(figsize=(4.5, 4))
    for k, p in pts.items():
        ax.scatter(p[:, 0], p[:, 1], s=8, alpha=0.6, label=k, color=colours.get(k))
    if "no_instruction" in pts:
        c0 = pts["no_instruction"].mean(0)
        for k in ("follow_image", "follow_text"):
            if k in pts:
                c = pts[k].mean(0)
                ax.annotate("", xy=c, xytext=c0, arrowprops=dict(arrowstyle="->", color=colours[k], lw=2))
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
