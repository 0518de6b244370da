"""Hyperparameters as frozen dataclasses. The paper's body was not available: every search
setting below is reconstructed [R] unless it cites the authors' artifacts [C]."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchConfig:
    #: population size N [R]; chosen on the train instances by ``mths.tuning`` among {4, 6}
    #: (the artifacts' evolved TSP solver uses 8 internally [C])
    pop: int = 4
    #: probability that a lower-level step is knowledge transfer from another task's elite [R];
    #: chosen on train by ``mths.tuning`` among {0.4, 0.8}
    p_transfer: float = 0.8
    #: probability that an upper-level step is crossover (else mutation) [R]
    p_crossover: float = 0.5
    #: share of non-transfer lower-level steps that rewrite the key function (else refinement) [R]
    p_keyfn: float = 0.3
    #: one generation = this sequence of steps, repeated until the call budget is spent [R];
    #: chosen on train by ``mths.tuning`` between (upper, lower x 3) and (upper, lower)
    #: (an upper step costs 1 + T calls: new metaheuristic + instantiation per task)
    schedule: tuple[str, ...] = ("upper", "lower", "lower", "lower")
    #: tournament size for parent selection [R]
    tournament: int = 2
    #: EoH's operator order per generation (Liu et al. 2024: E1, E2, M1, M2, M3, each once) [C of EoH]
    eoh_schedule: tuple[str, ...] = ("e1", "e2", "m1", "m2", "m3")
    #: EoH's population size (EoH's own setting, tuned on train like MTHS's: mths.tuning) [R]
    eoh_pop: int = 4
    #: parents for E1 / E2 / crossover [R; EoH uses 2]
    n_parents: int = 2


@dataclass(frozen=True)
class ScaleConfig:
    """One reproduction scale. quick follows issue 19: 4 train instances per task (TSP n=60,
    CVRP n=30, flow shop 20x5) at 0.2 s, 60 calls, 3 seeds; 8 held-out per task at 0.5 s.
    ``ortools``: run the external solvers (OR-Tools GLS, LKH) beside the classics."""

    calls: int = 60
    seeds: int = 3
    train_time: float = 0.2           # CPU s per train instance (issue 19)
    train_steps: int = 12             # main-loop iterations per train instance [R]
    test_time: float = 0.5            # CPU s per held-out instance (issue 19)
    test_steps: int = 30              # [R]
    workers: int = 2
    tasks: tuple[str, ...] = ("tsp", "cvrp", "fssp")
    instance_set: str = "quick"
    ortools: bool = True
    smollm2_calls: int = 3            # real SmolLM2-135M calls in quick: lower-level steps of a small search
    #                                   from a grammar-initialised population (mths.llmrow) [R]
    smollm2_tokens: int = 160         # new tokens per SmolLM2 call (greedy; stops at the closing fence) [R]


SCALES = {
    "smoke": ScaleConfig(calls=8, seeds=1, train_time=0.5, train_steps=3, test_time=0.5, test_steps=3,
                         workers=2, tasks=("tsp",), instance_set="smoke", ortools=False, smollm2_calls=0),
    "quick": ScaleConfig(),
}
