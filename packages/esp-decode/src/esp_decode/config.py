"""Hyperparameters: frozen dataclasses, each field citing the paper or marked [R]. The defaults of
the ESP, PLD, LADE and STAND sections are ``esp-decode tune``'s choice on SmolLM2-135M-Instruct
(``tuned_smollm2.json``, shipped beside this file; ``tests/test_defaults.py`` keeps them equal)."""

from __future__ import annotations

from dataclasses import dataclass

MASK_INITS = ("prompt_mean", "context_mean", "vocab_mean", "learned", "pad")


@dataclass(frozen=True)
class ESPConfig:
    #: mask tokens appended per host; mask j predicts the token j + 1 steps ahead [P] (count [R])
    num_masks: int = 4
    #: top-K kept per mask level [P: "Top-K candidates"]; the values are tune's SmolLM2 choice [D]
    topk: tuple[int, ...] = (16, 4, 2, 2)
    #: node budget of the pruned tree [P: "pruning"]; the value is tune's SmolLM2 choice [D]
    max_nodes: int = 48
    #: mask embedding [P: the prompt-token mean, "prompt_mean", is the paper's default]; the variants
    #: are [R] and the default here is tune's SmolLM2 choice [D]; "pad" (the pad
    #: token's embedding: same tree and items, no embedding-space probe) is the ``esp-nullmask`` arm
    mask_init: str = "vocab_mean"
    #: which nodes carry masks: "all" (every node, so any accepted node seeds the next tree),
    #: "top" (the root and the nodes of the tree's best-scoring path: the design note's cheap
    #: "top-L paths" variant with L = 1) or "root" (only the root; the next tree then comes from
    #: the root's deeper masks) [R]
    attach: str = "all"
    #: "tree" (the paper's) or "chain" (the top-1 chain ablation) [R]
    shape: str = "tree"

    def __post_init__(self) -> None:
        if self.num_masks < 0:
            raise ValueError(f"num_masks must be >= 0, got {self.num_masks}")
        if self.num_masks and (not self.topk or any(int(k) < 1 for k in self.topk)):
            raise ValueError(f"topk must be positive integers, got {self.topk}")
        if self.max_nodes < 0:
            raise ValueError(f"max_nodes must be >= 0, got {self.max_nodes}")
        if self.mask_init not in MASK_INITS:
            raise ValueError(f"unknown mask_init {self.mask_init!r} (choose from {', '.join(MASK_INITS)})")
        if self.attach not in ("all", "top", "root"):
            raise ValueError(f"attach must be 'all', 'top' or 'root', got {self.attach!r}")
        if self.shape not in ("tree", "chain"):
            raise ValueError(f"shape must be 'tree' or 'chain', got {self.shape!r}")


@dataclass(frozen=True)
class PLDConfig:
    #: tokens proposed after a match (transformers' prompt_lookup_num_tokens default 10) [C]
    num_pred: int = 10
    #: longest n-gram matched (transformers' max_matching_ngram_size default 2) [C]
    max_ngram: int = 2
    #: distinct matches merged into one tree ("several matches at once", llama.cpp PR #4484) [R]
    max_matches: int = 4
    #: node budget [R]
    max_nodes: int = 48


@dataclass(frozen=True)
class LADEConfig:
    """Lookahead decoding's 2-D window and n-gram pool (Fu et al. 2024, ``hao-ai-lab/LookaheadDecoding``,
    ``jacobi_greedy_search_multilevel``); the defaults are its README's example [C]."""

    #: n-gram size N (LADE's LEVEL): the window holds N - 1 levels [C]
    ngram: int = 5
    #: window W (LADE's WINDOW_SIZE): columns of the window [C]
    window: int = 7
    #: guess-set size G (LADE's GUESS_SET_SIZE): n-grams kept per key (LRU) and verified per call [C]
    guesses: int = 7
    #: node budget of the merged guesses (G x (N - 1) = 28 at the defaults, so no cut) [R]
    max_nodes: int = 64
    #: seed the pool with the prompt's own n-grams (LADE's POOL_FROM_PROMPT, off by default) [C]
    pool_from_prompt: bool = False

    def __post_init__(self) -> None:
        if self.ngram < 3:
            raise ValueError(f"lade ngram must be >= 3 (LADE's LEVEL), got {self.ngram}")
        if self.window < 1 or self.guesses < 0 or self.max_nodes < 0:
            raise ValueError(f"lade window must be >= 1 and guesses, max_nodes >= 0, got "
                             f"{self.window}, {self.guesses}, {self.max_nodes}")


@dataclass(frozen=True)
class STANDConfig:
    #: candidates stored per context from the verifier's logits (STAND: logit n-gram memory) [P]
    store_topk: int = 4
    #: branching per level when drafting (deterministic top-K in greedy mode) [R]
    topk: tuple[int, ...] = (4, 2, 2, 1, 1, 1)
    #: node budget [R]
    max_nodes: int = 48


@dataclass(frozen=True)
class Eagle2Config:
    """EAGLE-2's dynamic tree (Li et al. 2024, arXiv 2406.16858), defaults from the EAGLE repository's
    ``EaModel.from_pretrained`` (``depth=5, top_k=10, total_token=60``) [C]."""

    #: levels of draft tokens under the root: the repository's ``depth=5`` expansion steps after the
    #: first level give 6 levels [C]
    depth: int = 6
    #: nodes expanded per level (by path score), and children drafted per expanded node [C]
    top_k: int = 10
    #: nodes kept after the rerank; the repository's ``total_token=60`` counts the root, so 59 [C]
    max_nodes: int = 59

    def __post_init__(self) -> None:
        for name in ("depth", "top_k", "max_nodes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"eagle2 {name} must be >= 1, got {getattr(self, name)}")
