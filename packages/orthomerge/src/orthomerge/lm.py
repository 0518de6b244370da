"""A language-model run [R] (issue 62, item 7): three peft OFT adapters on SmolLM2-135M-Instruct,
merged by OrthoMerge, ``avg`` and the dense TA / TIES / TSV-M rules.

Three synthetic text tasks are generated in-process on the same inputs (five distinct lowercase
letters): ``reverse`` (the letters backwards), ``sort`` (alphabetical order) and ``upper`` (each
letter in upper case); the prompt is ``"<task>: k d m p a ->"`` and the answer ``" a p m d k"``.
Each has train / dev / test splits per seed (dev and test strings disjoint from each other and
never trained on). Held-out general text for forgetting: the docstrings of some standard-library
modules, cut into fixed-length token windows (no download; the text follows the Python version).

Per seed and task an OFT adapter is trained through peft's ``get_peft_model`` on ``q_proj`` and
``v_proj`` (exact Cayley path, block 32), AdamW, early stopping on the dev loss with a step cap;
the learning rate is chosen per task on the first seed's dev split from a two-value grid and
reused for the other seeds. The adapters are written with ``save_pretrained`` and read back by
this package's own readers: OrthoMerge and ``avg`` through ``merge_oft_adapters``' merge (the
merged weights W0·R*ᵀ, as ``oft_dense``), TA / TIES (model-scope trim, density 0.2) / TSV-M
through ``oft_dense`` on the experts' dense deltas. Every strength λ is chosen per method on dev
(the answer loss averaged over the three tasks and the seeds); the test split and the general
text are scored once, at the chosen λ (and, for the mechanism, OrthoMerge and ``avg`` at λ = 1).

Metric: the mean cross-entropy of the answer tokens (teacher-forced; lower is better) and exact
match (every answer token the greedy argmax). Intervals: ``paired_interval_clustered`` over test
examples (all three tasks) nested in seeds.
"""

from __future__ import annotations

import copy
import inspect
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from icml26_shared import Claim, ClaimCheck, Results, UserError
from icml26_shared.eval import paired_interval_clustered
from icml26_shared.train import EarlyStopping

from .config import AUTHORS_TIES, OFTMergeConfig
from .io import Adapter
from .merging import oft_dense, oft_rotation

TASKS: dict[str, Callable[[list[str]], list[str]]] = {
    "reverse": lambda xs: xs[::-1],
    "sort": sorted,
    "upper": lambda xs: [x.upper() for x in xs],
}
TARGETS = ["q_proj", "v_proj"]
#: standard-library modules whose docstrings are the general text (forgetting)
GENERAL_MODULES = ("json", "textwrap", "string", "collections", "functools", "pathlib", "argparse",
                   "logging", "random", "statistics", "fractions", "shutil", "tempfile", "csv", "heapq",
                   "bisect", "difflib", "calendar", "datetime", "decimal")
MERGES = ("orthomerge", "avg", "ta", "ties", "tsv")
DENSE = ("ta", "ties", "tsv")
CLAIMS = [
    Claim("LM1", "LM run: OrthoMerge's test answer loss is below avg's (magnitude correction; each "
          "at its dev-chosen λ)", "test answer loss", "lower"),
    Claim("LM2", "LM run: OrthoMerge's test answer loss is below the best Euclidean merge's (TA / "
          "TIES / TSV-M, rule and λ chosen on dev)", "test answer loss", "lower"),
    Claim("LM-check", "LM run: the trained adapters as peft applies them equal our dense W0·Rᵀ "
          "(max answer-loss gap)", "max answer-loss gap", "lower", kind="check"),
]


@dataclass(frozen=True)
class LMConfig:
    """The defaults are the documented run (about 6 CPU-minutes, one thread)."""

    seeds: int = 2
    seed: int = 0
    lrs: tuple[float, ...] = (3e-3, 6e-3)
    max_steps: int = 40
    eval_every: int = 5
    patience: int = 2
    batch: int = 6
    block: int = 32
    n_items: int = 5
    n_dev: int = 16
    n_test: int = 32
    n_general: int = 24
    general_len: int = 32
    grids: dict = field(default_factory=lambda: {
        "orthomerge": (0.1, 0.25, 0.5, 1.0, 1.5), "avg": (0.25, 0.5, 1.0, 1.5, 2.0),
        "ta": (0.1, 0.2, 0.3, 0.5, 1.0), "ties": (0.1, 0.25, 0.5, 1.0, 2.0), "tsv": (0.1, 0.25, 0.5, 1.0, 1.5)})
    density: float = AUTHORS_TIES[1]

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.max_steps < 1 or self.eval_every < 1 or self.batch < 1:
            raise UserError("seeds, steps, eval interval and batch must be >= 1")
        if not self.lrs or any(not (0 < lr < 1) for lr in self.lrs):
            raise UserError(f"learning rates must lie in (0, 1), got {self.lrs}")


