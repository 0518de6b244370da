"""The in-process toy VLM [R] (design note 6.1 (A)): digits as 16 patch tokens of 2x2 pixels,
a text context from one of K sources, an optional instruction token, the two options, and an
answer position whose logits over the vocabulary give "A" or "B".

The toy answers by *naming* a digit at the answer position (a 10-way head, design note 6.1):
``letter`` maps the named digit to the option showing it (invalid when neither does); the
log-prob modes compare the two options' digit logits.

Its vision preference is set by construction: it is trained to follow the image for
round(P * K) of the K text sources and the text for the others, so on items stratified over the
sources its no-instruction vision ratio is P (up to how well it learned the mapping).

Two architectures (``ToyConfig.arch``) [R]. ``early`` (0.1-0.2.2): causal attention over the whole
prompt in every layer; it settles its source trust at the context tokens in layers 0-1. ``late``
(0.2.3): the first n-2 layers attend only within each segment (image slot + patches, context,
instruction, options + answer), layer n-2 gathers every position into each position by learned
*positional* weights (blind to content, so it cannot choose a source), and the last layer reads
with content queries against positional keys: which source the answer position reads is decided
there, by what its own residual stream holds after layer n-2 (a linear preference feature).
"""

from __future__ import annotations

import re
from dataclasses import asdict

import numpy as np
import torch
from torch import nn

from ..config import DIGITS, ToyConfig
from ..core import MC2Item, options

N_PATCH = 4  # 4 patches of 4x4 pixels [R] (16 of 2x2 cost 4x the compute on 2 shared cores)
SPECIAL = ("PAD", "IMG", "NOIMG", "CTX", "NOCTX", "INS_NONE", "INS_VIS", "INS_TXT", "Q", "A", "B",
           "ANS")


class Vocab:
    def __init__(self, n_sources: int):
        self.names = list(SPECIAL) + [f"D{d}" for d in range(10)] + [f"S{s}" for s in range(n_sources)]
        self.id = {n: i for i, n in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)


def patches(img8x8: np.ndarray) -> np.ndarray:
    """(8, 8) pixels in [0, 16] -> (4, 16) patch features in [0, 1] (row-major 4x4 patches)."""
    x = np.asarray(img8x8, np.float32).reshape(2, 4, 2, 4).transpose(0, 2, 1, 3).reshape(4, 16)
    return x / 16.0


_SOURCE = re.compile(r"\b(?:report|source)\s+(\d+)", re.I)


def parse_context(context: str) -> tuple[int, int]:
    """(source id, digit) named in a toy context such as "Report 3: the digit is seven."."""
    m = _SOURCE.search(context)
    words = [w for w in re.findall(r"[a-z]+", context.lower()) if w in DIGITS]
    if m is None or not words:
        raise ValueError(f"not a digits context: {context!r}")
    return int(m.group(1)), DIGITS.index(words[-1])


#: the prompt's segments (start, end): image slot + patches, context, instruction, options + ANS
SEGMENTS = ((0, 1 + N_PATCH), (1 + N_PATCH, 4 + N_PATCH), (4 + N_PATCH, 5 + N_PATCH), (5 + N_PATCH, 11 + N_PATCH))


def _segment_mask(T: int) -> torch.Tensor:
    """(T, T) bool: causal attention within each segment only (the late toy's early layers)."""
    seg = torch.zeros(T, dtype=torch.long)
    for i, (a, b) in enumerate(SEGMENTS):
        seg[a:b] = i
    return (seg[:, None] == seg[None, :]) & torch.ones(T, T, dtype=torch.bool).tril()


