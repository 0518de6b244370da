"""The component grammar behind the offline ``grammar`` LLM [R] (design note section 6.1).

A metaheuristic genome holds task-agnostic choices (initialisation, improvement strategy,
perturbation style and strength, acceptance, operator credit, polishing); a task program's CONFIG
adds that task's constructor, improvement operators, perturbations and key function. Texts and
programs carry their genome on one machine-readable line (``GENOME:`` / ``CONFIG =``) so the
operator can read its parents back from the prompt, exactly as an LLM would read their source.
"""

from __future__ import annotations

import ast
import json
import re

import numpy as np

from icml26_shared import UserError

from .components import bpp, cvrp, fssp, tsp
from .tasks import get_task

PROBLEMS = {"tsp": tsp.TSP, "cvrp": cvrp.CVRP, "fssp": fssp.FSSP, "bpp": bpp.BPP}

MH_SPACE: dict[str, tuple] = {
    "init": ("greedy", "randomized", "multi_start"),
    "pool": (1, 2, 3),
    "improve": ("first", "best"),
    "breadth": ("single", "all"),
    "style": ("random", "local", "mixed"),
    "strength": (1, 2, 3, 4, 6),
    "accept": ("better", "threshold", "annealing", "restart"),
    "temp": (0.002, 0.005, 0.01, 0.02, 0.05),
    "credit": ("uniform", "adaptive"),
    "polish": (False, True),
    "restart_after": (5, 10, 20),
}
PHASES = {"initialisation": ("init", "pool"),
          "main_loop": ("improve", "breadth", "style", "strength", "accept", "temp", "credit", "restart_after"),
          "post_processing": ("polish",)}
#: perturbation style -> each task's perturbations (the analogue table used by transfer)
STYLE = {
    "tsp": {"random": ["double_bridge"], "local": ["ruin_recreate", "segment_reverse"]},
    "cvrp": {"random": ["ruin_random"], "local": ["ruin_cluster"]},
    "fssp": {"random": ["swap_random"], "local": ["destruct"]},
    "bpp": {"random": ["repack"], "local": ["repack"]},
}
NAMES = ("Adaptive", "Cooperative", "Hierarchical", "Consensus-driven", "Memetic", "Stochastic")
NOUNS = ("Substructure Search", "Critic Ensemble", "Motif-Consensus Optimization", "Negotiation Search")


def random_mh(rng) -> dict:
    return {k: v[int(rng.integers(len(v)))] for k, v in MH_SPACE.items()}


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def instantiate(task: str, mh: dict, rng, parent: dict | None = None) -> dict:
    """A task CONFIG that follows the metaheuristic; task-specific choices are drawn (or kept
    from the parent program)."""
    P = PROBLEMS[task]
    cfg = {k: mh[k] for k in MH_SPACE if k in mh}
    if parent:
        cfg.update({k: parent[k] for k in ("construct", "key", "ops") if k in parent})
    else:
        cfg["construct"] = _pick(rng, P.CONSTRUCTS[:2]) if rng.random() < 0.8 else _pick(rng, P.CONSTRUCTS)
        cfg["key"] = _pick(rng, P.KEYS)
        cfg["ops"] = [_pick(rng, P.OPS)]
    cfg["ops"] = list(P.OPS) if mh.get("breadth") == "all" else cfg["ops"][:1]
    style = mh.get("style", "random")
    st = STYLE[task]
    cfg["perturbs"] = sorted(set(st["random"] + st["local"])) if style == "mixed" else list(st[style])
    return cfg


def crossover_mh(a: dict, b: dict, rng) -> dict:
    """Splice the phases of two parents (each phase from one parent)."""
    out = dict(a)
    for keys in PHASES.values():
        if rng.random() < 0.5:
            out.update({k: b[k] for k in keys if k in b})
    return out


def mutate_mh(mh: dict, rng) -> dict:
    out = dict(mh)
    k = _pick(rng, list(MH_SPACE))
    choices = [v for v in MH_SPACE[k] if v != mh.get(k)]
    out[k] = _pick(rng, choices)
    return out


