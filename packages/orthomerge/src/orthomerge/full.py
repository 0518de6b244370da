"""``reproduce --scale full``: the GPU recipe on user-supplied models [R].

It checks its needs within seconds (a CUDA device; ORTHOMERGE_BASE and ORTHOMERGE_OFT_ADAPTERS
and/or ORTHOMERGE_EXPERTS) and raises ``UserError`` naming what is missing. With them, it merges
the OFT adapters (OrthoMerge and avg) and the experts (TIES ± OrthoMerge-C, TA ± OrthoMerge-G) on
the GPU and writes the merged models under ``out_dir`` for lm-eval-harness, which you run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from icml26_shared import Results, UserError

from .registry import DESCRIPTOR


def _need() -> tuple[Path, list[Path], list[Path]]:
    import torch

    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA device")
    base = os.environ.get("ORTHOMERGE_BASE")
    oft, exp = os.environ.get("ORTHOMERGE_OFT_ADAPTERS"), os.environ.get("ORTHOMERGE_EXPERTS")
    if not base:
        missing.append("ORTHOMERGE_BASE (a Hugging Face base model folder)")
    if not (oft or exp):
        missing.append("ORTHOMERGE_OFT_ADAPTERS and/or ORTHOMERGE_EXPERTS (folders of adapter / checkpoint folders)")
    if missing:
        raise UserError("the full scale is the GPU recipe on your own models; missing: " + "; ".join(missing))
    dirs = []
    for v in (oft, exp):
        p = Path(v) if v else None
        if p is not None and not p.is_dir():
            raise UserError(f"{p} is not a directory")
        dirs.append(sorted(d for d in p.iterdir() if d.is_dir()) if p else [])
    if not Path(base).is_dir():
        raise UserError(f"ORTHOMERGE_BASE {base} is not a directory")
    return Path(base), dirs[0], dirs[1]


def reproduce_full(out_dir: Path, seed: int) -> Results:
    base_dir, oft_dirs, exp_dirs = _need()
    from .config import DecoupleConfig, OFTMergeConfig
    from .io import Adapter, Tensors, write_adapter, write_checkpoint
    from .merging import merge_oft_adapters, orthogonal_residual_merge

    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="full", seed=seed)
    if oft_dirs:
        for method in ("orthomerge", "avg"):
            t0 = time.perf_counter()
            tensors, config = merge_oft_adapters([Adapter.open(d) for d in oft_dirs], OFTMergeConfig(method=method))
            write_adapter(out_dir / f"oft-{method}", config, tensors, force=True)
            res.add("oft_merge", method, "merge_seconds", time.perf_counter() - t0, unit="s")
    if exp_dirs:
        base = Tensors.open(base_dir)
        experts = [Tensors.open(d) for d in exp_dirs]
        for ortho, rule in (("none", "ties"), ("conflict", "ties"), ("none", "ta"), ("general", "ta")):
            t0 = time.perf_counter()
            merged = orthogonal_residual_merge(base, experts, DecoupleConfig(ortho=ortho, residual=rule,
                                                                              seed=seed), device="cuda",
                                               spill_dir=out_dir)  # model-scope TIES: residuals on disk
            write_checkpoint(out_dir / f"full-{ortho}-{rule}", merged, base_dir, force=True)
            res.add("full_merge", f"{ortho}/{rule}", "merge_seconds", time.perf_counter() - t0, unit="s")
    res.notes.append("Merged models written under this folder; evaluate them with lm-eval-harness "
                     "(MATH500, HumanEval+, ScienceQA, CommonsenseQA, Social-IQA; MergeBench tasks).")
    return res
