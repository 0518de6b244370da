"""peft's own ``add_weighted_adapter`` as a baseline row [C] (the tool users compare against).

The T adapters are loaded into a one-layer ``PeftModel`` (``prepare``, not timed) and merged by
peft itself at its best for each rule: TA by ``cat`` (the factors concatenated, A_t scaled by
w_t: exact, no SVD, rank Σ r_t); the non-linear rules by the ``*_svd`` combination types (dense
ΔW_t, peft's rule, one SVD of the m×n result, ``svd_full_matrices=False``), output rank
``svd_rank = Σ r_t``.
peft draws DARE's masks from torch's global generator: it is seeded from our seed inside
``torch.random.fork_rng`` so that the caller's random state is left alone.
Needs the ``peft`` extra (``pip install circumerge[peft]``).
"""

from __future__ import annotations

import torch

#: our rule name -> peft's combination_type
COMBINATION = {"ta": "cat", "ties": "ties_svd", "dare_linear": "dare_linear_svd",
               "dare_ties": "dare_ties_svd", "magnitude_prune": "magnitude_prune_svd"}


def _require_peft():
    try:
        import peft  # noqa: F401
    except ImportError:  # pragma: no cover - the extra is installed in the workspace
        from icml26_shared import UserError

        raise UserError("the peft space needs peft: pip install 'circumerge[peft]'") from None


class PeftMerger:
    """A one-layer PeftModel holding the T adapters (ΔW_t = B_t A_t, scaling 1)."""

    def __init__(self, As, Bs):
        _require_peft()
        import logging
        import warnings

        import torch.nn as nn
        from peft import LoraConfig, get_peft_model

        logging.getLogger("peft").setLevel(logging.ERROR)
        m, n = Bs[0].shape[0], As[0].shape[1]
        self.dtype = As[0].dtype

        class One(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(n, m, bias=False, dtype=As[0].dtype)

        self.names = [f"t{t}" for t in range(len(As))]
        self.rank = sum(a.shape[0] for a in As)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = None
            for name, A, B in zip(self.names, As, Bs, strict=True):
                cfg = LoraConfig(r=A.shape[0], lora_alpha=A.shape[0], target_modules=["lin"],
                                 init_lora_weights=False)
                if model is None:
                    model = get_peft_model(One(), cfg, adapter_name=name)
                else:
                    model.add_adapter(name, cfg)
                lin = model.base_model.model.lin
                with torch.no_grad():
                    lin.lora_A[name].weight.copy_(A)
                    lin.lora_B[name].weight.copy_(B)
        self.model = model

    def merge(self, rule: str, weights, *, density: float | None = None, seed: int = 0):
        """(A*, B*) of peft's merge; ``rule`` one of ``COMBINATION``."""
        import warnings

        from icml26_shared.merge import DEFAULT_DENSITY

        if rule not in COMBINATION:
            raise ValueError(f"peft has no combination type for rule {rule!r} "
                             f"(it has: {', '.join(COMBINATION)})")
        w = [float(x) for x in (torch.ones(len(self.names)) if weights is None else weights)]
        dens = density if density is not None else DEFAULT_DENSITY.get(rule, 1.0)
        if rule == "ta":  # cat: exact and factored, no SVD (svd_* arguments do not apply)
            kwargs = {}
        else:
            kwargs = {"density": dens, "svd_rank": self.rank, "svd_full_matrices": False}
        with torch.random.fork_rng(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(int(seed))
            self.model.add_weighted_adapter(self.names, w, "merged", combination_type=COMBINATION[rule],
                                            **kwargs)
        lin = self.model.base_model.model.lin
        A = lin.lora_A["merged"].weight.detach().clone()
        B = (lin.lora_B["merged"].weight * lin.scaling["merged"]).detach().clone()
        self.model.delete_adapter("merged")
        return A.to(self.dtype), B.to(self.dtype)
