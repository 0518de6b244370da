"""The public merges, on peft adapters and checkpoints: OFT/BOFT in the Lie algebra, and the
Orthogonal-Residual Decoupling of full / LoRA experts, streamed one module at a time."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from icml26_shared import UserError

from . import core
from .baselines import TRIMMED, merge_deltas, thresholds
from .config import DecoupleConfig, OFTMergeConfig
from .io import Adapter, check_compatible

Progress = Callable[[int, int, str], None] | None


def _weights(cfg, T: int) -> list[float]:
    w = list(cfg.weights) if getattr(cfg, "weights", None) else [1.0] * T
    if len(w) != T:
        raise UserError(f"{len(w)} weights given for {T} adapters")
    return w


def oft_skews(ad: Adapter, module: str) -> torch.Tensor:
    """(nb, b, b) skew generators of one OFT module, fp64 (legacy ``oft_r``: its skew part)."""
    if ad.key(module, ".oft_R.weight") in ad.tensors:
        vec = ad.tensors[ad.key(module, ".oft_R.weight")].double()
        return core.skew_from_vec(vec, core.block_from_params(vec.shape[-1]))
    full = ad.tensors[ad.key(module, ".oft_r")].double()
    return core.skew(full)


def uses_neumann(config: dict, legacy: bool = False) -> bool:
    """Does peft apply this adapter through the truncated Neumann series (its default)?"""
    return bool(config.get("use_cayley_neumann", True)) and not legacy


def oft_blocks(config: dict, Q: torch.Tensor, legacy: bool = False) -> torch.Tensor:
    """(nb, b, b) rotation blocks peft applies for generators Q under ``config`` (COFT, path)."""
    Q = coft_project(Q, config) if config.get("coft") else Q
    if uses_neumann(config, legacy):
        return core.cayley_neumann(Q, int(config.get("num_cayley_neumann_terms", 5)))
    return core.cayley(Q, "peft")


def oft_rotation(ad: Adapter, module: str, Q: torch.Tensor | None = None, in_features: int | None = None):
    """The block-diagonal rotation peft applies for generator Q (default: the adapter's own)."""
    Q = oft_skews(ad, module) if Q is None else Q
    return core.block_diag(oft_blocks(ad.config, Q, ad.legacy), in_features)


def exact_config(config: dict) -> dict:
    """The same OFT config on peft's exact Cayley path."""
    return {**config, "use_cayley_neumann": False}


def coft_project(Q: torch.Tensor, config: dict) -> torch.Tensor:
    """peft's COFT constraint: each block's generator clipped to ‖Q‖_F ≤ eps/√nb."""
    eps = float(config.get("eps", 6e-5)) / math.sqrt(Q.shape[0])
    norm = torch.linalg.matrix_norm(Q, keepdim=True)
    return torch.where(norm <= eps, Q, eps * Q / norm.clamp_min(1e-300))


def _check_scale_usable(cfg: OFTMergeConfig) -> None:
    if cfg.method in ("orthomerge", "avg") and cfg.scale == 0:
        raise UserError("scale 0 merges to the identity rotation")


def merge_oft_adapters(adapters, cfg: OFTMergeConfig | None = None, progress: Progress = None):
    """Merge OFT or BOFT adapters into one adapter: ``(tensors, config)`` in peft's format.

    OFT: per module, Q* = ``merge_skew`` (``orthomerge``) or ``average_skew`` (``avg``) of the
    generators, stored back as packed ``oft_R.weight``. BOFT [R]: the same per butterfly factor
    on the skew parts of ``boft_R``; ``boft_s`` by geometric mean. Other tensors are averaged.
    """
    cfg = cfg or OFTMergeConfig()
    ads = [a if isinstance(a, Adapter) else Adapter.open(a) for a in adapters]
    if cfg.method not in ("orthomerge", "avg"):
        raise UserError(f"method {cfg.method} merges dense deltas: it needs --base and --dense")
    check_compatible(ads)
    w = _weights(cfg, len(ads))
    first = ads[0]
    to_exact = cfg.exact_cayley and first.peft_type == "OFT" and uses_neumann(first.config, first.legacy)
    out: dict[str, torch.Tensor] = {}
    mods = first.modules()
    for i, mod in enumerate(mods):
        if progress:
            progress(i + 1, len(mods), mod)
        if first.peft_type == "OFT":
            Qs = torch.stack([oft_skews(a, mod) for a in ads])
            Q = _merge(Qs, w, cfg)
            if to_exact:  # the exact path is (I − Q)(I + Q)⁻¹, the transpose of Neumann's: store −Q*
                Q = -Q
            key = first.key(mod, ".oft_R.weight")
            dtype = first.tensors[key if key in first.tensors else first.key(mod, ".oft_r")].dtype
            out[key] = core.vec_from_skew(Q).to(dtype)
        else:
            Rs = torch.stack([a.tensors[a.key(mod, ".boft_R")].double() for a in ads])  # (T, N, D, H, H)
            Qs = core.skew(Rs)
            merged = torch.stack([_merge(Qs[:, n], w, cfg) for n in range(Qs.shape[1])])
            key = first.key(mod, ".boft_R")
            out[key] = merged.to(first.tensors[key].dtype)
            S = torch.stack([a.tensors[a.key(mod, ".boft_s")].double() for a in ads])
            if bool((S <= 0).any()):
                raise UserError(f"{mod}: boft_s has non-positive scales (no geometric mean)")
            wt = torch.tensor(w, dtype=torch.float64).view(-1, 1, 1)
            out[first.key(mod, ".boft_s")] = torch.exp((wt * S.log()).sum(0) / wt.sum()).to(
                first.tensors[first.key(mod, ".boft_s")].dtype)
    for k in first.other_keys():
        vals = torch.stack([a.tensors[k].double() for a in ads])
        wt = torch.tensor(w, dtype=torch.float64).view(-1, *[1] * (vals.dim() - 1))
        out[k] = ((wt * vals).sum(0) / wt.sum()).to(first.tensors[k].dtype)
    config = output_config(first)
    return out, exact_config(config) if to_exact else config


def _merge(Qs: torch.Tensor, w: list[float], cfg: OFTMergeConfig) -> torch.Tensor:
    if cfg.method == "avg":
        return core.average_skew(Qs, w, cfg.scale)
    return core.merge_skew(Qs, w, magnitude=cfg.magnitude, granularity=cfg.granularity,
                           direction=cfg.direction, scale=cfg.scale)


def output_config(first: Adapter) -> dict:
    cfg = dict(first.config)
    if first.legacy:  # written in today's packed format, exact Cayley path (what oft_r used)
        cfg.update(use_cayley_neumann=False, num_cayley_neumann_terms=5)
        nb = None
        for k in first.tensors.keys():
            if k.endswith(".oft_r"):
                nb, b = first.tensors.shape(k)[0], first.tensors.shape(k)[-1]
                break
        cfg.update(oft_block_size=b if nb else 0, r=0)
    cfg["inference_mode"] = True
    return cfg


#: ‖RᵀR − I‖_F above which ``oft`` warns that peft's Neumann path is far from a rotation
ORTHO_WARN = 1e-3


def orthogonality(ads: list[Adapter], tensors: Mapping[str, torch.Tensor], config: dict,
                  cfg: OFTMergeConfig | None = None) -> dict:
    """‖RᵀR − I‖_F of every OFT module as peft applies it (its Cayley path), for each input and
    for the merged adapter ``(tensors, config)``: the worst module of each, and with
    ``--exact-cayley`` on Neumann inputs the function gap it costs, max over modules of
    ‖R_Neumann(Q*) − R_exact‖₂ (a bound on the relative change of any module's output)."""
    first = ads[0]
    path = "neumann" if uses_neumann(first.config, first.legacy) else "exact"
    rep: dict = {"path": path, "terms": int(first.config.get("num_cayley_neumann_terms", 5)) if path == "neumann" else None,
                 "inputs": [], "merged": None, "exact_cayley_gap": None}
    if first.peft_type != "OFT":  # BOFT: peft's exact Cayley, orthogonal to rounding
        return rep

    def worst(errs: dict[str, float]) -> dict:
        mod = max(errs, key=errs.get)
        return {"worst_module": mod, "orthogonality_error": errs[mod]}
    for a in ads:
        rep["inputs"].append({"adapter": str(a.path), **worst(
            {m: core.orthogonality_error(oft_blocks(a.config, oft_skews(a, m), a.legacy)) for m in a.modules()})})
    if not tensors:
        return rep
    errs, gap = {}, 0.0
    to_exact = cfg is not None and cfg.exact_cayley and path == "neumann"
    for m in first.modules():
        key = first.key(m, ".oft_R.weight")
        Q = core.skew_from_vec(tensors[key].double(), core.block_from_params(tensors[key].shape[-1]))
        R = oft_blocks(config, Q)
        errs[m] = core.orthogonality_error(R)
        if to_exact:  # what the Neumann path would have applied for the same merge
            gap = max(gap, float(torch.linalg.matrix_norm(oft_blocks(first.config, -Q) - R, ord=2).max()))
    rep["merged"] = worst(errs)
    rep["exact_cayley_gap"] = gap if to_exact else None
    return rep


def orthogonality_warning(rep: dict) -> str | None:
    """One line when any input or the merged adapter is further than ``ORTHO_WARN`` from orthogonal."""
    rows = [("input " + r["adapter"], r) for r in rep["inputs"]]
    if rep["merged"]:
        rows.append(("merged adapter", rep["merged"]))
    if not rows:
        return None
    what, r = max(rows, key=lambda x: x[1]["orthogonality_error"])
    if r["orthogonality_error"] <= ORTHO_WARN:
        return None
    return (f"{what}: its rotations are not orthogonal as peft applies them (Neumann series, "
            f"{rep['terms']} terms): ‖RᵀR − I‖_F {r['orthogonality_error']:.3g} in {r['worst_module']}; "
            "energy and spectral norm are not kept. Train with use_cayley_neumann=False, or pass "
            "--exact-cayley to write the merged adapter on the exact path")


def module_weight_key(module: str) -> str:
    return module + ".weight"


def oft_dense(adapters, base: Mapping[str, torch.Tensor], cfg: OFTMergeConfig | None = None,
              progress: Progress = None) -> dict[str, torch.Tensor]:
    """A dense checkpoint: every OFT-targeted weight replaced by the merged model's weight.

    ``orthomerge``/``avg``: W0 · R*ᵀ (what peft's ``merge_and_unload`` of the merged adapter
    gives); Euclidean methods: W0 + rule(Δ_i), Δ_i = W0·R_iᵀ − W0 (the dense OFT experts).
    """
    cfg = cfg or OFTMergeConfig()
    ads = [a if isinstance(a, Adapter) else Adapter.open(a) for a in adapters]
    check_compatible(ads)
    if ads[0].peft_type != "OFT":
        raise UserError("--dense supports OFT adapters (BOFT: load the merged adapter with peft instead)")
    if ads[0].other_keys():
        raise UserError("--dense: adapters with extra tensors (biases, modules_to_save) are not supported")
    w = _weights(cfg, len(ads))
    out = {k: base[k] for k in base.keys()}
    mods = ads[0].modules()
    for mod in mods:
        if module_weight_key(mod) not in out:
            raise UserError(f"base checkpoint has no {module_weight_key(mod)} (targeted by the adapters)")

    def delta(a: Adapter, mod: str) -> torch.Tensor:
        W0 = out[module_weight_key(mod)].double()
        return W0 @ oft_rotation(a, mod, None, W0.shape[1]).T - W0

    thr = None
    if cfg.method not in ("orthomerge", "avg"):  # model-scope trim: each expert's deltas, streamed twice
        thr = thresholds(cfg.method, [lambda a=a: (delta(a, m) for m in mods) for a in ads],
                         _density(cfg), cfg.trim_scope)
    merged = {}
    for i, mod in enumerate(mods):
        if progress:
            progress(i + 1, len(mods), mod)
        key = module_weight_key(mod)
        W0 = out[key].double()
        if cfg.method in ("orthomerge", "avg"):
            Q = _merge(torch.stack([oft_skews(a, mod) for a in ads]), w, cfg)
            if cfg.exact_cayley and uses_neumann(ads[0].config, ads[0].legacy):
                R = core.block_diag(core.cayley(-Q, "peft"), W0.shape[1])  # = (I + Q)(I − Q)⁻¹, exact
            else:
                R = oft_rotation(ads[0], mod, Q, W0.shape[1])
            W = W0 @ R.T
        else:
            g = torch.Generator().manual_seed(cfg.seed + i)
            W = W0 + merge_deltas(cfg.method, [delta(a, mod) for a in ads], scale=cfg.scale,
                                  density=cfg.density, weights=w, generator=g, threshold=thr)
        merged[key] = W.to(out[key].dtype)
    out.update(merged)
    return out


def _density(cfg) -> float:
    from icml26_shared.merge import DEFAULT_DENSITY

    rule = getattr(cfg, "residual", None) or cfg.method
    return cfg.density if cfg.density is not None else DEFAULT_DENSITY.get(rule, 1.0)


# --- Orthogonal-Residual Decoupling of non-OFT experts --------------------------------------------

class LoraExpert(Mapping):
    """A LoRA adapter seen as a full checkpoint: W0 + scaling · B A on targeted weights."""

    def __init__(self, ad: Adapter, base: Mapping[str, torch.Tensor]):
        self.ad, self.base = ad, base
        r = int(ad.config.get("r", 8))
        alpha = float(ad.config.get("lora_alpha", r))
        self.scaling = alpha / math.sqrt(r) if ad.config.get("use_rslora") else alpha / r
        if ad.config.get("use_dora") or ad.config.get("rank_pattern") or ad.config.get("alpha_pattern"):
            raise UserError(f"LoRA adapter {ad.path}: DoRA / rank or alpha patterns are not supported")
        self.targets = {module_weight_key(m): m for m in ad.modules()}
        for k in self.targets:
            if k not in base:
                raise UserError(f"LoRA adapter {ad.path} targets {k}, which the base does not have")

    def __getitem__(self, key):
        W0 = self.base[key]
        if key not in self.targets:
            return W0
        mod = self.targets[key]
        A = self.ad.tensors[self.ad.key(mod, ".lora_A.weight")].double()
        B = self.ad.tensors[self.ad.key(mod, ".lora_B.weight")].double()
        return (W0.double() + self.scaling * B @ A).to(W0.dtype)

    def shape(self, key):
        if key in self.targets:
            mod = self.targets[key]
            r_a = self.ad.tensors.shape(self.ad.key(mod, ".lora_A.weight"))
            r_b = self.ad.tensors.shape(self.ad.key(mod, ".lora_B.weight"))
            return (r_b[0], r_a[1])
        return _shape(self.base, key)

    def __iter__(self):
        return iter(self.base.keys())

    def __len__(self):
        return len(self.base.keys())

    def keys(self):
        return self.base.keys()


def orthogonal_residual_merge(base: Mapping[str, torch.Tensor], experts: list[Mapping[str, torch.Tensor]],
                              cfg: DecoupleConfig | None = None, *, layers=None, device: str = "cpu",
                              weights=None, progress: Progress = None, spill_dir=None) -> dict[str, torch.Tensor]:
    """W = W0·R* + λ·rule(E_1..E_T) for every 2-D weight (in ``layers`` when given), fp64 [C].

    Tensors that are not 2-D (norms, biases) are merged by the residual rule on their deltas
    (R = I). With ``cfg.ortho == "none"`` this is exactly the Euclidean rule on all deltas.
    Streams one tensor at a time from lazy ``base`` / ``experts`` mappings. A model-scope TIES /
    magnitude-prune trim needs every residual before the first merge: they are spilled to a
    temporary folder (in ``spill_dir``; disk ≈ T × the model in fp64, memory one tensor's
    residuals) and the thresholds read back in two streaming passes.
    """
    cfg = cfg or DecoupleConfig()
    parts = decoupled(base, experts, cfg, layers=layers, device=device, progress=progress)
    if cfg.trim_scope == "tensor" or cfg.residual not in TRIMMED:
        return {key: merge_residual(part, cfg, weights=weights, index=i) for i, (key, part) in enumerate(parts)}
    import tempfile

    with tempfile.TemporaryDirectory(prefix=".orthomerge-spill-", dir=spill_dir) as tmp:
        spill = _Spill(Path(tmp), len(experts))
        for key, part in parts:
            spill.add(key, part)
        thr = thresholds(cfg.residual, [lambda t=t: spill.residuals(t) for t in range(len(experts))],
                         _density(cfg), cfg.trim_scope)
        return {key: merge_residual(part, cfg, weights=weights, index=i, thresholds=thr)
                for i, (key, part) in enumerate(spill.parts())}


def residual_thresholds(parts, cfg: DecoupleConfig) -> torch.Tensor | None:
    """Model-scope trim thresholds of in-memory ``decoupled`` parts (None: per tensor / no trim)."""
    T = next(len(p[2]) for _, p in parts if p[2] is not None)
    return thresholds(cfg.residual, [[p[2][t] for _, p in parts if p[2] is not None] for t in range(T)],
                      _density(cfg), cfg.trim_scope)


class _Spill:
    """``decoupled``'s parts on disk, one safetensors file per tensor (read back lazily)."""

    def __init__(self, root: Path, T: int):
        self.root, self.T, self.keys = root, T, []

    def add(self, key: str, part) -> None:
        from safetensors.torch import save_file

        dtype, head, E = part
        tensors = {"head": head.contiguous()}
        if E is not None:
            tensors.update({f"e{t}": x.contiguous() for t, x in enumerate(E)})
        save_file(tensors, str(self.root / f"{len(self.keys)}.safetensors"))
        self.keys.append((key, dtype, E is not None))

    def _read(self, i: int, names):
        from safetensors import safe_open

        with safe_open(str(self.root / f"{i}.safetensors"), framework="pt") as f:
            return [f.get_tensor(n) for n in names]

    def residuals(self, t: int):
        for i, (_, _, has) in enumerate(self.keys):
            if has:
                yield self._read(i, [f"e{t}"])[0]

    def parts(self):
        for i, (key, dtype, has) in enumerate(self.keys):
            got = self._read(i, ["head"] + ([f"e{t}" for t in range(self.T)] if has else []))
            yield key, (dtype, got[0], got[1:] if has else None)


def decoupled(base, experts, cfg: DecoupleConfig, *, layers=None, device: str = "cpu", progress: Progress = None):
    """Yield ``(key, (dtype, W0·R* or W0 or a non-float tensor, [E_i] or None))`` per base tensor."""
    keys = list(base.keys())
    for e in experts:  # every check before any work: a mistake never surfaces midway
        missing = [k for k in keys if k not in e]
        if missing:
            raise UserError(f"expert lacks {missing[0]} (and {len(missing) - 1} more) of the base")
        for k in keys:
            if _shape(e, k) != _shape(base, k):
                raise UserError(f"{k}: expert shape {_shape(e, k)} is unlike the base's {_shape(base, k)}")
    for i, key in enumerate(keys):
        if progress:
            progress(i + 1, len(keys), key)
        W0c = base[key]
        Ws = [e[key] for e in experts]
        for W in Ws:
            if tuple(W.shape) != tuple(W0c.shape):
                raise UserError(f"{key}: expert shape {tuple(W.shape)} is unlike the base's {tuple(W0c.shape)}")
        if not W0c.is_floating_point():
            yield key, (W0c.dtype, W0c, None)
            continue
        W0 = W0c.to(device, torch.float64)
        Ws = [W.to(device, torch.float64) for W in Ws]
        if W0.dim() == 2 and cfg.ortho != "none" and (layers is None or key in layers):
            try:
                R, E = core.decouple(W0, Ws, cfg.ortho, magnitude=cfg.magnitude,
                                     rotation_scale=cfg.rotation_scale)
            except core.RotationError as exc:
                raise UserError(f"{key}: {exc}") from None
            head = W0 @ R
        else:
            head, E = W0, [W - W0 for W in Ws]
        yield key, (W0c.dtype, head.cpu(), [x.cpu() for x in E])


def _shape(m, key: str) -> tuple[int, ...]:
    return tuple(m.shape(key)) if hasattr(m, "shape") else tuple(m[key].shape)


def merge_residual(part, cfg: DecoupleConfig, *, weights=None, index: int = 0,
                   thresholds: torch.Tensor | None = None) -> torch.Tensor:
    """W0·R* + λ·rule(E_1..E_T) of one decoupled tensor (``decoupled``'s second item);
    ``thresholds``: the model-scope trim cuts (``residual_thresholds``)."""
    dtype, head, E = part
    if E is None:
        return head
    g = torch.Generator().manual_seed(cfg.seed + index)
    merged = head + merge_deltas(cfg.residual, E, scale=cfg.residual_scale, density=cfg.density,
                                 weights=weights, generator=g, threshold=thresholds)
    if not bool(torch.isfinite(merged).all()):
        raise UserError("the merge produced non-finite values")
    return merged.to(dtype)


def diagnose(tensors: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor] | None = None) -> list[dict]:
    """Per 2-D tensor: hyperspherical energy, spectral norm and, with a base, the base's and the
    part left outside the best rotation, ‖W − W0R‖/‖W − W0‖ (0: a pure rotation of the base)."""
    rows = []
    for key in tensors.keys():
        W = tensors[key]
        if W.dim() != 2 or not W.is_floating_point():
            continue
        W = W.double()
        row = {"module": key, "shape": list(W.shape), "hyperspherical_energy": core.hyperspherical_energy(W),
               "spectral_norm": core.spectral_norm(W)}
        if base is not None and key in base:
            W0 = base[key].double()
            if W0.shape != W.shape:
                raise UserError(f"{key}: shape {tuple(W.shape)} is unlike the base's {tuple(W0.shape)}")
            R = core.procrustes_right(W0, W)
            row["base_hyperspherical_energy"] = core.hyperspherical_energy(W0)
            row["base_spectral_norm"] = core.spectral_norm(W0)
            d = float(torch.linalg.matrix_norm(W - W0))
            row["residual_fraction"] = float(torch.linalg.matrix_norm(W - W0 @ R)) / d if d > 0 else 0.0
        rows.append(row)
    return rows