def refine(task: str, cfg: dict, mh: dict, rng) -> dict:
    """Follow the metaheuristic better (re-sync its choices) and tune one task-level choice."""
    P = PROBLEMS[task]
    out = instantiate(task, mh, rng, parent=cfg)
    what = _pick(rng, ("construct", "strength", "temp", "op"))
    if what == "construct":
        out["construct"] = _pick(rng, [c for c in P.CONSTRUCTS if c != cfg.get("construct")])
    elif what == "strength":
        out["strength"] = max(1, int(out.get("strength", 2)) + _pick(rng, (-1, 1)))
    elif what == "temp":
        out["temp"] = float(out.get("temp", 0.01)) * _pick(rng, (0.5, 2.0))
    else:
        out["ops"] = [_pick(rng, P.OPS)] if len(out["ops"]) > 1 else list(P.OPS)
    return out


def rewrite_key(task: str, cfg: dict, rng) -> dict:
    keys = [k for k in PROBLEMS[task].KEYS if k != cfg.get("key")]
    return {**cfg, "key": _pick(rng, keys)}


def transfer(task: str, cfg: dict, donor_task: str, donor: dict, rng) -> dict:
    """Transplant task-agnostic components of another task's elite (via the analogue table)."""
    out = dict(cfg)
    genes = ["accept", "temp", "strength", "improve", "credit", "pool", "init", "polish", "restart_after"]
    differ = [g for g in genes if g in donor and donor[g] != out.get(g)]  # a gene both share moves nothing
    take = [g for g in differ if rng.random() < 0.6]
    if differ and not take:
        take = [differ[int(rng.integers(len(differ)))]]
    for g in take:
        out[g] = donor[g]
    P = PROBLEMS[task]
    if rng.random() < 0.5:  # perturbation style and improvement breadth, mapped across tasks
        dst = STYLE[donor_task]
        styles = [s for s, ps in dst.items() if set(ps) & set(donor.get("perturbs", []))]
        st = STYLE[task]
        out["perturbs"] = sorted({p for s in styles for p in st[s]}) or out.get("perturbs", [])
        out["ops"] = list(P.OPS) if len(donor.get("ops", [])) > 1 else out.get("ops", [P.OPS[0]])[:1]
    return out


def random_config(task: str, rng) -> dict:
    return instantiate(task, random_mh(rng), rng)


# EoH's five operators on one task's CONFIG (Liu et al. 2024: E1, E2, M1, M2, M3)
def eoh_e1(task: str, parents: list[dict], rng) -> dict:
    """A program different from its parents."""
    for _ in range(10):
        c = random_config(task, rng)
        if all(c.get("construct") != p.get("construct") or c.get("accept") != p.get("accept") for p in parents):
            return c
    return c


def eoh_e2(task: str, parents: list[dict], rng) -> dict:
    """The backbone the parents share, the rest drawn from one of them."""
    out = {}
    for k in parents[0]:
        vals = [p.get(k) for p in parents]
        out[k] = vals[0] if all(v == vals[0] for v in vals) else vals[int(rng.integers(len(vals)))]
    return out


def eoh_m1(task: str, cfg: dict, rng) -> dict:
    """Change one structural component."""
    P = PROBLEMS[task]
    out = dict(cfg)
    what = _pick(rng, ("construct", "ops", "perturbs", "accept", "key", "init"))
    if what == "construct":
        out["construct"] = _pick(rng, [c for c in P.CONSTRUCTS if c != cfg.get("construct")])
    elif what == "ops":
        out["ops"] = [_pick(rng, P.OPS)] if len(cfg.get("ops", [])) > 1 else list(P.OPS)
    elif what == "perturbs":
        out["perturbs"] = [_pick(rng, P.PERTURBS)]
    elif what == "key":
        out["key"] = _pick(rng, P.KEYS)
    else:
        out[what] = _pick(rng, [v for v in MH_SPACE[what] if v != cfg.get(what)])
    return out


def eoh_m2(task: str, cfg: dict, rng) -> dict:
    """Change one parameter."""
    out = dict(cfg)
    k = _pick(rng, ("strength", "temp", "pool", "restart_after"))
    out[k] = _pick(rng, [v for v in MH_SPACE[k] if v != cfg.get(k)])
    return out


