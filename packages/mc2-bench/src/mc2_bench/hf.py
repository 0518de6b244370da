"""``HFVisionChatAdapter``: any local Hugging Face VLM folder (AutoProcessor +
AutoModelForImageTextToText) behind the adapter interface of ``adapters.py``.

The prompt is the authors' text [C] in one user turn, the image first, rendered by the
processor's own chat template; the processor expands the image placeholder, and the adapter reads
the image-token mask back from the expanded ids (``processor.image_token_id``), so steering hooks
know which positions hold image tokens whatever the family (LLaVA repeats one token per patch,
Idefics3 / SmolVLM wrap them in ``<fake_token_around_image>``, Qwen2-VL in vision_start/end).

Answer modes: ``letter`` generates greedily and parses A/B [C]; ``letter-logprob`` compares the
next-token log-probabilities of "A" and "B" at the last prompt position [R]; ``option-logprob``
scores each option's text as the answer (sum of its tokens' log-probabilities, prompt cached) [R].
Batches are left-padded with explicit position ids, so a batched answer equals the one-item one.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .adapters import pool_states
from .config import ANSWER_MODES
from .core import MC2Item, options, parse_letter, prompt_text, uses_image


def _find(row: list[int], sub: list[int]) -> tuple[int, int] | None:
    """(start, end) of the last occurrence of ``sub`` in ``row``, or None."""
    n = len(sub)
    for i in range(len(row) - n, -1, -1):
        if row[i:i + n] == sub:
            return i, i + n
    return None


def _load_rgb(path: str):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def _decoder_layers(model) -> torch.nn.ModuleList:
    """The language model's decoder layers (the residual stream hooks act on)."""
    inner = getattr(model, "model", model)
    for attr in ("language_model", "text_model"):
        lm = getattr(inner, attr, None)
        if lm is not None and isinstance(getattr(lm, "layers", None), torch.nn.ModuleList):
            return lm.layers
    best = torch.nn.ModuleList()
    for name, mod in model.named_modules():
        if name.endswith("layers") and isinstance(mod, torch.nn.ModuleList) and "vision" not in name:
            best = max(best, mod, key=len)
    if not len(best):
        raise ValueError("could not find the language model's decoder layers")
    return best


class _Skip(torch.nn.Module):
    """Stands in for a decoder layer below a replayed one: passes its input on, computes nothing."""

    def __init__(self, as_tuple: bool):
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states, *args, **kwargs):
        return (hidden_states,) if self.as_tuple else hidden_states


class _Replay(torch.nn.Module):
    """Stands in for a decoder layer: returns the output it gave on these exact inputs."""

    def __init__(self, output):
        super().__init__()
        self.output = output

    def forward(self, *args, **kwargs):
        return self.output


