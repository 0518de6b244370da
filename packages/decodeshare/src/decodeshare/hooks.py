"""Phase-aware hooks on any Hugging Face decoder (Llama, Qwen2, Mistral, Gemma, ...).

Under KV caching every decode step is a forward pass with sequence length 1; the prefill is the
one pass over the prompt. A hook on a decoder layer tells the two apart by the length of the
layer's output (paper §3: "applied only when seq_len == 1"), so it works inside
``model.generate``. Layer outputs may be tensors (transformers >= 5) or tuples (older versions).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from icml26_shared import UserError

MODES = ("remove", "add", "patch")
PHASES = ("decode", "prefill")


def find_decoder_layers(model) -> torch.nn.ModuleList:
    """The list of decoder blocks of a causal LM (``model.model.layers`` and the usual variants)."""
    for path in ("model.layers", "model.model.layers", "transformer.h", "model.decoder.layers",
                 "gpt_neox.layers", "model.language_model.layers"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, torch.nn.ModuleList) and len(obj):
            return obj
    raise UserError(f"cannot find the decoder layers of {type(model).__name__}")


def get_layer(model, layer: int) -> torch.nn.Module:
    layers = find_decoder_layers(model)
    if not 0 <= layer < len(layers):
        raise UserError(f"layer {layer} is out of range: the model has {len(layers)} decoder layers "
                        f"(0..{len(layers) - 1})")
    return layers[layer]


def hidden_size(model) -> int:
    """The decoder's width: ``config.hidden_size``, read through ``text_config`` on multimodal
    wrappers (Llava, Gemma-3, Qwen2-VL, ...) whose top-level config has none."""
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    width = getattr(text, "hidden_size", None) or getattr(cfg, "hidden_size", None)
    if width is None:
        raise UserError(f"cannot read the hidden size of {type(model).__name__} (no hidden_size in its "
                        "config or text_config)")
    return int(width)


def eos_ids(model, tokenizer) -> list[int]:
    """Every token that ends a generation: ``generation_config.eos_token_id`` (an int or a list, as
    Llama-3 chat models ship: <|end_of_text|> and <|eot_id|>), else the tokenizer's EOS."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def _split(output):
    return (output[0], output[1:]) if isinstance(output, tuple) else (output, None)


def _join(h, rest):
    return h if rest is None else (h, *rest)


