"""Digits conflict sets in the MC2 format (offline: the toys' and smol-vlm's items)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from icml26_shared.io import atomic_dir, dumps_json

from ..core import MC2Item
from ..io import EXISTS, refuse_existing
from .toy import DIGITS


def digits_items(images: np.ndarray, labels: np.ndarray, indices: Sequence[int], seed: int,
                 n_sources: int = 10, prefix: str = "d") -> list[tuple[MC2Item, np.ndarray]]:
    """Conflicts on the given digits: the image shows ``answer_vision``, a context from source k
    ("Report k: ...") asserts a different digit. Sources cycle so every source gets an equal share
    (items stratified over sources). Returns (item, 8x8 image) pairs; ``item.image`` is a file name."""
    rng = np.random.default_rng(seed)
    out = []
    for n, j in enumerate(indices):
        v = int(labels[j])
        t = int((v + rng.integers(1, 10)) % 10)
        src = n % n_sources
        it = MC2Item(f"{prefix}{j}", "digit_recognition", "Which digit is shown?", DIGITS[v],
                     DIGITS[t], f"Report {src}: the handwritten digit in the picture is {DIGITS[t]}.",
                     f"{prefix}{j}.png")
        out.append((it, np.asarray(images[j], np.float32)))
    return out


def write_digits_items(pairs, out_dir) -> Path:
    """``out_dir/items.json`` in the MC2 format with the PNGs beside it (folder written under a
    temporary name, then renamed; an existing ``out_dir`` is refused)."""
    from PIL import Image

    out_dir = Path(out_dir)
    refuse_existing(out_dir)
    with atomic_dir(out_dir, exists_error=EXISTS) as tmp:
        recs = []
        for it, img in pairs:
            Image.fromarray(np.clip(img / 16.0 * 255.0, 0, 255).astype(np.uint8)).save(tmp / it.image)
            recs.append({"id": it.id, "image_id": Path(it.image).stem, "task": it.task,
                         "question": it.question, "answer_vision": it.answer_vision,
                         "answer_text": it.answer_text, "context": it.context})
        (tmp / "items.json").write_text(dumps_json(recs, indent=1))
    return out_dir / "items.json"
