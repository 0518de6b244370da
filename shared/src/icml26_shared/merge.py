"""Model-merging rules, written once for every package that merges (circumerge, orthomerge).

A rule merges a stack ``mats`` of shape (T, ...) — one parameter of T experts, in whatever space
the caller merges (dense ΔW, LoRA cores, OFT residuals) — with per-expert ``weights`` (T,):

=================  ==========================================================================
``ta``             task arithmetic, Σ w_t M_t                         (peft ``task_arithmetic``)
``ties``           trim to the top-``density`` magnitudes, elect a sign per entry from the
                   sum of the trimmed tensors (a zero sum elects +1), disjoint mean of the
                   weighted entries that agree                          (peft ``ties``, "total")
``magnitude_prune``  trim as TIES, weighted sum                         (peft ``magnitude_prune``)
``dare_linear``    drop each entry with probability 1 − density, rescale by 1/density,
                   weighted sum                                         (peft ``dare_linear``)
``dare_ties``      DARE's drop-and-rescale, then TIES' election and disjoint mean (peft ``dare_ties``)
``tsv``            TSV-Merge (Gargiulo et al. 2025): each weighted expert's top min(p, q)//T
                   singular triplets, U and V orthogonalised by their polar factors
``iso``            Iso-C (Marczak et al. 2025): the TA sum with its nonzero singular values
                   replaced by their mean
=================  ==========================================================================

The first five call peft's own functions (``from peft.utils import merge_utils``, imported on
first use); TSV and Iso, which peft does not have, are written here. A bare ``dare`` is refused:
peft and mergekit mean DARE-linear by it, TIES-merging's successors DARE-TIES.

**Trim scope.** peft trims each tensor on its own (``trim_scope="tensor"``, also mergekit's
convention). TIES-merging's authors, and OrthoMerge's code, keep each expert's top ``density``
over the whole model (``"model"``): :func:`model_thresholds` finds each expert's exact k-th
largest magnitude in two streaming passes over its tensors (a 32,768-bin histogram of the float32
bit patterns, then an exact selection inside one bin), so the concatenated model is never held.
Entries with ``|x| >= threshold`` are kept, so ties at the threshold keep a few more than k.

**Randomness.** peft draws DARE's masks from torch's global generator; :func:`apply_rule` runs them
inside ``torch.random.fork_rng`` with the global state set from the caller's ``generator`` (which
advances as if it had drawn them), so the same generator gives the same masks and the caller's
global random state is untouched.

:func:`prepare_out` is the output-folder guard of every merge CLI: ``--force`` replaces only a
folder that the same tool wrote.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .errors import UserError

__all__ = ["DEFAULT_DENSITY", "LINEAR_RULES", "RULES", "TRIM_SCOPES", "apply_rule", "merge_stacks",
           "model_thresholds", "peft_merge_utils", "prepare_out", "register_rule"]

RuleFn = Callable[..., torch.Tensor]
RULES: dict[str, RuleFn] = {}
#: density a rule uses when the caller gives none (TIES paper: top 20 %; DARE paper: p = 0.5)
DEFAULT_DENSITY = {"ties": 0.2, "magnitude_prune": 0.2, "dare_linear": 0.5, "dare_ties": 0.5}
#: rules linear in the experts (exact in any linear change of basis)
LINEAR_RULES = frozenset({"ta"})
TRIM_SCOPES = ("tensor", "model")
#: rules whose trim a model-scope threshold replaces
_TRIMMED = frozenset({"ties", "magnitude_prune"})


def register_rule(name: str) -> Callable[[RuleFn], RuleFn]:
    """Decorator: ``@register_rule("mine") def mine(mats, w, *, density, generator, threshold=None)``."""
    def deco(fn: RuleFn) -> RuleFn:
        RULES[name] = fn
        return fn
    return deco


def peft_merge_utils():
    """peft's rule module, through its public import (peft pulls transformers on first import)."""
    try:
        from peft.utils import merge_utils
    except ImportError as e:  # pragma: no cover - peft is a dependency of every merging package
        raise ImportError("TA / TIES / DARE run peft's code: pip install peft") from e
    return merge_utils