# --- data -----------------------------------------------------------------------------------------

def _strings(rng: random.Random, n_items: int) -> tuple[str, ...]:
    return tuple(rng.sample("abcdefghijklmnopqrstuvwxyz", n_items))


def example(task: str, xs) -> tuple[str, str]:
    """(prompt, answer) of one task example."""
    return f"{task}: {' '.join(xs)} ->", " " + " ".join(TASKS[task](list(xs)))


class TaskData:
    """Per task: dev / test examples (token ids) and a train sampler that never draws them."""

    def __init__(self, tok, cfg: LMConfig, seed: int):
        rng = random.Random(10_007 * seed + 1)
        held: set[tuple[str, ...]] = set()
        self.tok, self.cfg, self.seed = tok, cfg, seed
        self.splits: dict[str, dict[str, list]] = {}
        for task in TASKS:
            parts = {}
            for part, n in (("dev", cfg.n_dev), ("test", cfg.n_test)):
                xs = []
                while len(xs) < n:
                    s = _strings(rng, cfg.n_items)
                    if s not in held:
                        held.add(s)
                        xs.append(s)
                parts[part] = [self.encode(task, s) for s in xs]
            self.splits[task] = parts
        self.held = held

    def encode(self, task: str, xs) -> tuple[list[int], list[int]]:
        prompt, answer = example(task, xs)
        return (self.tok(prompt, add_special_tokens=False).input_ids,
                self.tok(answer, add_special_tokens=False).input_ids)

    def train_batches(self, task: str, seed: int):
        rng = random.Random(seed)
        while True:
            batch = []
            while len(batch) < self.cfg.batch:
                s = _strings(rng, self.cfg.n_items)
                if s not in self.held:
                    batch.append(self.encode(task, s))
            yield batch


def general_text(tok, cfg: LMConfig, seed: int) -> torch.Tensor:
    """(n_general, general_len) token windows of standard-library docstrings, drawn per seed."""
    import importlib

    docs = []
    for name in GENERAL_MODULES:
        mod = importlib.import_module(name)
        for obj in [mod, *(getattr(mod, a) for a in sorted(dir(mod)) if not a.startswith("_"))]:
            doc = inspect.getdoc(obj) if getattr(obj, "__module__", name) == name or obj is mod else None
            if doc and len(doc) > 200 and doc not in docs:
                docs.append(doc)
    ids = tok("\n\n".join(docs), add_special_tokens=False).input_ids
    n = len(ids) // cfg.general_len
    if n < cfg.n_general:
        raise UserError(f"only {n} general-text windows of {cfg.general_len} tokens (docstrings stripped? "
                        "python -OO removes them)")
    win = torch.tensor(ids[: n * cfg.general_len]).view(n, cfg.general_len)
    pick = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[: cfg.n_general]
    return win[pick]


# --- losses ---------------------------------------------------------------------------------------

