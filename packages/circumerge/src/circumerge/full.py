"""``reproduce --scale full``: the GPU recipe. It checks its needs first (a CUDA device) and
refuses within seconds, naming them; with a GPU it runs the merge-time / sketch-error sweep at
Llama-3-8B MLP shapes (m = 14336, n = 4096) up to R = T·r = 2048 on the device, and, when
``CIRCUMERGE_ADAPTERS`` names PEFT adapter folders (``:``-separated, same base model), times
merging them in every exact space and the circulant one, with the sketch error beside each time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SWEEP = ((8, 16), (16, 16), (32, 16), (8, 64), (16, 64), (32, 64))  # R = 128 … 2048
NEEDS = ("a CUDA device (torch.cuda.is_available()); optional CIRCUMERGE_ADAPTERS=dir1:dir2:... "
         "(PEFT LoRA folders of one base model, e.g. the KnOTS-suite Llama-3-8B NLI LoRAs)")


def check_needs() -> list[Path]:
    import torch

    from icml26_shared import UserError

    if not torch.cuda.is_available():
        raise UserError(f"the full scale needs {NEEDS}; no CUDA device here "
                        "(run --scale quick on CPU)")
    dirs = [Path(p) for p in os.environ.get("CIRCUMERGE_ADAPTERS", "").split(":") if p]
    missing = [str(d) for d in dirs if not (d / "adapter_model.safetensors").is_file()]
    if missing:
        raise UserError(f"CIRCUMERGE_ADAPTERS: no adapter_model.safetensors in {', '.join(missing)}")
    return dirs


def reproduce_full(out_dir: Path, seed: int):
    import torch

    from icml26_shared import Results

    from .registry import DESCRIPTOR
    from .spaces import SpaceOptions, merge_layer
    from .synthetic import make_factors, relative_error

    dirs = check_needs()
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
    dev = torch.device("cuda")
    m, n = 14336, 4096

    def timed(fn, repeats=3):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2], out

    for T, r in SWEEP:
        As, Bs = make_factors(T, r, m, n, seed=seed)
        As, Bs = [a.to(dev) for a in As], [b.to(dev) for b in Bs]
        exp = f"gpu_timing_{m}x{n}_T{T}_r{r}"
        t_core, ref = timed(lambda As=As, Bs=Bs: merge_layer(As, Bs, space="core", rule="ties", seed=seed))
        for label, opts in (("circulant", SpaceOptions()), ("circulant@none", SpaceOptions(sketch_size="none"))):
            t, out = timed(lambda o=opts, As=As, Bs=Bs: merge_layer(As, Bs, space="circulant", rule="ties", seed=seed, opts=o))
            res.add(exp, f"{label}/ties", "ratio_time_to_core", t / t_core, unit="x", seeds=[seed])
            res.add(exp, f"{label}/ties", "sketch_error_to_core", relative_error(*out, *ref), seeds=[seed])
        res.add(exp, "core/ties", "merge_time_s", t_core, unit="s", seeds=[seed])
    if dirs:
        from .io import PeftAdapter, check_compatible, iter_layers

        adapters = [PeftAdapter.open(d) for d in dirs]
        check_compatible(adapters)
        totals: dict[str, float] = {}
        for i, (_, As, Bs) in enumerate(iter_layers(adapters)):
            As, Bs = [a.to(dev) for a in As], [b.to(dev) for b in Bs]
            for space in ("core", "knots", "circulant"):
                t, _ = timed(lambda s=space, As=As, Bs=Bs, i=i: merge_layer(As, Bs, space=s, rule="ties",
                                                                           layer_index=i), 1)
                totals[space] = totals.get(space, 0.0) + t
        for space, t in totals.items():
            res.add("gpu_user_adapters", f"{space}/ties", "merge_time_s", t, unit="s", seeds=[seed])
    res.notes.append("GPU recipe: synthetic Llama-3-8B MLP shapes on the device; user adapters "
                     "from CIRCUMERGE_ADAPTERS when given.")
    return res