def _check_name(name: str) -> None:
    if name == "dare":
        raise UserError("rule 'dare' is ambiguous: choose dare_linear (DARE then task arithmetic, "
                        "peft's and mergekit's 'dare') or dare_ties (DARE then TIES' sign election)")
    if name not in RULES:
        raise UserError(f"unknown merge rule {name!r} (known: {', '.join(sorted(RULES))})")


def _density(name: str, density: float | None) -> float:
    d = DEFAULT_DENSITY.get(name, 1.0) if density is None else float(density)
    if not 0.0 < d <= 1.0:
        raise UserError(f"density must be in (0, 1], got {density}")
    return d


def apply_rule(name: str, mats: torch.Tensor, weights: Any = None, *, density: float | None = None,
               generator: torch.Generator | None = None,
               thresholds: torch.Tensor | Sequence[float] | None = None) -> torch.Tensor:
    """Merge the (T, ...) stack ``mats`` with rule ``name``.

    ``weights`` default to ones (either sign allowed); ``density`` to :data:`DEFAULT_DENSITY`;
    ``generator`` (seed 0 if None) drives DARE's masks. ``thresholds`` (T,) switch TIES and
    magnitude-prune to a given per-expert magnitude cut (model scope, from
    :func:`model_thresholds`); ``None`` trims per tensor as peft does."""
    _check_name(name)
    if mats.ndim < 2:
        raise ValueError(f"mats must be a (T, ...) stack, got shape {tuple(mats.shape)}")
    T = mats.shape[0]
    w = (torch.ones(T, dtype=mats.dtype) if weights is None
         else torch.as_tensor(weights, dtype=mats.dtype)).to(mats.device)
    if w.shape != (T,):
        raise ValueError(f"expected {T} weights, got shape {tuple(w.shape)}")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    thr = None
    if thresholds is not None:
        if name not in _TRIMMED:
            raise ValueError(f"rule {name!r} takes no trim thresholds (only {sorted(_TRIMMED)})")
        thr = torch.as_tensor(thresholds, dtype=mats.dtype).to(mats.device)
        if thr.shape != (T,):
            raise ValueError(f"expected {T} thresholds, got shape {tuple(thr.shape)}")
    return RULES[name](mats, w, density=_density(name, density), generator=generator, threshold=thr)


def merge_stacks(name: str, stacks: Mapping[str, torch.Tensor], weights: Any = None, *,
                 density: float | None = None, trim_scope: str = "tensor",
                 generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Every parameter's (T, ...) stack through rule ``name``; with ``trim_scope="model"`` the
    TIES / magnitude-prune trim keeps each expert's top ``density`` over all the stacks."""
    _check_name(name)
    if trim_scope not in TRIM_SCOPES:
        raise UserError(f"trim scope must be one of {', '.join(TRIM_SCOPES)}, got {trim_scope!r}")
    thr = None
    if trim_scope == "model" and name in _TRIMMED and stacks:
        T = next(iter(stacks.values())).shape[0]
        thr = model_thresholds([[s[t] for s in stacks.values()] for t in range(T)],
                               _density(name, density))
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    return {k: apply_rule(name, s, weights, density=density, generator=generator,
                          thresholds=None if thr is None else thr.to(s.dtype))
            for k, s in stacks.items()}


# --- model-scope trim -------------------------------------------------------------------------

_BIN_SHIFT = 16  # float32 bit pattern >> 16: 32,768 bins over the non-negative floats, monotone


def _abs_bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).to(torch.float32).abs().view(torch.int32)


