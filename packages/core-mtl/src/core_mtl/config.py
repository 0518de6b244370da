"""Hyperparameters as frozen dataclasses. Each field cites the authors' code [C]
(``Hope-Rita/CORE-MTL``, ``configs/resnet/1causal_nyu.yaml`` and the trainer), the paper [P], or is
marked [R] (reconstructed for the CPU scale)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

TASK_KINDS = ("segmentation", "depth", "normal", "attributes")


@dataclass(frozen=True)
class TaskSpec:
    """One task of a dataset (``tasks.json``): kind, its folder and, for segmentation/attributes,
    the number of classes."""

    name: str
    kind: str  # one of TASK_KINDS [C: seg / depth / normal heads; CelebA attributes]
    dir: str  # folder under each split, LibMTL layout [C: data_utils/nyu.py]
    classes: int = 0  # segmentation classes (NYUv2 13, Cityscapes 7) or attribute count [C]


#: NYUv2's three tasks when a dataset has no tasks.json [C: LibMTL/MTAN preprocessing]
NYU_TASKS = (TaskSpec("seg", "segmentation", "label", 13), TaskSpec("depth", "depth", "depth"),
             TaskSpec("normal", "normal", "normal"))


@dataclass(frozen=True)
class ModelConfig:
    """The two-stream network. The paper's encoder is a dilated ResNet-50 with 4096-ch F, a
    512-ch z_s and a 256-d z_p [C: models/causal_model.py]; the CPU encoder is a 3-layer CNN [R]."""

    width: int = 12  # first conv width; F has 5*width channels at stride 2 [R]
    dim_s: int = 24  # semantic map channels (paper 512) [C, scaled R]
    dim_p: int = 8  # residual vector size (paper 256) [C, scaled R]
    head_width: int = 12  # hidden width of each task head (paper: DeepLabV3+ ASPP) [R]
    heads_read_shared: bool = False  # heads also read proj(F), as the code does [C]; README: z_s only [P]
    sh_order: int = 2  # 9 SH coefficients per colour channel, 27 in all [C: layers/shading.py]


@dataclass(frozen=True)
class LossWeights:
    """Loss weights of the NYUv2 config [C: configs/resnet/1causal_nyu.yaml]."""

    seg: float = 20.0  # segmentation cross-entropy [C]
    depth: float = 10.0  # masked depth L1 [C]
    normal: float = 10.0  # masked 1 - cos [C]
    attributes: float = 1.0  # attribute BCE [C: 5celeba.yaml]
    edge: float = 0.1  # depth/segmentation edge consistency [C]
    cka: float = 1.0  # lambda_ind, linear CKA(z_s, z_p) [C]
    geom_recon: float = 2.0  # D_g(z_s) -> depth, L1 [C]
    app_recon: float = 15.0  # D_a(z_s, z_p) -> RGB; LPIPS-VGG + 2 L1 in the code [C];
    #                          offline: (1 - SSIM) + 2 L1 [R]
    decomp_recon: float = 2.0  # physics A * S vs image, L1 [C]
    tv_albedo: float = 0.1  # total variation of albedo [C]
    grey_shading: float = 0.001  # shading colour deviation from grey [C]
    cross_cov: float = 0.5  # |cross-covariance(A, N)| [C]
    cfa: float = 1.0  # lambda_cfa, counterfactual task loss [C]
    cfa_cka: float = 0.1  # CKA inside the counterfactual pass [C]


@dataclass(frozen=True)
class TrainConfig:
    """The schedule. The code: AdamW lr 2e-4, wd 1e-4, cosine with 5 warm-up epochs, 100 epochs,
    stage 0 = 5 epochs, counterfactuals from epoch 20, p = 0.5 [C: engine/trainer.py]."""

    method: str = "core"  # core or a baseline name (baselines.METHODS)
    tasks: tuple[str, ...] = ()  # subset of the dataset's tasks; () = all
    epochs: int = 5  # [R] CPU budget (paper 100)
    batch_size: int = 32  # [R] (paper 16 at 288x384)
    lr: float = 3e-3  # [R] from scratch, tiny model, 5 epochs; the code's 2e-4 is for ResNet-50
    weight_decay: float = 1e-4  # [C]
    warmup_frac: float = 0.05  # cosine schedule with linear warm-up, 5 of 100 epochs [C]
    stage0_frac: float = 0.05  # stage 0 (heads frozen) = 5% of training [C: 5 / 100 epochs]
    cfa_start_frac: float = 0.20  # counterfactuals from 20% of training [C: epoch 20 / 100]
    cfa_prob: float = 0.5  # probability of a counterfactual pass per batch [C]
    ind_warmup_frac: float = 0.10  # lambda_ind ramps 0 -> full after stage 0 over 10% of training
    #                                [C: ind_warmup_epochs 10 / 100, engine/trainer.py]
    core_clip: float | None = 10.0  # CORE's gradient clip, max-norm over all parameters
    #                                 [C: engine/trainer.py clip_grad_norm_(max_norm=10.0)]
    physics: bool = True  # SH inverse-rendering prior [C]; --no-physics ablation
    cka: bool = True  # CKA independence penalty [C]; --no-cka ablation
    cfa: bool = True  # counterfactual swaps of z_p [C]; --no-cfa ablation
    conflict_every: int = 8  # measure task-gradient cosines every N steps [R]
    patience: int | None = None  # stop after this many epochs without a dev improvement (None:
    #                              run every epoch); the best-dev epoch is kept either way [R]
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    weights: LossWeights = field(default_factory=LossWeights)

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.batch_size < 2:
            raise ValueError(f"batch size must be >= 2 (CKA and swaps need a batch), got {self.batch_size}")
        if not (self.lr > 0 and self.lr < 1):
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 or None, got {self.patience}")
        if self.core_clip is not None and not self.core_clip > 0:
            raise ValueError(f"core_clip must be > 0 or None, got {self.core_clip}")
        for name in ("stage0_frac", "cfa_start_frac", "cfa_prob", "warmup_frac", "ind_warmup_frac"):
            v = getattr(self, name)
            if not 0 <= v <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {v}")

    def with_(self, **kw) -> TrainConfig:
        return replace(self, **kw)


@dataclass(frozen=True)
class ShiftConfig:
    """ShadedShapes generator [R]: the Colored-Cityscapes / GTA5 / Cityscapes-C analogues."""

    shift: str = "color"  # color | light | corrupt
    tie: float = 0.9  # P(object hue = its class hue) in train/test; test_ood permutes the map [R]
    size: int = 32  # image side [R]
    attributes: int = 0  # K binary attributes (CelebA-like variant), 0 = dense tasks only [R]