class Block(nn.Module):
    """A pre-LN transformer block written out (deterministic; hooks see its output). ``attend``:
    "causal" (whole prefix), "segment" (within the position's segment), "mean" (a causal
    mean of the values with learned per-position weights, blind to content: it gathers without
    choosing) or "decide" (queries from content against learned positional keys: a position
    chooses where to read by what its own residual stream holds)."""

    def __init__(self, d: int, heads: int, attend: str = "causal"):
        super().__init__()
        self.heads, self.attend = heads, attend
        if attend == "mean":  # per-head (query position, key position) logits; zeros = uniform mean
            self.gather = nn.Parameter(torch.zeros(heads, 16, 16))
        if attend == "decide":  # per-head positional keys (content-blind)
            self.keys = nn.Parameter(torch.randn(heads, 16, d // heads) * 0.02)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.attend == "causal":
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.attend == "segment":
            a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=_segment_mask(T))
        elif self.attend == "mean":  # weights from positions alone (learned), never from content
            w = self.gather[:, :T, :T].masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            a = torch.einsum("hts,bhsd->bhtd", w.softmax(-1), v)
        else:  # "decide": queries from content, keys from position alone: the position reads by what it holds
            k = self.keys[:, :T].unsqueeze(0).expand(B, -1, -1, -1)
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp(self.ln2(x))


class ToyVLM(nn.Module):
    """Pre-LN causal transformer over [image slot, 16 patches, context, instruction, options, ANS]."""

    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab = Vocab(cfg.n_sources)
        d = cfg.d_model
        self.seq_len = 1 + N_PATCH + 3 + 1 + 1 + 4 + 1
        self.tok = nn.Embedding(len(self.vocab), d)
        self.pos = nn.Parameter(torch.randn(self.seq_len, d) * 0.02)
        self.patch = nn.Linear(16, d)
        n = cfg.n_layers
        kinds = ["causal"] * n if cfg.arch == "early" else ["segment"] * (n - 2) + ["mean", "decide"]
        self.layers = nn.ModuleList(Block(d, cfg.n_heads, k) for k in kinds)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, len(self.vocab))

    def forward(self, ids: torch.Tensor, pix: torch.Tensor, hidden: bool = False):
        x = self.tok(ids) + self.pos
        x = x.clone()
        x[:, 1:1 + N_PATCH] = x[:, 1:1 + N_PATCH] + self.patch(pix)
        hs = []
        for layer in self.layers:
            x = layer(x)
            hs.append(x)
        logits = self.head(self.norm(x))
        return (logits, hs) if hidden else logits

    # --- encoding ---------------------------------------------------------------------------

    def encode(self, src: int, img, v: int, t: int, mode: str, order: int, follow: str | None):
        """Token ids (T,) and patch features (4, 16) of one prompt."""
        V = self.vocab.id
        use_img = mode != "base_text" and img is not None
        ids = [V["IMG"] if use_img else V["NOIMG"]] + [V["PAD"]] * N_PATCH
        if mode == "base_image":
            ids += [V["NOCTX"]] * 3
        else:
            ids += [V["CTX"], V[f"S{src}"], V[f"D{t}"]]
        ids.append({None: V["INS_NONE"], "vision": V["INS_VIS"], "text": V["INS_TXT"]}[
            follow if mode == "icc" else None])
        a, b = (v, t) if order == 0 else (t, v)
        ids += [V["Q"], V["A"], V[f"D{a}"], V["B"], V[f"D{b}"], V["ANS"]]
        pix = patches(img) if use_img else np.zeros((N_PATCH, 16), np.float32)
        return np.array(ids, np.int64), pix

    def encode_item(self, item: MC2Item, img, mode: str, order: int, follow: str | None = None):
        src, t = parse_context(item.context)
        if src >= self.cfg.n_sources:
            raise ValueError(f"item {item.id}: source {src} >= the toy's {self.cfg.n_sources}")
        v = DIGITS.index(item.answer_vision)
        if DIGITS.index(item.answer_text) != t:
            raise ValueError(f"item {item.id}: context does not support answer_text")
        opts = options(item, order)
        assert opts[0] in DIGITS and opts[1] in DIGITS
        return self.encode(src, img, v, t, mode, order, follow)

    def image_mask(self, ids: torch.Tensor) -> torch.Tensor:
        m = torch.zeros_like(ids, dtype=torch.bool)
        m[:, 1:1 + N_PATCH] = (ids[:, :1] == self.vocab.id["IMG"])
        return m

    def context_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """The text-context tokens (CTX, source, digit); none when the prompt has no context."""
        m = torch.zeros_like(ids, dtype=torch.bool)
        c = 1 + N_PATCH
        m[:, c:c + 3] = (ids[:, c:c + 1] == self.vocab.id["CTX"])
        return m