def model_thresholds(experts: Sequence[Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]]],
                     density: float) -> torch.Tensor:
    """Each expert's exact k-th largest |value| over all its tensors, k = max(1, ⌊density·n⌋)
    (peft's count), as float64.

    ``experts[t]`` is a sequence of tensors, or a zero-argument callable returning an iterable of
    them (read twice: e.g. a lazy safetensors reader). Memory: one tensor at a time plus 32,768
    counts, then the entries of one histogram bin."""
    if not 0.0 < density <= 1.0:
        raise UserError(f"density must be in (0, 1], got {density}")
    out = []
    for src in experts:
        def tensors(src=src):
            return src() if callable(src) else src
        counts = torch.zeros(1 << (31 - _BIN_SHIFT), dtype=torch.int64)
        n = 0
        for x in tensors():
            b = _abs_bits(x) >> _BIN_SHIFT
            counts += torch.bincount(b, minlength=counts.numel())
            n += b.numel()
        if n == 0:
            raise ValueError("an expert has no entries to trim")
        k = max(1, int(density * n))  # peft's count: int(density * numel)
        above = torch.cumsum(counts.flip(0), 0)  # above[j]: entries in bins >= last - j
        j = int(torch.searchsorted(above, torch.tensor(k)))
        b_star = counts.numel() - 1 - j
        rank = k - (int(above[j - 1]) if j > 0 else 0)  # rank-th largest inside bin b_star
        # the bin's entries in their own dtype (float32 rounding is monotone, so bins order them)
        vals = torch.cat([x.detach().reshape(-1).abs().to(torch.float64)[(_abs_bits(x) >> _BIN_SHIFT) == b_star]
                          for x in tensors()])
        out.append(torch.topk(vals, rank).values[-1].item())
    return torch.tensor(out, dtype=torch.float64)


# --- rules --------------------------------------------------------------------------------------

