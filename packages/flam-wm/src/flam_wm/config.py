"""Hyperparameters: frozen dataclasses, each field citing the paper or marked [R]."""

from __future__ import annotations

from dataclasses import asdict, dataclass

MODELS = ("flam", "lam", "lam-vq")


@dataclass(frozen=True)
class ModelConfig:
    model: str = "flam"          # "flam" (factored, the paper's method), "lam" / "lam-vq" (monolithic) [P §baselines]
    slots: int = 5               # K slots; the paper uses K = 8-16 at 64x64, we use K = E + 1 [R]
    latent_dim: int = 10         # d: total latent-action size, d/K per slot [P]; value [R]
    beta: float = 0.01           # weight of the KL term in L = ||z' - z'_hat||^2 + beta * sum_k KL [P]; value [R]
    size: int = 32               # frame side (SpriteWorld 32x32) [R]
    patch: int = 4               # "patch" tokenizer: z_t = exact 4x4 patches [R]
    tokenizer: str = "patch"     # frozen tokenizer [P: frozen VQ-VAE]: "patch" (exact) or "conv" (learned AE) [R]
    token_grid: int = 8          # "conv": tokens on a grid x grid map (size / 2^n) [R]
    token_channels: int = 8      # "conv": values per token [R]
    token_hidden: int = 16       # "conv": the autoencoder's first conv width [R]
    width: int = 48              # slot / feature width D [R]
    iters: int = 3               # Slot Attention iterations on the first frame [R] (3 as in Locatello et al.)
    iters_carry: int = 1         # iterations on later frames, from the carried slots [R] (as in SAVi)
    temporal: bool = True        # slots carried over time + causal temporal attention [P]; False = ablation
    recon: float = 1.0           # auxiliary slot-reconstruction weight ||z_t - Agg(s_t)||^2 [R]
    recon_all: bool = True       # the reconstruction term covers every frame of the window (0.7), not only the first (0.6's) [R]
    residual: bool = False       # True: z_hat_{t+1} = z_t + Agg(s_hat_{t+1}) - Agg(s_t) (a change decoder) [R]; False: Agg(s_hat_{t+1}) [P]
    pos: str = "learned"         # Slot Attention's position embedding: "learned" table or "grid" (linear map of fixed coordinates) [R]
    pos_keys: bool = False       # position in Slot Attention's keys too (Locatello et al.; 0.3's form) or, default, only in its values: keys from content, so slots bind to entities [R; chosen on dev, README]
    decoder: str = "broadcast"   # FLAM's aggregator: "broadcast" (each slot decoded alone at every token, alpha-composited; 0.7 default) or "mlp" (slot -> every token, 0.6's) [R]
    slot_pos: bool = True        # each slot carries its position (attention-weighted centroid of its tokens, as Invariant Slot Attention), decoded in relative coordinates (0.7) [R]
    seeding: str = "fps"         # Slot Attention's initial slots on a clip's first frame: "fps" (one learned background slot + the K-1 tokens farthest from the frame's mean and from each other, k-means++-style seeding) or "learned" (K learned vectors, 0.6's) [R]
    local_sigma: float = 0.0     # > 0: Slot Attention's object slots attend locally, logits - |c_n - p_k|^2 / (2 sigma^2) around each slot's position (token units; the background slot global; ISA-inspired, 0.9) [R]; 0 = off
    free_bits: float = 0.0       # > 0: each slot's KL (batch mean, nats) is priced only above this floor, beta * mean_k max(KL_k, free_bits) (free bits, Kingma et al. 2016; 0.9.1) [R]; 0 = off
    logvar_init: float = 0.0     # < 0: the IDM's log-variance head starts at this value (its bias; 0.9.3), so early latents are the posterior means plus little noise, not unit noise the FDM learns to ignore [R]; 0 = PyTorch's default init (log-variance ~ 0)
    decoder_hidden: int = 16     # the per-slot compositor's hidden width [R; 16 cost half of 32 on dev at no loss of binding]
    unroll: int = 1              # FDM steps unrolled in the loss (1 = the paper's one-step loss [P]; U > 1: the FDM also trained on its own U-step rollouts, mean of the U terms [R])
    codes: int = 8               # lam-vq codebook size (Genie's latent actions are a small codebook [P]; 8 [R])

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r} (choose from {', '.join(MODELS)})")
        if self.tokenizer not in ("patch", "conv"):
            raise ValueError(f"unknown tokenizer {self.tokenizer!r} (patch or conv)")
        for name in ("slots", "latent_dim", "size", "patch", "width", "iters", "iters_carry", "codes",
                     "token_grid", "token_channels", "token_hidden", "unroll", "decoder_hidden"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.model == "flam" and self.latent_dim % self.slots:
            raise ValueError(f"latent dim {self.latent_dim} is not divisible by the {self.slots} slots")
        if self.tokenizer == "patch" and self.size % self.patch:
            raise ValueError(f"size {self.size} is not a multiple of the patch {self.patch}")
        if self.pos not in ("learned", "grid") or self.decoder not in ("mlp", "broadcast"):
            raise ValueError(f"unknown pos {self.pos!r} / decoder {self.decoder!r}")
        if self.seeding not in ("fps", "learned"):
            raise ValueError(f"unknown seeding {self.seeding!r} (fps or learned)")
        if self.residual and self.unroll > 1:
            raise ValueError("the residual decoder is trained one step ahead only (unroll must be 1)")
        if self.local_sigma and not (self.slot_pos and self.seeding == "fps"):
            raise ValueError("local_sigma needs slot positions and seeded slots (slot_pos=True, seeding='fps')")
        if not (isinstance(self.logvar_init, (int, float)) and -8 <= self.logvar_init <= 0):
            raise ValueError(f"logvar_init must be a number in [-8, 0] (0 = default init), got {self.logvar_init!r}")
        for name in ("beta", "recon", "local_sigma", "free_bits"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v == v and 0 <= v < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    @property
    def slot_latent(self) -> int:
        """Per-slot latent-action size d/K [P] (d for the monolithic model)."""
        return self.latent_dim // self.slots if self.model == "flam" else self.latent_dim

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 400             # optimiser steps, equal for every model [R]
    batch_size: int = 16         # clips per step [R]
    window: int = 6              # frames per training window [R]
    lr: float = 2e-3             # Adam learning rate [R]
    seed: int = 0
    unroll_from: int = 0         # the one-step loss until this step, then ModelConfig.unroll steps (a warm-up: the latents get used first) [R]
    slot_warmup: int = 0         # the loss is the slot reconstruction alone until this step (the factoriser and aggregator learn to render the slots before the dynamics and the KL shape them; as object-centric world models pretrain their slot encoder) (0.9.3) [R]; 0 = off
    kl_warmup: int = 0           # beta ramps linearly from 0 to its value over these first steps (KL annealing, Bowman et al. 2016), so the latents are used before they are priced [R]
    starts: int = 1              # best-of-R starts (0.9.4) [R; standard practice, not the paper's]: R initialisations (candidate 0 = seed's, r > 0 = train.start_seed(seed, r)) each trained start_steps steps on the same batches and noise; the one with the lowest mean loss over its last min(50, start_steps) steps continues to steps; 1 = off
    start_steps: int = 0         # the candidates' steps (0.9.4) [R]; needs 0 < start_steps < steps when starts > 1

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "window"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.window < 2:
            raise ValueError("window must be at least 2 frames")
        if not isinstance(self.kl_warmup, int) or self.kl_warmup < 0:
            raise ValueError(f"kl_warmup must be an integer >= 0, got {self.kl_warmup!r}")
        if not isinstance(self.slot_warmup, int) or self.slot_warmup < 0:
            raise ValueError(f"slot_warmup must be an integer >= 0, got {self.slot_warmup!r}")
        if not isinstance(self.unroll_from, int) or self.unroll_from < 0:
            raise ValueError(f"unroll_from must be an integer >= 0, got {self.unroll_from!r}")
        if not isinstance(self.starts, int) or isinstance(self.starts, bool) or self.starts < 1:
            raise ValueError(f"starts must be a positive integer, got {self.starts!r}")
        if not isinstance(self.start_steps, int) or isinstance(self.start_steps, bool) or self.start_steps < 0:
            raise ValueError(f"start_steps must be an integer >= 0, got {self.start_steps!r}")
        if self.starts > 1 and not 0 < self.start_steps < self.steps:
            raise ValueError(f"starts = {self.starts} needs 0 < start_steps < steps ({self.steps}), "
                             f"got start_steps = {self.start_steps}")
        if not (self.lr == self.lr and 0 < self.lr < 1):
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")
