"""Hyperparameters as frozen dataclasses; each field cites the paper / summaries or says [R].

Markings: [P] the paper's abstract, [S] secondary summaries of the paper, [R] reconstructed here
(the authors' code could not be read). The CLI's ``gcib train`` options map onto these fields and
the defaults are the ``quick`` reproduction's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

METHODS = ("gcib", "lightgcn", "lightgcn-merged", "lightgcn-aux", "mbgcn", "cml", "random-prune")
MASKS = ("learned", "ones", "random")
KERNELS = ("linear", "rbf")


@dataclass(frozen=True)
class TrainConfig:
    method: str = "gcib"
    """gcib [P]; lightgcn (target only), lightgcn-merged, mbgcn (MBGCN-lite), cml (CML-lite) are
    the baselines [S]; lightgcn-aux (auxiliary behaviours only, the pilot study's first arm) [S]; random-prune is the mechanism ablation (random mask at GCIB's keep rate) [R]."""
    dim: int = 64
    """Embedding dimension d [S] (LightGCN's usual 64)."""
    layers: int = 3
    """LightGCN layers L (2-3) [S]; the output is the mean of layers 0..L [S]."""
    epochs: int = 150
    """Epoch budget over the target (BPR) edges; the best epoch is picked on the valid item [R]
    (issue 60: converged LightGCN on ml-100k peaks near epoch 67 at lr 1e-2, batch 8192)."""
    batch_size: int = 2048
    """BPR triples per step [R] (issue 60: GCIB's valid-chosen point of the lr x batch grid on
    ml-100k, with lr 1e-2; 8192 until 0.1.3)."""
    lr: float = 1e-2
    """Adam learning rate [R]."""
    reg: float = 1e-4
    """λ₃ ‖Θ‖² on the batch's initial embeddings [S] (LightGCN-style L2)."""
    gib_weight: float = 0.1
    """λ₁ of the GIB loss [P objective, S HSIC surrogate; value R]; 0 = the no-GIB ablation."""
    gib_target_weight: float = 1.0
    """λ_t in L_GIB = nHSIC(Ẑ_b, Z_b) − λ_t·nHSIC(Ẑ_b, Z_tgt) [R]."""
    cl_weight: float = 0.05
    """λ₂ of the cross-behaviour InfoNCE [P contrast, S InfoNCE; value R]; 0 = no contrast."""
    cl_temp: float = 0.2
    """InfoNCE temperature (0.1-0.5) [R]."""
    mask_temp: float = 0.5
    """Gumbel-sigmoid temperature of the edge mask in training (0.5-1) [R]."""
    keep_init: float = 0.9
    """Initial keep probability of every auxiliary edge (the scorer's bias) [R]."""
    scorer_init: float = 4.0
    """Initial weight on the cosine term of the edge scorer (0 = a random start) [R]."""
    train_scorer: bool = True
    """False = the ``cosine-prior`` arm: the scorer frozen at keep = σ(scorer_init·cos(z_u, z_i) +
    logit(keep_init)) (its z_u, z_i weights zero), so only the prior prunes edges [R]."""
    keep_reg: float = 0.0
    """Weight of an optional expected-keep-rate regulariser (mean keep probability) [R]."""
    hsic_kernel: str = "linear"
    """HSIC kernel, linear or rbf (median heuristic) [S: HSIC; kernel R]."""
    hsic_nodes: int = 256
    """Nodes sampled per step for the HSIC terms [R]."""
    patience: int = 20
    """Early stopping: epochs without a better valid HR@10 [R]."""
    random_keep: tuple[float, ...] = ()
    """random-prune only: keep rate per auxiliary behaviour (GCIB's test-time rates) [R]."""
    device: str = "cpu"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r} (choose from {', '.join(METHODS)})")
        if self.hsic_kernel not in KERNELS:
            raise ValueError(f"unknown HSIC kernel {self.hsic_kernel!r} (linear or rbf)")
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{f.name.replace('_', '-')} must be a finite number, got {v}")
        for name in ("dim", "epochs", "batch_size", "hsic_nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.layers < 0:
            raise ValueError(f"layers must be >= 0, got {self.layers}")
        for name in ("lr", "mask_temp", "cl_temp"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("reg", "gib_weight", "gib_target_weight", "cl_weight", "keep_reg"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.keep_init < 1:
            raise ValueError(f"keep-init must lie in (0, 1), got {self.keep_init}")
        if any(not 0 <= k <= 1 for k in self.random_keep):
            raise ValueError("random-keep rates must lie in [0, 1]")

    @property
    def mask(self) -> str:
        """How auxiliary graphs are masked: learned (GCIB), random (ablation) or ones (no pruning)."""
        return {"gcib": "learned", "random-prune": "random"}.get(self.method, "ones")

    @property
    def graphs(self) -> str:
        """target (LightGCN), merged (one graph of all behaviours), aux (one graph of the auxiliary
        behaviours, which are also its BPR positives) or per-behaviour encoders."""
        return {"lightgcn": "target", "lightgcn-merged": "merged", "lightgcn-aux": "aux"}.get(self.method, "per-behaviour")
