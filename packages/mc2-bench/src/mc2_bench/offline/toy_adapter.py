"""``ToyAdapter``: the in-process toy VLM behind the adapter interface (offline only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..adapters import pool_states
from ..config import ANSWER_MODES
from ..core import MC2Item, options, prompt_text, uses_image
from .toy import DIGITS, ToyVLM


def _load_png(path: str) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        x = np.asarray(im.convert("L"), np.float32)
    if x.shape != (8, 8):
        x = np.asarray(Image.fromarray(x.astype(np.uint8)).resize((8, 8)), np.float32)
    return x / 255.0 * 16.0


class ToyAdapter:
    """The in-process toy VLM behind the adapter interface. It names a digit; ``letter`` maps the
    name to the option showing it (invalid when neither does); ``letter-logprob`` and
    ``option-logprob`` both compare the two options' digit logits (the toy has no letter tokens)."""

    kind = "toy"

    def __init__(self, model: ToyVLM, image_loader: Callable[[str], np.ndarray] | None = None,
                 batch: int = 256):
        self.model = model.eval()
        self.image_loader = image_loader or _load_png
        self.batch = batch
        self.position_info: dict = {}
        self.n_layers = len(model.layers)

    def layer_modules(self):
        return list(self.model.layers)

    def _encode(self, items, mode, order, follow):
        ids, pix = [], []
        for it in items:
            img = self.image_loader(it.image) if uses_image(mode) else None
            a, p = self.model.encode_item(it, img, mode, order, follow)
            ids.append(a)
            pix.append(p)
        return torch.from_numpy(np.stack(ids)), torch.from_numpy(np.stack(pix))

    @torch.no_grad()
    def _forward(self, items, mode, order, follow, hidden=False, at="last"):
        outs, hs = [], []
        for i in range(0, len(items), self.batch):
            ids, pix = self._encode(items[i:i + self.batch], mode, order, follow)
            self.position_info = {"image_mask": self.model.image_mask(ids), "prompt_len": ids.shape[1],
                                  "context_mask": self.model.context_mask(ids)}
            out = self.model(ids, pix, hidden=hidden)
            if hidden:
                outs.append(out[0][:, -1])
                hs.append(torch.stack([pool_states(h, self.position_info, at) for h in out[1]], 1))
            else:
                outs.append(out[:, -1])
        self.position_info = {}
        logits = torch.cat(outs) if outs else torch.zeros(0, len(self.model.vocab))
        return (logits, torch.cat(hs)) if hidden else logits

    def answer(self, items: Sequence[MC2Item], mode: str, order: int, answer_mode: str = "letter",
               follow: str | None = None) -> list[dict]:
        if answer_mode not in ANSWER_MODES:
            raise ValueError(f"unknown answer mode {answer_mode!r}")
        logits = self._forward(list(items), mode, order, follow)
        V = self.model.vocab.id
        digit_logits = logits[:, [V[f"D{d}"] for d in range(10)]]
        res = []
        for it, lg, dl in zip(items, logits, digit_logits):
            a, b = options(it, order)
            ia, ib = DIGITS.index(a), DIGITS.index(b)
            if answer_mode == "letter":
                name = self.model.vocab.names[int(lg.argmax())]
                text = DIGITS[int(name[1:])] if name.startswith("D") else name
                letter = "A" if text == a else "B" if text == b else None
            else:
                text = f"logit {a}={float(dl[ia]):.4f} {b}={float(dl[ib]):.4f}"
                letter = "A" if dl[ia] >= dl[ib] else "B"
            res.append({"letter": letter, "text": text,
                        "prompt": prompt_text(it, mode, order, follow)})
        return res

    def hidden(self, items, mode, order, follow=None, at: str = "last") -> np.ndarray:
        _, hs = self._forward(list(items), mode, order, follow, hidden=True, at=at)
        return hs.numpy()