class HFVisionChatAdapter:
    kind = "hf"

    def __init__(self, model, processor, device: str | None = None, batch: int = 8,
                 max_new_tokens: int = 8, image_loader: Callable[[str], object] | None = None):
        self.model = model.eval()
        self.processor = processor
        self.tok = getattr(processor, "tokenizer", processor)
        self.tok.padding_side = "left"
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.device = device or str(next(model.parameters()).device)
        self.batch = batch
        self.max_new_tokens = max_new_tokens
        self.image_loader = image_loader or _load_rgb
        self.position_info: dict = {}
        self._layer_list = _decoder_layers(model)
        self._layers = list(self._layer_list)
        self.n_layers = len(self._layers)
        self._prefix_layer: int | None = None
        self._prefix: dict = {}
        self.image_token_id = self._image_token_id()
        self.letter_ids = [self._letter_ids("A"), self._letter_ids("B")]
        self._family = type(processor).__name__
        # Qwen2-VL / Qwen2.5-VL compute their 3-D M-RoPE positions from the image grid themselves:
        # they get no position_ids from here (the 1-D ones below are for the other families)
        inner = getattr(model, "model", model)
        self._mrope = hasattr(inner, "get_rope_index")
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @classmethod
    def from_pretrained(cls, path, device: str | None = None, dtype=None, **kw) -> HFVisionChatAdapter:
        """Load a local folder through the core's loader (``icml26_shared.hf.load_pretrained``,
        kind ``vlm``: the folder is checked first, nothing is downloaded, every failure is one
        ``UserError`` line). ``device`` ("cuda", "cuda:1", "cpu"; default auto): the weights load
        straight onto it; ``dtype`` (float32, bfloat16, float16; default auto: float32 on CPU,
        bfloat16 on a GPU that has it)."""
        from icml26_shared.hf import load_pretrained

        model, proc = load_pretrained(Path(path), "vlm", dtype=dtype or "auto", device=device or "auto")
        return cls(model, proc, device=device, **kw)

    def _image_token_id(self) -> int | None:
        tid = getattr(self.processor, "image_token_id", None)
        if tid is None:
            tok = getattr(self.processor, "image_token", None)
            tid = self.tok.convert_tokens_to_ids(tok) if tok else None
        if tid is None:
            tid = getattr(self.model.config, "image_token_id", getattr(self.model.config, "image_token_index", None))
        return None if tid is None else int(tid)

    def _letter_ids(self, letter: str) -> list[int]:
        """Every single-token spelling of an answer letter a chat template can lead to: the bare
        letter ("A", after "<|assistant|>\\n") and the spaced one (" A", after SmolVLM's
        "Assistant:"); ``letter-logprob`` scores their log-sum-exp."""
        ids = []
        for text in (letter, " " + letter):
            enc = self.tok.encode(text, add_special_tokens=False)
            if len(enc) == 1 and self.tok.decode(enc).strip() == letter and enc[0] not in ids:
                ids.append(int(enc[0]))
        if not ids:
            ids.append(self._first_id(letter))
        return ids

    def _first_id(self, text: str) -> int:
        ids = self.tok.encode(text, add_special_tokens=False)
        if not ids:
            raise ValueError(f"the tokenizer maps {text!r} to no token")
        return int(ids[0])

    def layer_modules(self):
        return self._layers

    # --- prompts --------------------------------------------------------------------------------

    def chat_prompt(self, item: MC2Item, mode: str, order: int, follow: str | None = None) -> str:
        """The exact string given to the processor: the chat template over one user turn."""
        content = ([{"type": "image"}] if uses_image(mode) else []) + [
            {"type": "text", "text": prompt_text(item, mode, order, follow)}]
        msgs = [{"role": "user", "content": content}]
        return self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)

    def _encode(self, items, mode, order, follow):
        texts = [self.chat_prompt(it, mode, order, follow) for it in items]
        kw = {}
        if uses_image(mode):
            imgs = [self.image_loader(it.image) for it in items]
            kw["images"] = [[im] for im in imgs] if "Idefics" in self._family or "SmolVLM" in self._family else imgs
        enc = self.processor(text=texts, padding=True, return_tensors="pt", **kw)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        am = enc["attention_mask"]
        enc["position_ids"] = (am.long().cumsum(-1) - 1).clamp_min(0)
        self._context = self.context_mask(enc["input_ids"].cpu(), items, mode)
        return enc, texts

    def context_mask(self, ids: torch.Tensor, items, mode: str) -> torch.Tensor:
        """(B, T) bool: the tokens of each item's text context inside its tokenized prompt (found
        as a token subsequence; the context's first / last token may merge with its neighbours, so
        a span trimmed by one token at either end is accepted). A row stays all False when the
        mode shows no context (base_image) or the context is not found (the hook then touches
        nothing there: its ``touched`` count shows it; ``hidden(at="context")`` refuses)."""
        m = torch.zeros_like(ids, dtype=torch.bool)
        if mode == "base_image":
            return m
        for b, it in enumerate(items):
            row = ids[b].tolist()
            span = None
            for text in (" " + it.context, it.context):
                sub = self.tok.encode(text, add_special_tokens=False)
                for lo, hi in ((0, len(sub)), (0, len(sub) - 1), (1, len(sub)), (1, len(sub) - 1)):
                    span = _find(row, sub[lo:hi]) if hi - lo >= 1 else None
                    if span is not None:
                        break
                if span is not None:
                    break
            if span is not None:
                m[b, span[0]:span[1]] = True
        return m

    def _set_info(self, enc) -> None:
        ids = enc["input_ids"]
        mask = (ids == self.image_token_id) if self.image_token_id is not None else torch.zeros_like(ids, dtype=torch.bool)
        ctx = getattr(self, "_context", None)
        self.position_info = {"image_mask": mask.cpu(), "prompt_len": ids.shape[1], "offset": 0,
                              "attention_mask": enc["attention_mask"].bool().cpu(),
                              "context_mask": ctx if ctx is not None and ctx.shape == ids.shape else None}

    def _inputs(self, enc) -> dict:
        """What the model is called with: ``enc`` less the 1-D position ids on M-RoPE models."""
        return {k: v for k, v in enc.items() if not (self._mrope and k == "position_ids")}

    def _run(self, enc, **kw):
        self._set_info(enc)
        try:
            if self._prefix_layer is None or kw.get("use_cache"):
                return self.model(**self._inputs(enc), **kw)
            return self._run_prefixed(enc, **kw)
        finally:
            self.position_info = {}

    def cache_prefix_at(self, layer: int | None) -> None:
        """Exact reuse of unsteered layers [R]: with ``layer`` set, every answer pass without KV
        cache remembers decoder layer ``layer``'s output, keyed by the exact encoded inputs; a later
        pass on the same inputs whose hooks all sit above ``layer`` (a steering sweep) replays it
        and skips layers 0..``layer`` (bit-identical: those layers saw the same inputs, unhooked).
        ``None`` turns it off and forgets what was kept."""
        self._prefix_layer = None if layer is None or layer < 0 else int(layer)
        self._prefix = {}

    def _run_prefixed(self, enc, **kw):
        import hashlib

        L = self._prefix_layer
        hooked = [i for i, m in enumerate(self._layers) if m._forward_hooks or m._forward_pre_hooks]
        if hooked and min(hooked) <= L:
            return self.model(**self._inputs(enc), **kw)
        kw = {**kw, "use_cache": False}  # no KV cache is read from these passes
        h = hashlib.sha1()
        for k in sorted(enc):
            h.update(k.encode() + enc[k].detach().cpu().contiguous().numpy().tobytes())
        key = h.hexdigest()
        if key in self._prefix:
            out = self._prefix[key]
            stubs = [_Skip(isinstance(out, tuple)) for _ in range(L)] + [_Replay(out)]
            try:
                for i, st in enumerate(stubs):
                    self._layer_list[i] = st
                return self.model(**self._inputs(enc), **kw)
            finally:
                for i in range(L + 1):
                    self._layer_list[i] = self._layers[i]
        store = {}
        grab = self._layers[L].register_forward_hook(lambda m, a, o: store.setdefault("out", o))
        try:
            res = self.model(**self._inputs(enc), **kw)
        finally:
            grab.remove()
        self._prefix[key] = store["out"]
        return res

    # --- answers --------------------------------------------------------------------------------

    @torch.no_grad()
    def answer(self, items: Sequence[MC2Item], mode: str, order: int, answer_mode: str = "letter",
               follow: str | None = None) -> list[dict]:
        if answer_mode not in ANSWER_MODES:
            raise ValueError(f"unknown answer mode {answer_mode!r}")
        out: list[dict] = []
        items = list(items)
        for i in range(0, len(items), self.batch):
            chunk = items[i:i + self.batch]
            enc, texts = self._encode(chunk, mode, order, follow)
            fn = {"letter": self._letter, "letter-logprob": self._letter_logprob,
                  "option-logprob": self._option_logprob}[answer_mode]
            for rec, text in zip(fn(enc, chunk, order), texts):
                rec["prompt"] = text
                out.append(rec)
        return out

    def _letter(self, enc, chunk, order):
        self._set_info(enc)
        prompt_len = enc["input_ids"].shape[1]
        gen_kw = {k: v for k, v in enc.items() if k != "position_ids"}
        hook = self.model.register_forward_pre_hook(self._offset_hook, with_kwargs=True)
        try:
            seq = self.model.generate(**gen_kw, max_new_tokens=self.max_new_tokens, do_sample=False,
                                      pad_token_id=self.tok.pad_token_id)
        finally:
            hook.remove()
            self.position_info = {}
        texts = self.tok.batch_decode(seq[:, prompt_len:], skip_special_tokens=True)
        return [{"letter": parse_letter(t), "text": t} for t in texts]

    def _offset_hook(self, module, args, kwargs):
        """During cached decoding, tell the steering hook how many positions came before."""
        if self.position_info:
            self.position_info["offset"] = self._past(kwargs)
        return None

    @staticmethod
    def _past(kwargs) -> int:
        pkv = kwargs.get("cache", kwargs.get("past_key_values"))
        return int(pkv.get_seq_length()) if pkv is not None and hasattr(pkv, "get_seq_length") else 0

    def _letter_logprob(self, enc, chunk, order):
        logits = self._run(enc, logits_to_keep=1).logits[:, -1].float()
        full = torch.log_softmax(logits, -1)
        lp = torch.stack([full[:, ids].logsumexp(-1) for ids in self.letter_ids], 1)
        return [{"letter": "A" if float(a) >= float(b) else "B",
                 "text": f"logprob A={float(a):.4f} B={float(b):.4f}",
                 "scores": [float(a), float(b)]} for a, b in lp]

    def _option_logprob(self, enc, chunk, order):
        opts = [[self.tok.encode(options(it, order)[k], add_special_tokens=False) for it in chunk]
                for k in (0, 1)]
        multi = any(len(o) > 1 for ids in opts for o in ids)  # a KV cache only when continued
        out = self._run(enc, logits_to_keep=1, use_cache=multi)
        first = torch.log_softmax(out.logits[:, -1].float(), -1)
        B = enc["input_ids"].shape[0]
        scores = np.zeros((B, 2))
        for k in (0, 1):
            opt_ids = opts[k]
            L = max(len(o) for o in opt_ids)
            ids = torch.full((B, L), self.tok.pad_token_id, dtype=torch.long)
            valid = torch.zeros(B, L, dtype=torch.bool)
            for b, o in enumerate(opt_ids):
                ids[b, :len(o)] = torch.tensor(o)
                valid[b, :len(o)] = True
            ids, valid = ids.to(self.device), valid.to(self.device)
            total = first.gather(1, ids[:, :1]).squeeze(1)
            if L > 1:
                am = torch.cat([enc["attention_mask"], valid.long()], 1)
                pos = enc["position_ids"][:, -1:] + torch.arange(1, L, device=ids.device)
                if self._mrope:  # text after the prompt: 1-D position + the prompt's M-RoPE delta
                    deltas = getattr(self.model, "model", self.model).rope_deltas
                    pos = (pos + deltas.to(pos.device)).unsqueeze(0).expand(3, -1, -1)
                self.position_info = {"image_mask": None, "prompt_len": enc["input_ids"].shape[1],
                                      "offset": enc["input_ids"].shape[1]}
                try:
                    nxt = self.model(input_ids=ids[:, :-1], attention_mask=am[:, :-1],
                                     position_ids=pos, use_cache=True,
                                     **{self._cache_kw: copy.deepcopy(out.past_key_values)}).logits.float()
                finally:
                    self.position_info = {}
                lp = torch.log_softmax(nxt, -1).gather(2, ids[:, 1:, None]).squeeze(2)
                total = total + (lp * valid[:, 1:]).sum(1)
            scores[:, k] = total.cpu().numpy()
        return [{"letter": "A" if s[0] >= s[1] else "B",
                 "text": f"logprob {options(it, order)[0]}={s[0]:.4f} {options(it, order)[1]}={s[1]:.4f}",
                 "scores": [float(s[0]), float(s[1])]} for it, s in zip(chunk, scores)]

    # --- hidden states --------------------------------------------------------------------------

    @torch.no_grad()
    def hidden(self, items, mode, order, follow=None, at: str | tuple[str, ...] = "last"):
        """(n, n_layers, d): each decoder layer's output at the last prompt position, or averaged
        over the positions a hook with ``positions=at`` touches (``adapters.pool_states``). A tuple
        ``at`` returns one such array per entry from a single forward pass."""
        ats = (at,) if isinstance(at, str) else tuple(at)
        out = {a: [] for a in ats}
        items = list(items)
        for i in range(0, len(items), self.batch):
            enc, _ = self._encode(items[i:i + self.batch], mode, order, follow)
            grabbed: dict[tuple[str, int], torch.Tensor] = {}

            def grab(idx, store=grabbed):
                def fn(module, args, output):
                    h = (output[0] if isinstance(output, tuple) else output).float().cpu()
                    for a in ats:
                        store[a, idx] = pool_states(h, self.position_info, a)
                return fn
            hs = [m.register_forward_hook(grab(j)) for j, m in enumerate(self._layers)]
            try:
                self._run(enc, logits_to_keep=1)
            finally:
                for h in hs:
                    h.remove()
            for a in ats:
                out[a].append(torch.stack([grabbed[a, j] for j in range(self.n_layers)], 1))
        res = tuple(torch.cat(out[a]).numpy() for a in ats)
        return res[0] if isinstance(at, str) else res

    def logit_lens(self, states: np.ndarray, token_ids: Sequence[int]) -> np.ndarray:
        """Final norm + LM head applied to (n, n_layers, d) states -> (n, n_layers, len(token_ids))
        logits of the given tokens (the logit lens used to choose steering layers [C] rebuttal)."""
        inner = getattr(self.model, "model", self.model)
        lm = getattr(inner, "language_model", None) or getattr(inner, "text_model", None)
        head = self.model.get_output_embeddings()
        with torch.no_grad():
            h = torch.as_tensor(states, dtype=head.weight.dtype, device=head.weight.device)
            logits = head(lm.norm(h))[..., list(token_ids)]
        return logits.float().cpu().numpy()