def diagnose_adapter(ad: Adapter, base: Mapping[str, torch.Tensor] | None = None) -> list[dict]:
    """Per module of an OFT / BOFT adapter: ‖RᵀR − I‖ of the rotation peft applies (the Neumann
    path is only approximately orthogonal), the largest rotation angle, and with a base the
    hyperspherical energy and spectral norm of W0·Rᵀ beside the base's."""
    rows = []
    for mod in ad.modules():
        if ad.peft_type == "OFT":
            key = module_weight_key(mod)
            n = base[key].shape[1] if base is not None and key in base else None
            R = oft_rotation(ad, mod, None, n)
        else:
            R = core.cayley(core.skew(ad.tensors[ad.key(mod, ".boft_R")].double()), "peft")
        row = {"module": mod, "cayley_path": "neumann" if ad.peft_type == "OFT" and uses_neumann(ad.config, ad.legacy)
               else "exact", "orthogonality_error": core.orthogonality_error(R),
               "max_angle": float(core.rotation_angles(R if R.dim() == 2 else R.flatten(0, -3)[0]).max())}
        key = module_weight_key(mod)
        if base is not None and ad.peft_type == "OFT":
            if key not in base:
                raise UserError(f"base has no {key} (targeted by {ad.path})")
            W0 = base[key].double()
            W = W0 @ R.T
            row.update(hyperspherical_energy=core.hyperspherical_energy(W), spectral_norm=core.spectral_norm(W),
                       base_hyperspherical_energy=core.hyperspherical_energy(W0),
                       base_spectral_norm=core.spectral_norm(W0))
        rows.append(row)
    return rows
