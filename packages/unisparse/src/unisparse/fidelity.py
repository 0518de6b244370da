"""Attention-level evaluation on captured Q/K/V: per (document, layer, head) unit and per method
and density, the recall of the whole map, the recall of the *answer rows* (the query-block rows
holding the last 64 queries: the question, which produces the answer — the recall claim's rows)
and of the last query-block row alone (secondary), whether the needle's key blocks are kept
there, the measured density overall and on the answer rows and (at one density) the relative
output error.

``capture(model, ids, layers)`` runs a dense prefill and stops after the last requested layer
(so capturing early layers is cheap); ``unit_metrics`` scores every method on one capture.
"""

from __future__ import annotations

import torch

from . import core
from .config import SparseConfig

#: methods of the fidelity study: name -> (registered method, config overrides)
ARMS = {
    "unisparse": ("unisparse", {}),
    "unisparse_row": ("unisparse", {"allocation": "row"}),  # equal share per row (0.2 default)
    "unisparse_tau": ("unisparse", {"allocation": "tau"}),  # per-row top-p bisected to budget
    "unisparse_head": ("unisparse", {"allocation": "head"}),  # ablation: old per-head budget
    "unisparse_1g": ("unisparse", {"granularities": "block"}),  # ablation: keys pooled too (b, b)
    # ablation: one granularity (b, 1), the 0.3.3-0.3.10 default (issue 45 item 1)
    "unisparse_one_gran": ("unisparse", {"granularities": "single"}),
    "unisparse_no_answer": ("unisparse", {"answer_queries": 0}),  # ablation: 0.3.3's rule
    "ashape_answer": ("ashape_answer", {}),  # ablation: answer rows, no composite estimate
    # the answer-row rule on each estimator baseline's own selection, same budget (0.3.5)
    "xattention_answer": ("xattention", {"baseline_answer_rows": True}),
    "flexprefill_answer": ("flexprefill", {"baseline_answer_rows": True}),
    "minference_answer": ("minference", {"baseline_answer_rows": True}),
    "xattention": ("xattention", {}),
    "flexprefill": ("flexprefill", {}),
    "minference": ("minference", {}),
    "ashape": ("ashape", {}),
    "random": ("random", {}),
    "oracle": ("oracle", {}),
}
BASELINES = ("xattention", "flexprefill", "minference", "ashape")
#: arms whose own selection rule meets a density through a bisected threshold / count: they are
#: given UniSparse's *measured* density so that they never spend more blocks
ANSWER_BASELINES = ("xattention_answer", "flexprefill_answer", "minference_answer")
MATCHED = ("xattention", "flexprefill", "minference", "unisparse_tau", *ANSWER_BASELINES)
#: the answer rows of the recall claim (issue 13's "last query blocks — the ones that produce the
#: answer"; the lead's decision in 0.3.6): the query-block rows holding the last this many queries
ANSWER_QUERIES = 64
#: the fidelity study's default arms (``quick``): every estimator baseline with the same
#: answer-row rule as UniSparse (the comparison's headline rows, issue 45) and as published
DEFAULT_ARMS = tuple(ARMS)


class _Stop(Exception):
    pass


@torch.no_grad()
def capture(model, ids: list[int], layers) -> dict:
    """``{layer: (q, k, v)}`` from a dense prefill; the forward stops after ``max(layers)``."""
    from .io import patch, patch_state, unpatch

    want = set(layers)
    patch(model, method="dense", density=1.0, min_seq_len=10**9)
    st = patch_state(model)
    st.capture, st.capture_layers = {}, want
    last = max(want)
    hook = None
    mods = [m for m in model.modules() if getattr(m, "layer_idx", None) == last
            and hasattr(m, "num_key_value_groups")]
    if mods:
        def stop(*_):
            raise _Stop

        hook = mods[0].register_forward_hook(stop)
    try:
        model(torch.tensor([ids], device=model.device), use_cache=False)
    except _Stop:
        pass
    finally:
        if hook is not None:
            hook.remove()
        caps = dict(st.capture)
        unpatch(model)
    return {i: tuple(x.float() for x in caps[i]) for i in sorted(caps)}


