"""Hyperparameters: frozen dataclasses, each field citing the paper / authors' code or marked [R]."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("single", "base_text", "base_image", "icc")  # [C] steer_qwen_search_scale.py
ANSWER_MODES = ("letter", "letter-logprob", "option-logprob")  # letter = [C]; the log-prob modes [R]
POSITIONS = ("all", "generated", "image_tokens", "text_tokens", "context")  # [R] (steering-vectors #21/#50)
#: where directions are fitted: the last prompt position [C] pca.py, or the mean over a position set [R]
STATE_AT = ("last", "image_tokens", "text_tokens", "context")
TOY_ARCHS = ("early", "late")  # [R] where the toy may decide its answer source (ToyConfig.arch)
DIRECTIONS = ("diffmean", "pca", "probe", "random", "permuted")  # diffmean = [C] pca.py centroid arrows; rest [R]

#: the authors' prompt pieces [C] (steer_qwen_search_scale.py / prompt.py)
CONTEXT_PREFIX = "Text context: "
ANSWER_INSTRUCTION = "Answer the question by selecting the correct answer A or B."
#: instruction wordings for ``icc`` [C] prompt.py (first wording of each direction)
FOLLOW = {
    "vision": "If the text context and the image conflict, follow the image.",
    "text": "If the text context and the image conflict, follow the text context.",
}


@dataclass(frozen=True)
class ToyConfig:
    """The in-process toy VLM (all [R]: design note section 6.1 (A))."""

    #: fraction of text sources the toy is trained to distrust (its vision preference) [R]
    vision_preference: float = 0.5
    n_sources: int = 10  # [R] text-source tokens; round(P * n_sources) of them are "unreliable"
    d_model: int = 48  # [R] (design note 6.1 suggests 64; 48 fits the 1-minute budget)
    n_layers: int = 4  # [R] design note 6.1: 4 layers
    n_heads: int = 4  # [R]
    steps: int = 600  # [R] <= 1 minute on 2 shared cores (issue 27)
    batch: int = 64  # [R]
    lr: float = 3e-3  # [R]
    #: training-mix shares of single / base_image / base_text / icc prompts [R]
    mix: tuple[float, float, float, float] = (0.4, 0.2, 0.2, 0.2)
    #: "early": every layer attends causally over the whole prompt (0.1-0.2.2; the toy settles its
    #: source trust at the context tokens in layers 0-1). "late" [R]: layers before the last two
    #: attend only within their segment (image / context / instruction / options), the next-to-last
    #: layer gathers every position by learned positional (content-blind) weights, and the last layer
    #: reads with content queries against positional keys, so the answer source is chosen at the
    #: answer position in the last layer, by a feature of its residual stream
    arch: str = "early"

    def __post_init__(self) -> None:
        if not 0.0 <= self.vision_preference <= 1.0:
            raise ValueError(f"vision preference must lie in [0, 1], got {self.vision_preference}")
        if self.steps < 1 or self.batch < 1 or self.n_layers < 1:
            raise ValueError("steps, batch and n_layers must be positive")
        if self.arch not in TOY_ARCHS:
            raise ValueError(f"toy arch must be one of {TOY_ARCHS}, got {self.arch!r}")
        if self.arch == "late" and self.n_layers < 3:
            raise ValueError("the late toy needs at least 3 layers (segment, gather, decide)")


@dataclass(frozen=True)
class SteerConfig:
    """Representation steering (RepE-style, reconstructed [R]: design note section 3)."""

    #: layers the hook adds to; Qwen2.5-VL-7B uses 20-23 [C] Rebuttal_Update logit lens
    layers: tuple[int, ...] = (2,)
    #: alpha grid; h <- h + alpha * v_hat * ||h|| (alpha > 0 toward vision) [R]
    alphas: tuple[float, ...] = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0)
    direction: str = "diffmean"  # [C] centroid difference of follow-image vs follow-text
    positions: str = "all"  # [R]
    adaptive: str | None = None  # None = uniform alpha; "amps" = per-instance scale [R] (AMPS 2602.12533)

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