def answer_losses(model, batch, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example: mean cross-entropy of the answer tokens given the prompt, and exact match.
    Left-padded, so only the last ``max answer + 1`` positions need logits."""
    L = max(len(p) + len(a) for p, a in batch)
    k = max(len(a) for _, a in batch) + 1
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    mask = torch.zeros(len(batch), L, dtype=torch.long)
    labels = torch.full((len(batch), L), -100, dtype=torch.long)
    for i, (p, a) in enumerate(batch):
        seq = p + a
        ids[i, L - len(seq):] = torch.tensor(seq)
        mask[i, L - len(seq):] = 1
        labels[i, L - len(a):] = torch.tensor(a)
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=k).logits[:, :-1]
    tgt = labels[:, L - k + 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1), ignore_index=-100,
                         reduction="none").view(tgt.shape)
    m = tgt != -100
    loss = (ce * m).sum(1) / m.sum(1)
    exact = ((logits.argmax(-1) == tgt) | ~m).all(1)
    return loss, exact


@torch.no_grad()
def eval_answers(model, examples, pad_id: int, chunk: int = 24) -> tuple[np.ndarray, np.ndarray]:
    losses, exact = [], []
    for i in range(0, len(examples), chunk):
        lo, ex = answer_losses(model, examples[i:i + chunk], pad_id)
        losses.append(lo.numpy())
        exact.append(ex.numpy())
    return np.concatenate(losses), np.concatenate(exact)


@torch.no_grad()
def eval_general(model, windows: torch.Tensor, chunk: int = 16) -> np.ndarray:
    """Per window: mean next-token cross-entropy."""
    out = []
    for i in range(0, len(windows), chunk):
        ids = windows[i:i + chunk]
        logits = model(input_ids=ids).logits[:, :-1].float()
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        out.append(ce.view(ids.shape[0], -1).mean(1).numpy())
    return np.concatenate(out)


# --- experts --------------------------------------------------------------------------------------

def train_expert(model0, data: TaskData, task: str, lr: float, seed: int, out: Path, pad_id: int):
    """One peft OFT adapter (``get_peft_model``, q_proj / v_proj, exact Cayley path), AdamW,
    early stopping on the dev answer loss; the best dev checkpoint is saved with
    ``save_pretrained``. Returns (dir, best dev loss, curve dict)."""
    from peft import OFTConfig, get_peft_model

    cfg = data.cfg
    torch.manual_seed(seed)
    model = copy.deepcopy(model0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = get_peft_model(model, OFTConfig(r=0, oft_block_size=cfg.block, target_modules=TARGETS,
                                             use_cayley_neumann=False, module_dropout=0.0))
    net = pm.get_base_model()
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    stop = EarlyStopping(patience=cfg.patience, mode="min")
    dev = data.splits[task]["dev"]
    net.eval()  # no dropout in SmolLM2; eval mode keeps it deterministic
    steps, dev_curve, train_curve, run = [0], [float(eval_answers(net, dev, pad_id)[0].mean())], [], []
    stop.step(dev_curve[0], at=0)
    best = [p.detach().clone() for p in params]
    batches = data.train_batches(task, 1_000 * seed + sum(map(ord, task)))
    for step in range(1, cfg.max_steps + 1):
        loss = answer_losses(net, next(batches), pad_id)[0].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.append(float(loss.detach()))
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            d = float(eval_answers(net, dev, pad_id)[0].mean())
            steps.append(step)
            dev_curve.append(d)
            train_curve.append(float(np.mean(run)))
            run = []
            halt = stop.step(d, at=step)
            if stop.improved:
                best = [p.detach().clone() for p in params]
            if halt:
                break
    with torch.no_grad():
        for p, b in zip(params, best, strict=True):
            p.copy_(b)
    pm.save_pretrained(str(out))
    gap = _peft_gap(net, model0, Adapter.open(out), dev[:8], pad_id)
    curve = {"steps": steps, "dev": dev_curve, "train_steps": steps[1:], "train": train_curve,
             "stopped_at": stop.stopped_at, "best_at": stop.best_at}
    return out, float(stop.best), curve, gap


@torch.no_grad()
def _peft_gap(peft_net, model0, ad: Adapter, batch, pad_id: int) -> float:
    """max |logit| gap between peft's model and ours (W0·Rᵀ written into the base's weights)."""
    W0 = base_weights(model0)
    ours = copy.deepcopy(model0)
    set_weights(ours, expert_weights(ad, W0))
    a = answer_losses(peft_net, batch, pad_id)[0]
    b = answer_losses(ours, batch, pad_id)[0]
    return float((a - b).abs().max())


def base_weights(model) -> dict[str, torch.Tensor]:
    """The targeted (q_proj / v_proj) weights of the base, fp32, by checkpoint key."""
    return {n: p.detach().clone() for n, p in model.named_parameters()
            if n.endswith(tuple(f"{t}.weight" for t in TARGETS))}


def set_weights(model, weights: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in weights.items():
            params[k].copy_(v.to(params[k].dtype))


def expert_weights(ad: Adapter, W0: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """W0·Rᵀ of one adapter (what peft's ``merge_and_unload`` gives), fp64 rotations."""
    out = {}
    for mod in ad.modules():
        key = mod + ".weight"
        W = W0[key].double()
        out[key] = (W @ oft_rotation(ad, mod, None, W.shape[1]).T).float()
    return out


def merged_weights(ads: list[Adapter], W0: dict[str, torch.Tensor], method: str, lam: float,
                   unit: dict | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """The merged q/v weights. OrthoMerge / ``avg``: λ on the merged generator; TA / TIES / TSV-M:
    W0 + λ·rule(Δ_i) (``unit``: the rule's weights at λ = 1, the rules being linear in λ)."""
    if method in ("orthomerge", "avg"):
        return {k: v for k, v in oft_dense(ads, W0, OFTMergeConfig(method=method, scale=lam)).items()}
    if unit is None:
        unit = oft_dense(ads, W0, OFTMergeConfig(method=method, scale=1.0, density=_density(method),
                                                 trim_scope="model", seed=seed))
    return {k: W0[k] + lam * (unit[k] - W0[k]) for k in W0}


def _density(method: str) -> float | None:
    return AUTHORS_TIES[1] if method == "ties" else None


# --- the run --------------------------------------------------------------------------------------

def run(out: Path, cfg: LMConfig | None = None, loader: Callable | None = None,
        log: Callable[[str], None] = print) -> Results:
    """Train, merge and score; writes ``out/adapters/seed*/<task>`` and returns the ``Results``
    (the caller writes ``results.json``). ``loader() -> (model, tokenizer)``: SmolLM2-135M-Instruct
    offline by default (``icml26_shared.data.load_smollm2``)."""
    from .registry import DESCRIPTOR

    cfg = cfg or LMConfig()
    if loader is None:
        from icml26_shared.data import load_smollm2

        loader = load_smollm2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.process_time()
    try:
        model, tok = loader()
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        W0 = base_weights(model)
        seeds = [cfg.seed + i for i in range(cfg.seeds)]
        res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="lm", seed=cfg.seed)
        state: dict[int, dict] = {}
        lr_of: dict[str, float] = {}
        # 1. experts; the learning rate per task on the first seed's dev split ------------------
        for s in seeds:
            data = TaskData(tok, cfg, s)
            dirs, gaps = {}, []
            for task in TASKS:
                lrs = cfg.lrs if task not in lr_of else (lr_of[task],)
                tried = []
                for lr in lrs:
                    d = Path(out) / "adapters" / f"seed{s}" / (task if len(lrs) == 1 else f"{task}-lr{lr:g}")
                    tried.append((lr, *train_expert(model, data, task, lr, s, d, pad)))
                    c = tried[-1][3]
                    res.add_curve("lm", f"expert {task} lr {lr:g}", "dev answer loss", c["steps"], c["dev"],
                                  "dev", seed=s, direction="lower", budget=cfg.max_steps, stopped_at=c["stopped_at"])
                    res.add_curve("lm", f"expert {task} lr {lr:g}", "train answer loss", c["train_steps"],
                                  c["train"], "train", seed=s, direction="lower", budget=cfg.max_steps)
                    log(f"seed {s} {task} lr {lr:g}: dev loss {c['dev'][0]:.3f} -> {tried[-1][2]:.3f} "
                        f"(best at step {c['best_at']:g})")
                lr, d, _, c, gap = min(tried, key=lambda x: x[2])
                lr_of.setdefault(task, lr)
                dirs[task] = d
                gaps.append(gap)
            ads = [Adapter.open(dirs[t]) for t in TASKS]
            # 2. dev sweeps: every method's λ on the dev answer loss, mean over tasks -----------
            units = {m: oft_dense(ads, W0, OFTMergeConfig(method=m, scale=1.0, density=_density(m),
                                                          trim_scope="model", seed=s)) for m in DENSE}
            dev = {}
            for m in MERGES:
                for lam in cfg.grids[m]:
                    set_weights(model, merged_weights(ads, W0, m, lam, units.get(m), s))
                    dev[(m, lam)] = float(np.mean([eval_answers(model, data.splits[t]["dev"], pad)[0].mean()
                                                   for t in TASKS]))
            set_weights(model, W0)
            state[s] = {"data": data, "dirs": dirs, "dev": dev, "gap": max(gaps), "units": units}
            log(f"seed {s}: dev sweeps " + ", ".join(f"{m} {lam:g} {v:.3f}" for (m, lam), v in dev.items()))
        # 3. λ per method: mean dev loss over seeds; the best Euclidean rule likewise ------------
        chosen = {m: min(cfg.grids[m], key=lambda lam, m=m: np.mean([state[s]["dev"][(m, lam)] for s in seeds]))
                  for m in MERGES}
        dev_at = {m: float(np.mean([state[s]["dev"][(m, chosen[m])] for s in seeds])) for m in MERGES}
        best_dense = min(DENSE, key=lambda m: dev_at[m])
        # 4. test: base, experts on their own tasks, merges at their chosen λ (+ λ = 1) ----------
        evals = [("base", None, None), ("orthomerge", "orthomerge", chosen["orthomerge"]),
                 ("orthomerge λ=1", "orthomerge", 1.0), ("avg", "avg", chosen["avg"]), ("avg λ=1", "avg", 1.0),
                 ("TA", "ta", chosen["ta"]), ("TIES", "ties", chosen["ties"]),
                 ("TIES, authors' λ=1", "ties", AUTHORS_TIES[0]), ("TSV-M", "tsv", chosen["tsv"])]
        test: dict[str, dict[int, dict]] = {name: {} for name, _, _ in evals}
        test["expert (own task)"] = {}
        for s in seeds:
            st = state[s]
            data = st["data"]
            gen = general_text(tok, cfg, s)
            ads = [Adapter.open(st["dirs"][t]) for t in TASKS]
            for name, m, lam in evals:
                set_weights(model, W0 if m is None else merged_weights(ads, W0, m, lam, st["units"].get(m), s))
                test[name][s] = _score(model, data, gen, pad)
            own = {"loss": [], "exact": [], "general": []}
            for t, ad in zip(TASKS, ads, strict=True):
                set_weights(model, expert_weights(ad, W0))
                lo, ex = eval_answers(model, data.splits[t]["test"], pad)
                own["loss"].append(lo)
                own["exact"].append(ex)
                own["general"].append(eval_general(model, gen))
            test["expert (own task)"][s] = {"loss": np.concatenate(own["loss"]),
                                            "exact": np.concatenate(own["exact"]),
                                            "general": np.mean(own["general"], 0)}
            set_weights(model, W0)
            log(f"seed {s}: test scored")
    finally:
        torch.set_num_threads(threads)
    _report(res, cfg, seeds, test, chosen, dev_at, best_dense, lr_of, state, time.process_time() - t0)
    return res


def _score(model, data: TaskData, gen: torch.Tensor, pad: int) -> dict:
    lo, ex = zip(*(eval_answers(model, data.splits[t]["test"], pad) for t in TASKS), strict=True)
    return {"loss": np.concatenate(lo), "exact": np.concatenate(ex), "general": eval_general(model, gen)}


DENSE_NAME = {"ta": "TA", "ties": "TIES", "tsv": "TSV-M"}


def _report(res: Results, cfg: LMConfig, seeds, test, chosen, dev_at, best_dense, lr_of, state, cpu) -> None:
    lam_of = {"orthomerge": chosen["orthomerge"], "orthomerge λ=1": 1.0, "avg": chosen["avg"], "avg λ=1": 1.0,
              "TA": chosen["ta"], "TIES": chosen["ties"], "TIES, authors' λ=1": 1.0, "TSV-M": chosen["tsv"]}
    n = cfg.n_test
    for name, per in test.items():
        for metric, key, scale in (("test answer loss", "loss", 1.0), ("test exact match", "exact", 100.0),
                                   ("general-text loss", "general", 1.0)):
            vals = [float(np.mean(per[s][key])) * scale for s in seeds]
            res.add("lm", name, metric, vals, seeds=seeds, unit="%" if key == "exact" else "nats")
        for i, t in enumerate(TASKS):
            res.add("lm", name, f"test answer loss, {t}",
                    [float(np.mean(per[s]["loss"][i * n:(i + 1) * n])) for s in seeds], seeds=seeds, unit="nats")
        if name in lam_of:
            res.add("lm", name, "λ (chosen on dev)" if "=" not in name else "λ (fixed)", lam_of[name])
    res.add("lm", "all", "cpu_seconds", cpu, unit="s")

    def diff(a: str, b: str, key: str = "loss"):
        d = np.concatenate([test[a][s][key] - test[b][s][key] for s in seeds])
        cl = np.concatenate([np.full(len(test[a][s][key]), s) for s in seeds])
        return paired_interval_clustered(d, cl)

    def mean(name, key="loss"):
        return float(np.mean([np.mean(test[name][s][key]) for s in seeds]))

    bd = DENSE_NAME[best_dense]
    iv_avg, iv_dense = diff("orthomerge", "avg"), diff("orthomerge", bd)
    iv_one = diff("orthomerge λ=1", "avg λ=1")
    iv_gen = diff("orthomerge", bd, "general")
    res.claims.append(ClaimCheck.compare(CLAIMS[0], mean("orthomerge"), mean("avg"), f"avg (λ {chosen['avg']:g})",
                                         interval=iv_avg, note=(
        f"λ on dev: OrthoMerge {chosen['orthomerge']:g}, avg {chosen['avg']:g}. At the paper's λ = 1: "
        f"OrthoMerge − avg {iv_one.mean:+.3f} [{iv_one.low:+.3f}, {iv_one.high:+.3f}] nats.")))
    res.claims.append(ClaimCheck.compare(CLAIMS[1], mean("orthomerge"), mean(bd), f"{bd} (λ {chosen[best_dense]:g})",
                                         interval=iv_dense, note=(
        f"best Euclidean rule on dev: {bd} (dev loss {dev_at[best_dense]:.3f}; TA {dev_at['ta']:.3f}, TIES "
        f"{dev_at['ties']:.3f}, TSV-M {dev_at['tsv']:.3f}). General-text loss OrthoMerge − {bd}: "
        f"{iv_gen.mean:+.3f} [{iv_gen.low:+.3f}, {iv_gen.high:+.3f}] nats.")))
    gap = max(state[s]["gap"] for s in seeds)
    res.claims.append(ClaimCheck.compare(CLAIMS[2], gap, threshold=1e-3, note="answer-loss gap, first 8 dev examples"))
    res.notes += [
        "Language-model run [R] (issue 62 item 7): SmolLM2-135M-Instruct, fp32, CPU, one thread. Tasks "
        f"reverse / sort / upper on {cfg.n_items} distinct letters; dev {cfg.n_dev}, test {cfg.n_test} "
        f"examples per task and seed; general text: {cfg.n_general} windows of {cfg.general_len} tokens of "
        "standard-library docstrings. Seeds " + ", ".join(map(str, seeds)) + ".",
        "Splits: the learning rate per task on the first seed's dev answer loss (grid "
        + ", ".join(f"{x:g}" for x in cfg.lrs) + "; chosen " + ", ".join(f"{t} {v:g}" for t, v in lr_of.items())
        + f"), the steps by early stopping on dev (patience {cfg.patience} evaluations every {cfg.eval_every} "
        f"steps, cap {cfg.max_steps}), every merge's λ and the best Euclidean rule on the dev answer loss "
        "(mean over tasks and seeds). Test and the general text were scored only at the chosen settings.",
        "Intervals: paired_interval_clustered over test examples (3 tasks) nested in seeds; losses in nats.",
        "λ grids: " + "; ".join(f"{m} {', '.join(f'{x:g}' for x in g)}" for m, g in cfg.grids.items())
        + f"; TIES density {AUTHORS_TIES[1]} (the authors'), trimmed over each expert's whole model.",
        "config: " + ", ".join(f"{k}={v}" for k, v in asdict(cfg).items() if k != "grids"),
    ]


def table(res: Results) -> str:
    """The markdown table of a run's results."""
    names = []
    for r in res.rows:
        if r.experiment == "lm" and r.metric == "test answer loss" and r.method not in names:
            names.append(r.method)

    def cell(name, metric, fmt):
        try:
            r = res.get("lm", name, metric)
        except KeyError:
            return "—"
        return f"{r.value:{fmt}}" + (f" ± {r.spread:{fmt}}" if r.spread is not None and len(r.seeds) > 1 else "")

    head = ("| model | λ | test answer loss | " + " | ".join(TASKS) + " | exact match (%) | general-text loss |\n"
            "|---|---|---|" + "---|" * len(TASKS) + "---|---|")
    lines = [head]
    for nm in names:
        lam = "—"
        for key in ("λ (chosen on dev)", "λ (fixed)"):
            try:
                lam = f"{res.get('lm', nm, key).value:g}" + (" (dev)" if "dev" in key else "")
            except KeyError:
                pass
        lines.append(f"| {nm} | {lam} | {cell(nm, 'test answer loss', '.3f')} | "
                     + " | ".join(cell(nm, f"test answer loss, {t}", ".3f") for t in TASKS)
                     + f" | {cell(nm, 'test exact match', '.1f')} | {cell(nm, 'general-text loss', '.3f')} |")
    return "\n".join(lines)
