"""Hugging Face integration: ``patch(model, method=..., density=...)`` makes a causal LM of the
Llama / Qwen / Mistral families use sparse attention for prefill; ``unpatch(model)`` undoes it.

The patch registers an attention function named ``"unisparse"`` with transformers'
``AttentionInterface`` (and the SDPA mask builder under the same name) and switches the model's
``config._attn_implementation`` to it. Each attention module carries its ``SparseConfig``.
A call goes sparse only for a causal prefill with no padding (``attention_mask`` is ``None``, as
SDPA's mask builder leaves it for unpadded causal batches), at least ``min_seq_len`` queries and
at least as many keys as queries and no sliding window narrower than the keys; everything else — decoding with the KV cache (one query),
padded batches, short prompts — runs the model's dense SDPA path unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icml26_shared import UserError

from .config import SparseConfig

#: on a CPU, prompts shorter than this stay dense by default (``patch(min_seq_len=None)``): the
#: measured prefill break-even of SmolLM2-135M at density 0.25, fp32, one thread (about 930
#: tokens, rounded up to the first measured length where sparse cost no more CPU time than
#: dense; docs/experiments.md, ``python -m unisparse.prefill_bench``)
CPU_MIN_SEQ_LEN = 1024
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "smollm3", "mixtral", "qwen2_moe", "qwen3_moe")
NAME = "unisparse"


@dataclass
class PatchState:
    cfg: SparseConfig
    min_seq_len: int | None  # None: default_min_seq_len of the device at call time
    original: str | None
    calls_sparse: int = 0
    calls_dense: int = 0
    densities: list[float] = field(default_factory=list)
    capture: dict[int, Any] | None = None  # layer_idx -> prefill (q, k, v), filled when not None
    capture_layers: set[int] | None = None  # which layers to capture (None = all)
    layer_cfgs: dict[int, SparseConfig] | None = None  # per-layer configs (layer_idx -> cfg)
    layer_densities: dict[int, float] = field(default_factory=dict)  # measured, last prefill


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    state: PatchState | None = getattr(module, "_unisparse", None)
    t, s = query.shape[2], key.shape[2]
    if state is not None and state.capture is not None and t > 1:
        layer = getattr(module, "layer_idx", len(state.capture))
        if state.capture_layers is None or layer in state.capture_layers:
            state.capture[layer] = (query.detach().clone(), key.detach().clone(),
                                    value.detach().clone())
    sparse_ok = (state is not None and attention_mask is None
                 and t >= (state.min_seq_len if state.min_seq_len is not None
                           else default_min_seq_len(query.device, state.cfg.block_size))
                 and s >= t
                 and getattr(module, "is_causal", True) and not (dropout and module.training)
                 and (kwargs.get("sliding_window") or s) >= s)  # a window wider than S is causal
    if not sparse_ok:
        if state is not None:
            state.calls_dense += 1
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    from .core import block_density
    from .sparse import sparse_prefill_attention

    layer = getattr(module, "layer_idx", None)
    cfg = (state.layer_cfgs or {}).get(layer, state.cfg)
    if cfg.method == "dense":  # every block: the model's own SDPA path computes the same
        state.calls_dense += 1
        state.layer_densities[layer] = 1.0
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    out, mask = sparse_prefill_attention(query, key, value, cfg, scale=scaling, return_mask=True)
    state.calls_sparse += 1
    state.densities.append(float(block_density(mask, t, s, cfg.block_size).mean()))
    state.layer_densities[layer] = state.densities[-1]
    return out.transpose(1, 2).contiguous(), None


def default_min_seq_len(device, block_size: int) -> int:
    """The shortest prompt that goes sparse when ``patch`` gets no ``min_seq_len``: on a CPU the
    measured break-even ``CPU_MIN_SEQ_LEN`` (shorter prefills are cheaper dense), elsewhere two
    blocks."""
    import torch

    if torch.device(device).type == "cpu":
        return max(CPU_MIN_SEQ_LEN, 2 * block_size)
    return 2 * block_size


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, _attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def _attention_modules(model) -> list:
    return [m for m in model.modules()
            if hasattr(m, "num_key_value_groups") and hasattr(m, "layer_idx") and hasattr(m, "config")]


def patch(model, method: str = "unisparse", density: float | None = 0.25, *,
          min_seq_len: int | None = None, cfg: SparseConfig | None = None,
          layer_cfgs: dict | None = None, **overrides):
    """Make ``model`` (a transformers causal LM) use sparse attention for long prefills.

    Args:
        model: a ``PreTrainedModel`` of a Llama / Mistral / Qwen2 / Qwen3 family.
        method: any name in ``unisparse.METHODS``; ``density`` the kept fraction of causal blocks
            (``1.0`` keeps every block and reproduces dense attention); other ``SparseConfig``
            fields as keyword overrides (``tau=0.95``, ``block_size=128``...).
        min_seq_len: prefills shorter than this stay dense (default ``None``: on a CPU the
            measured break-even ``CPU_MIN_SEQ_LEN``, elsewhere 2 blocks; pass ``2 * block_size``
            to study the selection on short CPU prompts).
        layer_cfgs: optional ``{layer_idx: SparseConfig}`` used instead of the shared config
            in those layers (per-layer budgets, MInference's per-layer head patterns).

    Returns the same model, patched in place (``unpatch(model)`` restores it).
    """
    from .baselines import METHODS
    from .config import validate

    family = getattr(getattr(model, "config", None), "model_type", None)
    if family not in SUPPORTED:
        raise UserError(f"unsupported model family {family!r} (supported: {', '.join(SUPPORTED)})")
    mods = _attention_modules(model)
    if not mods:
        raise UserError(f"no attention modules found in {type(model).__name__}")
    cfg = validate((cfg or SparseConfig()).with_(method=method, density=density, **overrides),
                   tuple(METHODS))
    _register()
    config = model.config
    original = getattr(config, "_attn_implementation", None)
    prior = getattr(model, "_unisparse_state", None)
    if prior is not None:  # re-patching keeps the true original
        original = prior.original
    layer_cfgs = {int(i): validate(c, tuple(METHODS)) for i, c in (layer_cfgs or {}).items()}
    state = PatchState(cfg, min_seq_len, original, layer_cfgs=layer_cfgs)
    for m in mods:
        m._unisparse = state
    _set_impl(model, NAME)
    model._unisparse_state = state
    return model


def _set_impl(model, name: str | None) -> None:
    try:
        model.set_attn_implementation(name)
    except Exception:  # older transformers: the config field is read at forward time
        model.config._attn_implementation = name


def unpatch(model):
    """Undo ``patch``: the original attention implementation, no sparse state left behind."""
    state = getattr(model, "_unisparse_state", None)
    if state is None:
        return model
    for m in _attention_modules(model):
        if hasattr(m, "_unisparse"):
            del m._unisparse
    _set_impl(model, state.original or "sdpa")
    del model._unisparse_state
    return model


def patch_state(model) -> PatchState | None:
    """The live ``PatchState`` of a patched model (counters, measured densities, captures)."""
    return getattr(model, "_unisparse_state", None)


def load_model(spec: str, dtype: str = "fp32"):
    """(model, tokenizer) on the CPU from a local Hugging Face folder (through the core's
    ``load_pretrained``: the folder is checked first, every failure is one ``UserError`` line,
    nothing is downloaded) or ``"smollm2"``."""
    if spec == "smollm2":
        import torch
        from transformers.utils import logging as hf_logging

        from icml26_shared.data import load_smollm2

        hf_logging.set_verbosity_error()  # no "Loading weights" bars or library log lines on stderr
        hf_logging.disable_progress_bar()
        model, tok = load_smollm2()
        return model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval(), tok
    from icml26_shared.hf import load_pretrained

    return load_pretrained(spec, dtype=dtype, device="cpu")