def eoh_m3(task: str, cfg: dict, rng) -> dict:
    """Simplify: drop a component."""
    out = dict(cfg)
    if len(out.get("ops", [])) > 1:
        out["ops"] = out["ops"][:1]
    elif len(out.get("perturbs", [])) > 1:
        out["perturbs"] = out["perturbs"][:1]
    else:
        out.update(polish=False, pool=1, credit="uniform")
    return out


# ---------------------------------------------------------------- rendering and parsing


def mh_name(mh: dict) -> str:
    h = sum(map(ord, json.dumps(mh, sort_keys=True)))
    return f"{NAMES[h % len(NAMES)]} {NOUNS[(h // 7) % len(NOUNS)]}"


def render_mh(mh: dict) -> str:
    """The authors' ALGORITHM / PURPOSE / INPUT / OUTPUT template [C], with the genome line."""
    ls = f"{mh['improve']}-improvement local search with {'all' if mh['breadth'] == 'all' else 'one'} neighbourhood(s)"
    acc = {"better": "accept only improvements", "threshold": f"accept within {mh['temp']:g} relative worsening",
           "annealing": f"accept worse with annealing probability (T0 = {mh['temp']:g})",
           "restart": f"accept improvements; restart from the best after {mh['restart_after']} stalls"}[mh["accept"]]
    return (f"ALGORITHM {mh_name(mh)}\n"
            "/* PURPOSE: a task-agnostic metaheuristic: it names roles (entities, moves, costs), "
            "never a specific problem */\n"
            "INPUT: entities and relations with costs and constraints; objective evaluator; "
            "feasibility projector; termination control (step budget, CPU time)\n"
            "OUTPUT: the best feasible solution found\n"
            f"GENOME: {json.dumps(mh, sort_keys=True)}\n"
            "Initialization Phase:\n"
            f"  build {mh['pool']} solution(s) with the {mh['init']} constructor; improve each by {ls}\n"
            "Main Processing Loop:\n"
            "  WHILE steps and time remain\n"
            f"    perturb the current solution ({mh['style']} structure, strength {mh['strength']}; "
            f"{mh['credit']} operator credit)\n"
            f"    improve it by {ls}\n"
            f"    {acc}; keep the best ever\n"
            "  END WHILE\n"
            "Post-Processing Phase:\n"
            f"  {'polish the best with every neighbourhood' if mh['polish'] else 'return the best'}\n")


def render_program(task: str, cfg: dict, title: str, steps: int | None = None) -> str:
    """A solver class over the component library. ``steps``: main-loop iterations; ``None`` runs
    the caller's step budget (``self.steps``, what the evaluator gives every searched program),
    ``0`` a pure construct-and-descend program."""
    n = "self.steps" if steps is None else str(int(steps))
    return (f'"""{title} — {task.upper()} solver built from the mths component library."""\n\n'
            "from mths.components import solve\n\n"
            f"CONFIG = {dict(sorted(cfg.items()))!r}\n\n\n"
            f"class {get_task(task).solver_class}:\n"
            "    def __init__(self, time_limit=10.0, steps=100, seed=0, **instance):\n"
            "        self.instance = instance\n"
            "        self.time_limit, self.steps, self.seed = time_limit, steps, seed\n\n"
            "    def solve(self):\n"
            f"        data = {{k: self.instance[k] for k in {get_task(task).fields!r} if k in self.instance}}\n"
            f"        return solve({task!r}, data, CONFIG, self.time_limit, {n}, self.seed)\n")


def require_components(tasks) -> None:
    """The grammar operator writes programs from the component library: a task without
    components (a plugin task) needs a real LLM."""
    for t in tasks:
        if t not in PROBLEMS:
            raise UserError(f"task {t!r} has no components for the offline grammar operator: "
                            "use --llm openai|hf|replay")


GENOME_RE = re.compile(r"^GENOME:\s*(\{.*\})\s*$", re.M)
CONFIG_RE = re.compile(r"^CONFIG = (\{.*\})\s*$", re.M)


def parse_genomes(text: str) -> list[dict]:
    return [json.loads(m) for m in GENOME_RE.findall(text)]


def parse_configs(text: str) -> list[dict]:
    return [ast.literal_eval(m) for m in CONFIG_RE.findall(text)]


def seeded(seed: int, counter: int, text: str):
    import hashlib

    h = int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)
    return np.random.default_rng([seed, counter, h])