def arm_config(arm: str, block: int, density: float, seed: int = 0, patterns=None,
               allocation: str = "row") -> SparseConfig:
    method, over = ARMS[arm]
    over = dict(over)
    if over.get("granularities") == "block":
        over["granularities"] = (block,)
    elif over.get("granularities") == "single":
        over["granularities"] = ((block, 1),)
    if method == "unisparse" and "allocation" not in over:
        over["allocation"] = allocation
    stride = 8 if block >= 32 else 4
    cfg = SparseConfig(method=method, block_size=block, density=density, xattn_stride=stride,
                       last_q=min(64, 2 * block), seed=seed, **over)
    if method == "minference" and patterns is not None:
        cfg = cfg.with_(patterns=tuple(patterns))
    return cfg


@torch.no_grad()
def unit_metrics(q, k, v, arms, densities, block: int, needle_blocks, *, seed: int = 0,
                 patterns=None, allocation: str = "row", error_density=None) -> dict:
    """``{(arm, density): {metric: [per-head values]}}`` for one capture (heads are units)."""
    from .fast import run_blocks
    from .sparse import estimate_block_mask

    t = q.shape[2]
    n_ans = core.n_blocks(t, block) - core.answer_rows_start(t, block, ANSWER_QUERIES)
    mass = core.block_attention_mass(q, k, block)
    exact = None
    out: dict = {}
    for dens in densities:
        # the budget: UniSparse's equal row shares (forced blocks included) at this density
        ref_cfg = arm_config("unisparse_row", block, dens, seed)
        masks = {ref_cfg: estimate_block_mask(q, k, ref_cfg)}  # same config, same mask
        measured = float(core.block_density(masks[ref_cfg], t, t, block).mean())
        for arm in arms:
            cfg = arm_config(arm, block, dens, seed, patterns, allocation)
            if arm in MATCHED or (cfg.method == "unisparse" and cfg.allocation == "tau"):
                cfg = cfg.with_(density=measured)
            if cfg not in masks:
                masks[cfg] = estimate_block_mask(q, k, cfg)
            mask = masks[cfg]
            cell = out.setdefault((arm, dens), {})
            cell["recall"] = core.attention_recall(q, k, mask, block, mass=mass)[0].tolist()
            # secondary: the last query-block row alone (one token when T = 64·n + 1)
            cell["last_row_recall"] = core.row_recall(mass, mask, 1)[0].tolist()
            cell["needle_hit"] = core.block_hit(mask, needle_blocks, 1)[0].float().tolist()
            # the claim's rows: the answer rows, those holding the last ANSWER_QUERIES queries
            # (the question, which produces the answer; the last two rows at 4,097 tokens)
            cell["answer_rows_recall"] = core.row_recall(mass, mask, n_ans)[0].tolist()
            cell["answer_needle_hit"] = core.block_hit(mask, needle_blocks, n_ans)[0].float().tolist()
            cell["answer_rows_density"] = core.row_density(mask, t, t, block, n_ans)[0].tolist()
            cell["density"] = core.block_density(mask, t, t, block)[0].tolist()
            if error_density is not None and abs(dens - error_density) < 1e-9:
                if exact is None:
                    full = core.causal_block_valid(t, t, block).expand(1, q.shape[1], -1, -1)
                    exact = run_blocks(q, k, v, full, block, backend="kernel")
                o = run_blocks(q, k, v, mask, block, backend="kernel")
                cell["rel_error"] = core.relative_error(o, exact)[0].tolist()
    return out


def tau_for_recall(q, k, block: int, targets=(0.9, 0.95)) -> dict:
    """UniSparse with a top-p budget: the density it needs to reach each estimated mass ``tau``,
    and the true recall it gets there (``{tau: (density, recall)}``, means over heads)."""
    from .sparse import estimate_block_mask

    t = q.shape[2]
    mass = core.block_attention_mass(q, k, block)
    res = {}
    for tau in targets:
        mask = estimate_block_mask(q, k, block_size=block, density=None, tau=tau)
        res[tau] = (float(core.block_density(mask, t, t, block).mean()),
                    float(core.attention_recall(q, k, mask, block, mass=mass).mean()))
    return res
