"""Synthetic LoRA factors with Llama-like shapes, and the merge-time / fidelity benchmark.

Factors have decaying spectra (σ_i ∝ decay^i) and partly shared subspaces: each task's row space
(A) and column space (B) mixes a subspace common to all tasks with a task-specific one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from icml26_shared.eval import compare

from .adapters import factored_svdvals
from .core import effective_rank, sketch_sizes
from .spaces import SpaceOptions, merge_layer


def make_factors(T: int, r: int | Sequence[int], m: int, n: int, *, shared: float = 0.5,
                 decay: float = 0.85, seed: int = 0, dtype: torch.dtype = torch.float32,
                 ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """T LoRA pairs (A_t (r_t, n), B_t (m, r_t)); ``shared`` ∈ [0, 1] weights the common subspace."""
    g = torch.Generator().manual_seed(seed)
    ranks = [r] * T if isinstance(r, int) else list(r)
    rmax = max(ranks)
    common_a = torch.randn(rmax, n, generator=g, dtype=torch.float64)
    common_b = torch.randn(m, rmax, generator=g, dtype=torch.float64)
    As, Bs = [], []
    for rt in ranks:
        own_a = torch.randn(rt, n, generator=g, dtype=torch.float64)
        own_b = torch.randn(m, rt, generator=g, dtype=torch.float64)
        a = shared * common_a[:rt] + (1 - shared) * own_a
        b = shared * common_b[:, :rt] + (1 - shared) * own_b
        Qa, _ = torch.linalg.qr(a.T)  # n × r orthonormal
        Qb, _ = torch.linalg.qr(b)  # m × r orthonormal
        s = decay ** torch.arange(rt, dtype=torch.float64)
        As.append((s.sqrt()[:, None] * Qa.T).to(dtype))
        Bs.append((Qb * s.sqrt()[None, :]).to(dtype))
    return As, Bs


def coherent_factors(T: int, r: int, m: int, n: int, *, k: int = 8, noise: float = 1e-3, seed: int = 0,
                     ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """T LoRA pairs whose energy sits on ``k`` input and ``k`` output coordinates (plus ``noise``):
    the worst case for uniform row sampling, the case a shared transform is meant to fix. float64."""
    g = torch.Generator().manual_seed(seed)
    cols, rows = torch.randperm(n, generator=g)[:k], torch.randperm(m, generator=g)[:k]
    As, Bs = [], []
    for _ in range(T):
        A = noise * torch.randn(r, n, generator=g, dtype=torch.float64)
        A[:, cols] += torch.randn(r, k, generator=g, dtype=torch.float64)
        B = noise * torch.randn(m, r, generator=g, dtype=torch.float64)
        B[rows] += torch.randn(k, r, generator=g, dtype=torch.float64)
        As.append(A)
        Bs.append(B)
    return As, Bs


def relative_error(A1, B1, A2, B2) -> float:
    """‖B1 A1 − B2 A2‖_F / ‖B2 A2‖_F, from the factors (no m×n matrix): via stacked factors."""
    Bc = torch.cat([B1.double(), -B2.double()], 1)
    Ac = torch.cat([A1.double(), A2.double()], 0)
    num = factored_svdvals(Ac, Bc).pow(2).sum().sqrt()
    den = factored_svdvals(A2.double(), B2.double()).pow(2).sum().sqrt()
    return float(num / den) if den > 0 else float("nan")


def shared_init_factors(T: int, r: int, m: int, n: int, *, noise: float = 1e-3, seed: int = 0,
                        dtype: torch.dtype = torch.float32) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """What same-seed LoRA training produces: every A_t = A₀ + ``noise``·(relative) Gaussian noise,
    independent B_t. The stacked A is then ill-conditioned (σ_min/σ_max ≈ noise)."""
    g = torch.Generator().manual_seed(seed)
    A0 = torch.randn(r, n, generator=g, dtype=torch.float64) / n ** 0.5
    As = [(A0 + noise * torch.randn(r, n, generator=g, dtype=torch.float64) / n ** 0.5).to(dtype)
          for _ in range(T)]
    Bs = [(torch.randn(m, r, generator=g, dtype=torch.float64) / m ** 0.5).to(dtype) for _ in range(T)]
    return As, Bs


def _label_opts(label: str, sketch_size: int | str) -> tuple[str, SpaceOptions]:
    """"circulant@512" = the circulant space with a 512-row sketch; "circulant@none" without sampling."""
    space, _, size = label.partition("@")
    return space, SpaceOptions(sketch_size=(int(size) if size.isdigit() else size) if size else sketch_size)


def bench(m: int, n: int, T: int, r: int, *, spaces: Sequence[str], rules: Sequence[str],
          sketch_size: int | str = "auto", seed: int = 0, repeats: int = 5, warmup: int = 1,
          error_rules: Sequence[str] = (), label_rules: Mapping[str, Sequence[str]] | None = None,
          peft_dense: bool = False, error_labels: Sequence[str] | None = None) -> list[dict]:
    """Time every (space, rule) side by side on one synthetic set (interleaved rounds,
    ``icml26_shared.eval.compare``); return one record each, with the median/p20/p80 seconds, the
    per-round times, the ratio to ``core`` (same rule), the sketch sizes, the relative error
    ‖ΔW* − ΔW*_core‖/‖ΔW*_core‖ and the effective rank of the merged update.

    ``label_rules``: the rules timed for a label instead of ``rules``; ``error_rules``: further
    rules whose error (not time) is recorded, for the labels in ``error_labels`` (default: every
    label; keep ``core``, the reference). ``peft`` is peft's ``add_weighted_adapter``, timed
    without building its model: TA runs ``cat`` (factored, at any shape); its dense ``*_svd``
    rules run only with ``peft_dense`` (they hold T dense m×n matrices)."""
    As, Bs = make_factors(T, r, m, n, seed=seed)
    fns, outputs = {}, {}
    for label in spaces:
        space, opts = _label_opts(label, sketch_size)
        timed = list((label_rules or {}).get(label, rules))
        merger = None
        if space == "peft":
            from .peft_baseline import COMBINATION, PeftMerger

            merger = PeftMerger(As, Bs)
        extra = error_rules if error_labels is None or label in error_labels else ()
        for rule in dict.fromkeys([*timed, *extra]):
            if merger is not None and (rule not in COMBINATION or (rule != "ta" and not peft_dense)):
                continue  # peft has no TSV / Iso; its non-TA rules are dense
            if merger is not None:
                def fn(rule=rule, merger=merger):
                    return merger.merge(rule, None, seed=seed)
            else:
                def fn(space=space, rule=rule, opts=opts):
                    return merge_layer(As, Bs, space=space, rule=rule, seed=seed, opts=opts)
            if rule in timed:
                fns[(label, rule)] = fn
            outputs[(label, rule)] = (fn(), opts)
    timings = compare({f"{s}/{r}": f for (s, r), f in fns.items()}, warmup=warmup, repeats=repeats)
    records = []
    for (label, rule), ((A, B), opts) in outputs.items():
        t = timings.get(f"{label}/{rule}")
        core_t = timings.get(f"core/{rule}")
        ref = outputs.get(("core", rule))
        s_a, s_b = sketch_sizes(As, Bs, opts) if label.startswith("circulant") else (n, m)
        records.append({
            "m": m, "n": n, "T": T, "r": r, "R": T * r, "space": label, "rule": rule,
            "repeats": repeats if t else 0, "s_A": s_a, "s_B": s_b,
            "median_s": t.median if t else None, "p20_s": t.p20 if t else None,
            "p80_s": t.p80 if t else None, "times_s": t.times if t else None,
            "core_times_s": core_t.times if (t and core_t) else None,
            "ratio_to_core": t.median / core_t.median if (t and core_t) else None,
            "rel_error_to_core": relative_error(A, B, *ref[0]) if ref is not None else None,
            "merged_rank": A.shape[0],
            "effective_rank": effective_rank(factored_svdvals(A.double(), B.double())),
        })
    return records


def format_records(records: list[dict]) -> str:
    head = (f"{'shape':>11} {'T':>3} {'r':>3} {'R':>5} {'space':>14} {'rule':>15} {'s_A':>6} {'s_B':>6} {'median s':>9} "
            f"{'×core':>7} {'err vs core':>11} {'erank':>6}")
    lines = [head, "-" * len(head)]
    for r in records:
        ratio = "" if r["ratio_to_core"] is None else f"{r['ratio_to_core']:.3f}"
        med = "" if r["median_s"] is None else f"{r['median_s']:.4f}"
        err = "" if r["rel_error_to_core"] is None else f"{r['rel_error_to_core']:.2e}"
        lines.append(f"{r['m']:>5}x{r['n']:<5} {r['T']:>3} {r['r']:>3} {r['R']:>5} {r['space']:>14} {r['rule']:>15} "
                     f"{r['s_A']:>6} {r['s_B']:>6} {med:>9} {ratio:>7} {err:>11} {r['effective_rank']:>6.1f}")
    return "\n".join(lines)