def _seeded(fn: Callable[[], torch.Tensor], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft warns when density = 1 (nothing pruned)
        if cuda:
            torch.cuda.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
        torch.default_generator.set_state(generator.get_state())
        out = fn()
        generator.set_state(torch.default_generator.get_state())
    return out


def _peft(fn_name: str, mats: torch.Tensor, w: torch.Tensor, *args, generator) -> torch.Tensor:
    fn = getattr(peft_merge_utils(), fn_name)
    return _seeded(lambda: fn(list(mats.unbind(0)), w, *args), generator, mats.device)


def _cut(mats: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    keep = mats.abs() >= threshold.view(-1, *[1] * (mats.ndim - 1))
    return mats * keep


def _wview(w: torch.Tensor, mats: torch.Tensor) -> torch.Tensor:
    return w.view(-1, *[1] * (mats.ndim - 1))


@register_rule("ta")
def task_arithmetic(mats, w, *, density, generator, threshold=None):
    return _peft("task_arithmetic", mats, w, generator=generator)


@register_rule("ties")
def ties(mats, w, *, density, generator, threshold=None):
    if threshold is None:
        return _peft("ties", mats, w, density, "total", generator=generator)
    mu = peft_merge_utils()
    trimmed = _cut(mats, threshold)
    sign_mask = mu.calculate_majority_sign_mask(trimmed, method="total")
    return mu.disjoint_merge(trimmed * _wview(w, mats), sign_mask)


@register_rule("magnitude_prune")
def magnitude_prune(mats, w, *, density, generator, threshold=None):
    if threshold is None:
        return _peft("magnitude_prune", mats, w, density, generator=generator)
    return (_cut(mats, threshold) * _wview(w, mats)).sum(0)


@register_rule("dare_linear")
def dare_linear(mats, w, *, density, generator, threshold=None):
    return _peft("dare_linear", mats, w, density, generator=generator)


@register_rule("dare_ties")
def dare_ties(mats, w, *, density, generator, threshold=None):
    return _peft("dare_ties", mats, w, density, "total", generator=generator)


def _polar(X: torch.Tensor) -> torch.Tensor:
    """Nearest matrix with orthonormal columns (or rows, if wide): P Qᵀ from X = P Σ Qᵀ."""
    P, _, Qh = torch.linalg.svd(X, full_matrices=False)
    return P @ Qh


@register_rule("tsv")
def tsv(mats, w, *, density, generator, threshold=None, rtol: float | None = None):
    """TSV-Merge. Triplets with σ ≈ 0 are dropped (their vectors are arbitrary and would move the
    orthogonalisation). On vectors (biases, norms): the weighted mean, as TSV-M's code does."""
    if mats.ndim != 3:
        return (mats * _wview(w, mats)).sum(0) / w.sum()
    T, p, q = mats.shape
    k = max(1, min(p, q) // T)
    U, S, Vh = torch.linalg.svd(mats * _wview(w, mats), full_matrices=False)
    rtol = 100 * torch.finfo(mats.dtype).eps if rtol is None else rtol
    top = S.max()
    keep = [int((S[t, :k] > rtol * top).sum()) for t in range(T)]
    S_cat = torch.cat([S[t, : keep[t]] for t in range(T)])
    if S_cat.numel() == 0:
        return torch.zeros(p, q, dtype=mats.dtype, device=mats.device)
    U_cat = torch.cat([U[t, :, : keep[t]] for t in range(T)], 1)
    V_cat = torch.cat([Vh[t, : keep[t]] for t in range(T)], 0)
    return (_polar(U_cat) * S_cat) @ _polar(V_cat)


@register_rule("iso")
def iso(mats, w, *, density, generator, threshold=None, rtol: float = 1e-5):
    M = task_arithmetic(mats, w, density=density, generator=generator)
    if M.ndim != 2:
        return M
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    if S.numel() == 0 or S[0] == 0:
        return M
    k = int((S > rtol * S[0]).sum())
    return S[:k].mean() * (U[:, :k] @ Vh[:k])


# --- output folder ------------------------------------------------------------------------------

def _written_by(folder: Path, tool: str) -> bool:
    from .io import MANIFEST

    if not any(folder.iterdir()):
        return True
    try:
        import json
        writer = json.loads((folder / MANIFEST).read_text()).get("writer") or ""
    except (OSError, ValueError, AttributeError):
        return False
    return writer.split(" ")[0] == tool


def prepare_out(out: str | Path, force: bool, inputs: Iterable[str | Path] = (), *, tool: str,
                flag: str = "--out") -> Path:
    """Check a merge's output folder before any work (every refusal a one-line ``UserError``).

    Refused: a symbolic link; an ``out`` that is an input, contains one or lies inside one
    (symlinks followed); an existing ``out`` without ``force``; a non-directory; and, with
    ``force``, a folder that ``tool`` did not write (its manifest's writer) or that holds files
    its manifest does not list. The parent must exist and be writable. Write the output with
    ``icml26_shared.io.atomic_dir(out, replace=force, writer=f"{tool} {version}")``."""
    from .io import check_replaceable

    out = Path(out)
    if out.is_symlink():
        raise UserError(f"{flag} {out} is a symbolic link (to {os.readlink(out)}); give a real folder")
    real = out.resolve()
    for d in inputs:
        d_real = Path(d).resolve()
        if real == d_real:
            raise UserError(f"{flag} {out} is the input {d}; choose another folder")
        if real in d_real.parents:
            raise UserError(f"{flag} {out} contains the input {d}; choose another folder")
        if d_real in real.parents:
            raise UserError(f"{flag} {out} lies inside the input {d}; choose another folder")
    if out.exists():
        if not force:
            raise UserError(f"{flag} {out} already exists (pass --force to replace an earlier {tool} output)")
        if not out.is_dir():
            raise UserError(f"{flag} {out} exists and is not a folder")
        if not _written_by(out, tool):
            raise UserError(f"{flag} {out} was not written by {tool}; --force replaces only an "
                            f"earlier {tool} output")
        check_replaceable(out)
    parent = out.absolute().parent
    if not parent.is_dir():
        raise UserError(f"the parent folder of {flag} {out} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write into {parent}")
    return out