class _Adam:
    """AdamW written out (torch.optim's constructor imports torch._dynamo: a minute of CPU on a
    shared machine without bytecode caches, for a model this size) [R]."""

    def __init__(self, params, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.params, self.betas, self.eps, self.wd, self.t = params, betas, eps, weight_decay, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            p.mul_(1 - lr * self.wd)
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v / (1 - b2 ** self.t)).sqrt_().add_(self.eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** self.t))


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits as ((n, 8, 8) float32 in [0, 16], labels), read from the file
    sklearn ships without importing sklearn (half a minute on a loaded machine); falls back to
    ``icml26_shared.data.load_sklearn``."""
    import gzip
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    path = None if spec is None or not spec.submodule_search_locations else (
        Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz")
    if path is not None and path.is_file():
        with gzip.open(path, "rt") as f:
            data = np.loadtxt(f, delimiter=",", dtype=np.float32)
        X, y = data[:, :-1], data[:, -1].astype(np.int64)
    else:
        from icml26_shared.data import load_sklearn

        X, y = load_sklearn("digits")
    return np.asarray(X, np.float32).reshape(-1, 8, 8), np.asarray(y, np.int64)


def vision_sources(cfg: ToyConfig, seed: int) -> set[int]:
    """The round(P * K) sources whose contexts the toy learns to overrule by the image."""
    k = int(round(cfg.vision_preference * cfg.n_sources))
    perm = np.random.default_rng(seed + 7919).permutation(cfg.n_sources)
    return set(int(s) for s in perm[:k])


def train_toy(cfg: ToyConfig, images: np.ndarray, labels: np.ndarray, seed: int = 0,
              progress=None, init: ToyVLM | None = None, round_: int = 0) -> ToyVLM:
    """Train on the given (train-split) digits with the mix of config.mix; deterministic per seed.

    ``init``: continue training that toy (same config and vision sources) for ``cfg.steps`` more
    steps with a fresh optimizer and a new warm-up + cosine cycle (a warm restart [R]); ``round_``
    (1, 2, ...) varies the batches drawn in each such round."""
    torch.manual_seed(seed + 1009 * round_)
    rng = np.random.default_rng(seed + 1009 * round_)
    model = ToyVLM(cfg) if init is None else init.train()
    opt = _Adam(list(model.parameters()))
    vis = vision_sources(cfg, seed)
    modes = ("single", "base_image", "base_text", "icc")
    V = model.vocab.id
    for step in range(cfg.steps):
        ids, pix, tgt = [], [], []
        for _ in range(cfg.batch):
            j = int(rng.integers(len(images)))
            v = int(labels[j])
            t = int((v + rng.integers(1, 10)) % 10)
            src = int(rng.integers(cfg.n_sources))
            mode = modes[int(rng.choice(4, p=cfg.mix))]
            order = int(rng.integers(2))
            follow = ("vision", "text")[int(rng.integers(2))] if mode == "icc" else None
            target = {"single": "vision" if src in vis else "text", "base_image": "vision",
                      "base_text": "text", "icc": follow}[mode]
            a, p = model.encode(src, images[j], v, t, mode, order, follow)
            ids.append(a)
            pix.append(p)
            tgt.append(V[f"D{v if target == 'vision' else t}"])
        logits = model(torch.from_numpy(np.stack(ids)), torch.from_numpy(np.stack(pix)))
        loss = nn.functional.cross_entropy(logits[:, -1], torch.tensor(tgt))
        opt.zero_grad()
        loss.backward()
        warm = max(1, cfg.steps // 10)  # linear warm-up, then cosine decay (one-cycle shape) [R]
        frac = (step + 1) / warm if step < warm else 0.5 * (1 + np.cos(np.pi * (step - warm) / max(1, cfg.steps - warm)))
        opt.step(cfg.lr * float(frac))
        if progress is not None:
            progress(step, float(loss.detach()))
    model.eval()
    model.vision_sources = vis  # type: ignore[attr-defined]
    return model


def save_toy(model: ToyVLM, path) -> None:
    """A folder with toy.pt (state dict + config); written to a temp name, then renamed
    (``icml26_shared.io.atomic_dir``; an existing ``path`` is refused)."""
    from icml26_shared.io import atomic_dir

    with atomic_dir(path, exists_error="{path} already exists (choose another path; nothing was "
                                       "overwritten)") as tmp:
        torch.save({"config": asdict(model.cfg), "state": model.state_dict(),
                    "vision_sources": sorted(getattr(model, "vision_sources", []))}, tmp / "toy.pt")


def load_toy(path) -> ToyVLM:
    from pathlib import Path

    blob = torch.load(Path(path) / "toy.pt", weights_only=False)
    cfg = dict(blob["config"])
    cfg["mix"] = tuple(cfg["mix"])
    model = ToyVLM(ToyConfig(**cfg))
    model.load_state_dict(blob["state"])
    model.vision_sources = set(blob["vision_sources"])  # type: ignore[attr-defined]
    return model.eval()
