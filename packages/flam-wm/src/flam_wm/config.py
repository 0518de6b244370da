"""Hyperparameters: frozen dataclasses, each field citing the paper or marked [R]."""

from __future__ import annotations

from dataclasses import asdict, dataclass

MODELS = ("flam", "lam", "lam-vq", "lam-token")
IDM_INPUTS = ("absolute", "delta")
TOKEN_IDMS = ("mean", "query", "query-delta")

# options removed in 0.10.0 (rejected on dev, issue 57) and the value that meant "off": a RUN or config
# holding another value is refused (``removed_options``)
REMOVED = {"model": {"pos_keys": False, "residual": False, "decoder": "broadcast", "seeding": "fps",
                     "logvar_init": 0.0},
           "train": {"kl_warmup": 0, "slot_warmup": 0}}


def removed_options(part: str, fields: dict) -> tuple[dict, list[str]]:
    """``fields`` without the removed options of ``part`` ("model" / "train") that hold their off value,
    and the names of those that do not (a RUN or config that used a removed option)."""
    gone = REMOVED[part]
    used = [f"{k}={fields[k]!r}" for k in gone if k in fields and fields[k] != gone[k]]
    return {k: v for k, v in fields.items() if k not in gone}, used


@dataclass(frozen=True)
class ModelConfig:
    model: str = "flam"          # "flam" (factored, the paper's method), "lam" / "lam-vq" (monolithic, one vector per frame), "lam-token" (monolithic latent, per-token transformer dynamics) [P §baselines]
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
    recon_all: bool = True       # the reconstruction term covers every frame of the window, not only the first [R]
    pos: str = "learned"         # Slot Attention's position embedding: "learned" table or "grid" (linear map of fixed coordinates) [R]
    slot_pos: bool = True        # each slot carries its position (attention-weighted centroid of its tokens, as Invariant Slot Attention), decoded in relative coordinates [R]
    local_sigma: float = 0.0     # > 0: Slot Attention's object slots attend locally, logits - |c_n - p_k|^2 / (2 sigma^2) around each slot's position (token units; the background slot global; ISA-inspired, 0.9) [R]; 0 = off
    free_bits: float = 0.0       # > 0: each slot's KL (batch mean, nats) is priced only above this floor, beta * mean_k max(KL_k, free_bits) (free bits, Kingma et al. 2016) [R]; 0 = off
    decoder_hidden: int = 16     # the per-slot compositor's hidden width [R; 16 cost half of 32 on dev at no loss of binding]
    unroll: int = 1              # FDM steps unrolled in the loss (1 = the paper's one-step loss [P]; U > 1: the FDM also trained on its own U-step rollouts, mean of the U terms [R])
    one_latent: bool = False     # flam only: the flam-one-latent arm [R] -- same slots, FDM and compositor, but one latent of size d inferred from all slots together and given to every slot's FDM (the factorisation switched off)
    idm_input: str = "delta"     # flam with slot positions: what the IDM reads of a slot's position -- "delta" (only p_{t+1} - p_t beside the slots' features, so a latent cannot encode where a sprite is; the FDM still gets absolute p_t to place it; the default, chosen on dev: docs/experiments.md) or "absolute" (p_t and p_{t+1}; a RUN written before flam-wm 0.12.0 loads with it) (issue 57 item 0) [R]; ignored where slots carry no position
    token_idm: str = "query-delta"  # lam-token's IDM (issue 57, chosen on dev: docs/experiments.md) [R]: its latent read from a learned query token's output ("query", "query-delta") or the tokens' mean ("mean"), over the tokens of (z_t, z_{t+1}) or of (z_t, z_{t+1} - z_t) ("query-delta", the default: each token's change, the token-level counterpart of FLAM's position change); a RUN written before flam-wm 0.13.0 loads with "mean"
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
        if self.one_latent and self.model != "flam":
            raise ValueError("one_latent is a FLAM arm (model='flam')")
        if self.model == "flam" and not self.one_latent and self.latent_dim % self.slots:
            raise ValueError(f"latent dim {self.latent_dim} is not divisible by the {self.slots} slots")
        if self.tokenizer == "patch" and self.size % self.patch:
            raise ValueError(f"size {self.size} is not a multiple of the patch {self.patch}")
        if self.idm_input not in IDM_INPUTS:
            raise ValueError(f"unknown idm_input {self.idm_input!r} (choose from {', '.join(IDM_INPUTS)})")
        if self.token_idm not in TOKEN_IDMS:
            raise ValueError(f"unknown token_idm {self.token_idm!r} (choose from {', '.join(TOKEN_IDMS)})")
        if self.pos not in ("learned", "grid"):
            raise ValueError(f"unknown pos {self.pos!r} (learned or grid)")
        if self.local_sigma and not self.slot_pos:
            raise ValueError("local_sigma needs slot positions (slot_pos=True)")
        for name in ("beta", "recon", "local_sigma", "free_bits"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v == v and 0 <= v < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    @property
    def idm_delta(self) -> bool:
        """Whether the IDM reads each slot's position change instead of its absolute positions (``idm_input``)."""
        return self.idm_input == "delta" and self.model == "flam" and self.slot_pos

    @property
    def slot_latent(self) -> int:
        """Per-slot latent-action size d/K [P] (d for the monolithic models and flam-one-latent)."""
        return self.latent_dim // self.slots if self.model == "flam" and not self.one_latent else self.latent_dim

    @property
    def latent_slots(self) -> int:
        """How many latents a transition has: K for FLAM, 1 for the monolithic models and flam-one-latent."""
        return self.slots if self.model == "flam" and not self.one_latent else 1

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
    starts: int = 1              # best-of-R starts [R; standard practice, not the paper's]: R initialisations (candidate 0 = seed's, r > 0 = train.start_seed(seed, r)) each trained start_steps steps on the same batches and noise; the one whose latents remove the largest share of its one-step error (train.start_gap, frames only) continues to steps; 1 = off
    start_steps: int = 0         # the candidates' steps [R]; needs 0 < start_steps < steps when starts > 1
    start_floor: float = 0.0     # a best start under this relative latent-use gap is replaced by one more candidate ... [R]
    start_max: int = 0           # ... while fewer than start_max candidates have run (0 or <= starts: no replacement) [R]

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "window"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.window < 2:
            raise ValueError("window must be at least 2 frames")
        if not isinstance(self.unroll_from, int) or self.unroll_from < 0:
            raise ValueError(f"unroll_from must be an integer >= 0, got {self.unroll_from!r}")
        if not isinstance(self.starts, int) or isinstance(self.starts, bool) or self.starts < 1:
            raise ValueError(f"starts must be a positive integer, got {self.starts!r}")
        if not isinstance(self.start_steps, int) or isinstance(self.start_steps, bool) or self.start_steps < 0:
            raise ValueError(f"start_steps must be an integer >= 0, got {self.start_steps!r}")
        if self.starts > 1 and not 0 < self.start_steps < self.steps:
            raise ValueError(f"starts = {self.starts} needs 0 < start_steps < steps ({self.steps}), "
                             f"got start_steps = {self.start_steps}")
        if not isinstance(self.start_max, int) or isinstance(self.start_max, bool) or self.start_max < 0:
            raise ValueError(f"start_max must be an integer >= 0, got {self.start_max!r}")
        if not (isinstance(self.start_floor, (int, float)) and self.start_floor == self.start_floor
                and -1 <= self.start_floor < 1):
            raise ValueError(f"start_floor must be a share in [-1, 1), got {self.start_floor!r}")
        if not (self.lr == self.lr and 0 < self.lr < 1):
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")