def _as_tensor(x, like: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(x)
    return t.to(device=like.device, dtype=like.dtype)


class PhaseIntervention:
    """Context manager that edits one layer's output during one phase only.

    ``mode="remove"``: h <- h - alpha Q Q^T h (``basis`` = Q [d, k], orthonormal columns; or a
    stack [K, d, k] of K bases, zero-padded, alpha folded in: row r * K + j of the batch uses
    basis j, so one batch runs K conditions);
    ``mode="add"``:    h <- h + alpha v (``basis`` = v [d], or [b, d]: row r of the batch gets v[r]);
    ``mode="patch"``:  h <- h - alpha Q Q^T h + donor[s], with ``donor[s]`` [b, d] the component
    recorded at decode pass s of a clean run (``record=True``); patched only at the passes in
    ``window`` (None = every pass; ``(0,)`` = step 0), removed at every pass.
    ``record=True`` stores ``Q Q^T h`` of each decode pass in ``.recorded`` without editing.

    ``.calls`` counts the passes it modified per phase, ``.seen`` the passes it saw.
    """

    phase = "decode"

    def __init__(self, model, layer: int, basis, alpha: float = 1.0, mode: str = "remove", *,
                 window: Sequence[int] | None = None, donor: Sequence | None = None,
                 record: bool = False, phase: str | None = None):
        if mode not in MODES:
            raise UserError(f"unknown mode {mode!r} (choose one of {', '.join(MODES)})")
        self.phase = phase or self.phase
        if self.phase not in PHASES:
            raise UserError(f"unknown phase {self.phase!r} (choose decode or prefill)")
        self.module = get_layer(model, layer)
        self.basis = torch.as_tensor(basis)
        width = hidden_size(model) if hasattr(model, "config") else self.basis.shape[0]
        if mode == "add" and self.basis.dim() not in (1, 2):
            raise UserError("mode 'add' needs a vector [d] (or one per batch row, [b, d])")
        if mode != "add" and self.basis.dim() not in (2, 3):
            raise UserError(f"mode {mode!r} needs a basis [d, k] (or a stack [K, d, k])")
        have = self.basis.shape[-1] if mode == "add" else self.basis.shape[-2]
        if have != width:
            raise UserError(f"the basis has width {have} but the model's hidden size is {width}")
        if mode == "patch" and donor is None:
            raise UserError("mode 'patch' needs the donor recorded from a clean run")
        self.alpha, self.mode, self.window, self.donor, self.record = float(alpha), mode, window, donor, record
        self.calls = {"prefill": 0, "decode": 0}
        self.seen = {"prefill": 0, "decode": 0}
        self.recorded: list[torch.Tensor] = []
        self._step = 0
        self._handle = None

    def _project(self, h: torch.Tensor) -> torch.Tensor:
        Q = _as_tensor(self.basis, h)
        if Q.dim() == 3:  # [K, d, k] one basis per condition; row r * K + j of the batch uses Q[j]
            K = Q.shape[0]
            x = h.reshape(-1, K, *h.shape[1:])
            z = torch.einsum("bksd,kdq->bksq", x, Q)
            return torch.einsum("bksq,keq->bkse", z, Q).reshape(h.shape)
        return (h @ Q) @ Q.T

    def _hook(self, module, args, output):
        h, rest = _split(output)
        phase = "decode" if h.shape[1] == 1 else "prefill"
        self.seen[phase] += 1
        if phase != self.phase:
            return None
        step = self._step
        self._step += 1
        if self.record:
            self.recorded.append(self._project(h).detach().clone())
            return None
        if self.window is not None and self.mode != "patch" and step not in self.window:
            return None
        if self.mode == "add":  # [d] to every row, or [b, d] one vector per row (every position)
            v = _as_tensor(self.basis, h)
            h = h + self.alpha * (v if v.dim() == 1 else v[:, None, :])
        else:
            h = h - self.alpha * self._project(h)
            if self.mode == "patch" and (self.window is None or step in self.window):
                h = h + _as_tensor(self.donor[step], h)
        self.calls[phase] += 1
        return _join(h, rest)

    def __enter__(self):
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        self._handle = None
        return False


class DecodeOnlyIntervention(PhaseIntervention):
    """:class:`PhaseIntervention` on decode passes only; prefill passes are never modified."""

    phase = "decode"

    def __init__(self, model, layer: int, basis, alpha: float = 1.0, mode: str = "remove", **kw):
        super().__init__(model, layer, basis, alpha, mode, phase="decode", **kw)


class StateRecorder:
    """Records the output of several layers: at each decode pass the current token's state, at the
    prefill pass the last prompt token's state. ``decode[layer]`` is a list over passes of [b, d]."""

    def __init__(self, model, layers: Sequence[int]):
        self.modules = {int(li): get_layer(model, li) for li in layers}
        self.decode: dict[int, list[torch.Tensor]] = {li: [] for li in self.modules}
        self.prefill: dict[int, list[torch.Tensor]] = {li: [] for li in self.modules}
        self._handles: list = []

    def _make(self, li: int):
        def hook(module, args, output):
            h, _ = _split(output)
            target = self.decode if h.shape[1] == 1 else self.prefill
            target[li].append(h[:, -1].detach().float().cpu())
        return hook

    def __enter__(self):
        self._handles = [m.register_forward_hook(self._make(li)) for li, m in self.modules.items()]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False


def encode_left(tok, texts: Sequence[str], device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)`` of chat-formatted prompt texts."""
    ids = [tok(t, add_special_tokens=False).input_ids for t in texts]
    width = max(len(x) for x in ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    inp = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        inp[i, width - len(x):] = torch.tensor(x)
        mask[i, width - len(x):] = 1
    return inp.to(device), mask.to(device)


@torch.no_grad()
def collect_decode_states(model, tokenizer, prompts_by_task: dict[str, list[str]], layer,
                          max_new_tokens: int, phase: str = "decode", batch_size: int = 24,
                          policy: str = "greedy") -> dict:
    """Greedy KV-cached decoding of each task's prompts (already chat-formatted texts), recording
    the layer output of every decode pass (``phase="decode"``; passes after a row's EOS are
    dropped) or of the prefill's last prompt token (``phase="prefill"``).

    ``layer`` an int: returns ``{task: [n, d] tensor}``; a list of ints: ``{layer: {task: ...}}``;
    with ``phase="both"`` returns ``{"decode": ..., "prefill": ...}`` from the same passes."""
    if policy != "greedy":
        raise UserError("only greedy decoding is supported")
    if phase not in (*PHASES, "both"):
        raise UserError(f"unknown phase {phase!r} (choose decode or prefill)")
    if max_new_tokens < 2 and phase in ("decode", "both"):
        raise UserError("decode states need --max-new-tokens >= 2 (N new tokens give N - 1 decode passes)")
    layers = [layer] if isinstance(layer, int) else list(layer)
    for li in layers:
        get_layer(model, li)
    dev = next(model.parameters()).device
    eos = eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
    width = hidden_size(model)
    out = {"decode": {li: {} for li in layers}, "prefill": {li: {} for li in layers}}
    for task, prompts in prompts_by_task.items():
        dec = {li: [] for li in layers}
        pre = {li: [] for li in layers}
        for s in range(0, len(prompts), batch_size):
            ids, mask = encode_left(tokenizer, prompts[s:s + batch_size], dev)
            with StateRecorder(model, layers) as rec:
                gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                     min_new_tokens=1, do_sample=False, pad_token_id=pad,
                                     eos_token_id=eos or None)
            new = gen[:, ids.shape[1]:].cpu()
            done = torch.cumsum(torch.isin(new, torch.tensor(eos, dtype=new.dtype)), 1) > 0
            for li in layers:
                pre[li].append(rec.prefill[li][0])
                for step, h in enumerate(rec.decode[li]):  # pass `step` reads token new[:, step]
                    dec[li].append(h[~done[:, step]])
        for li in layers:
            out["decode"][li][task] = torch.cat(dec[li]) if dec[li] else torch.zeros(0, width)
            out["prefill"][li][task] = torch.cat(pre[li])
    if phase != "both":
        out = out[phase]
        return out[layers[0]] if isinstance(layer, int) else out
    if isinstance(layer, int):
        return {ph: out[ph][layer] for ph in out}
    return out
