"""The H2 / patchback / steering protocol on one model and layer (used by the reproduction and the
CLI). Each evaluation prompt's prefill is computed once and its cache reused by every condition;
every intervention's ``.calls`` is kept in ``all_calls`` so a hook that never fired is caught."""

from __future__ import annotations

import numpy as np
import torch

from .baselines import ControlContext, build
from .core import energy, fit_shared, rank_quality, repair, steering_overlap
from .hooks import DecodeOnlyIntervention, PhaseIntervention
from .readout import (
    GenPrepared,
    exact_match,
    generate_cached,
    generated_texts,
    prepare,
    prepare_gen,
    score,
)


def choice_logprob(scores: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """log p(correct option | options) per row."""
    m = scores.max(1, keepdims=True)
    lse = (m + np.log(np.exp(scores - m).sum(1, keepdims=True))).ravel()
    return scores[np.arange(len(answers)), answers] - lse


class Protocol:
    def __init__(self, model, tok, layer: int, dec_states: dict, pre_states: dict,
                 eval_by_task: dict, seed: int = 0, gen_tokens: int = 16):
        self.model, self.tok, self.layer, self.seed = model, tok, layer, seed
        self.dec, self.pre = dec_states, pre_states
        self.tasks = list(eval_by_task)
        self.batches = {t: self._prepare(t, its, gen_tokens) for t, its in eval_by_task.items()}
        self.clean = {t: self.evaluate(t) for t in self.tasks}
        self.all_calls: list[dict] = []

    def _prepare(self, task: str, items: list[dict], gen_tokens: int):
        """Forced choice (``options`` + ``answer``) or generation exact match (``target``); the
        prefill runs here, once per task, and its cache serves every condition."""
        kinds = {"options" in it for it in items}
        if len(kinds) > 1:
            from icml26_shared import UserError

            raise UserError(f"task {task!r} mixes forced-choice and generation items")
        if kinds == {True}:
            return prepare(self.model, self.tok, items)
        return prepare_gen(self.model, self.tok, items, gen_tokens)

    def is_generation(self, task: str) -> bool:
        return isinstance(self.batches[task], GenPrepared)

    def evaluate(self, task: str) -> np.ndarray:
        """Option log-probs [b, n_options] (forced choice) or generated token ids [b, N]."""
        b = self.batches[task]
        return generate_cached(self.model, b).cpu().numpy() if isinstance(b, GenPrepared) else score(self.model, b)

    def context(self, exclude: str | None = None) -> ControlContext:
        keep = [t for t in self.dec if t != exclude]
        fit = fit_shared({t: self.dec[t] for t in keep})
        pfit = fit_shared({t: self.pre[t] for t in keep}) if self.pre else None
        return ControlContext(fit, np.concatenate([self.dec[t] for t in keep]), pfit, self.seed)

    def run(self, task: str, basis, alpha: float = 1.0, mode: str = "remove", **kw) -> np.ndarray:
        with DecodeOnlyIntervention(self.model, self.layer, torch.as_tensor(basis, dtype=torch.float32),
                                    alpha, mode, **kw) as iv:
            s = self.evaluate(task)
        self.all_calls.append(dict(iv.calls))
        return s

    def correct(self, task: str, scores: np.ndarray) -> np.ndarray:
        b = self.batches[task]
        if isinstance(b, GenPrepared):
            return exact_match(generated_texts(self.tok, b, scores), b.targets)
        return (scores.argmax(1) == b.answers).astype(float)

    def ablation(self, conditions, loto: bool = True) -> dict:
        """Accuracy per condition (items of all tasks concatenated); with ``loto`` the basis and
        controls evaluated on task t are estimated without t."""
        base = np.concatenate([self.correct(t, self.clean[t]) for t in self.tasks])
        out = {c: {"correct": [], "energy_ratio": [], "dim": [], "alpha": []} for c in conditions}
        shared_ctx = None if loto else self.context()
        for t in self.tasks:
            ctx = self.context(t) if loto else shared_ctx
            for c in conditions:
                Qc, a = build(c, ctx)
                out[c]["correct"].append(self.correct(t, self.run(t, Qc, a)))
                out[c]["energy_ratio"].append(a * a * energy(ctx.states, Qc) / ctx.target)
                out[c]["dim"].append(Qc.shape[1])
                out[c]["alpha"].append(a)
        for c in conditions:
            out[c]["correct"] = np.concatenate(out[c]["correct"])
            for key in ("energy_ratio", "dim", "alpha"):
                out[c][key] = float(np.mean(out[c][key]))
        return {"baseline": base, "conditions": out}

    def patchback(self) -> dict:
        """Flip set = evaluation items correct clean and wrong under shared removal; rescue rate of
        each patch over it, and each patch's largest deviation from the clean run (option
        log-probs; for generation tasks the fraction of generated tokens that differ)."""
        ctx = self.context()
        S = ctx.fit.shared
        N, _ = build("k", ctx)
        P_S, P_N = S @ S.T, N @ N.T
        d = S.shape[0]
        rescued: dict[str, list] = {c: [] for c in ("full", "step0", "outside", "random_in_S",
                                                     "other_donor", "time_shuffled")}
        diff = {c: 0.0 for c in rescued}
        flips = 0
        rng = np.random.default_rng(self.seed)
        for t in self.tasks:
            with DecodeOnlyIntervention(self.model, self.layer, torch.eye(d), record=True) as rec:
                self.evaluate(t)
            hs = [h.double().cpu().numpy() for h in rec.recorded]  # [b, 1, d] clean states per pass
            ablated = self.correct(t, self.run(t, S))
            flip = (self.correct(t, self.clean[t]) == 1) & (ablated == 0)
            flips += int(flip.sum())
            comp = [h @ P_S for h in hs]
            rand = []
            for c in comp:
                g = rng.standard_normal(c.shape) @ P_S
                rand.append(g * (np.linalg.norm(c, axis=-1, keepdims=True)
                                 / np.maximum(np.linalg.norm(g, axis=-1, keepdims=True), 1e-12)))
            plans = {
                "full": (S, comp, None),
                "step0": (S, comp, (0,)),
                "outside": (np.concatenate([S, N], 1), [h @ P_N for h in hs], None),
                "random_in_S": (S, rand, None),
                "other_donor": (S, [np.roll(c, 1, axis=0) for c in comp], None),
                "time_shuffled": (S, comp[::-1], None),
            }
            for name, (basis, donor, window) in plans.items():
                s = self.run(t, basis, 1.0, "patch", donor=[torch.from_numpy(x) for x in donor], window=window)
                gap = (s != self.clean[t]).mean() if self.is_generation(t) else np.abs(s - self.clean[t]).max()
                diff[name] = max(diff[name], float(gap))
                rescued[name].append(self.correct(t, s)[flip])
        rates = {c: float(np.concatenate(v).mean()) if flips else float("nan") for c, v in rescued.items()}
        return {"flips": flips, "rescue": rates, "diff": diff}

    def require_forced_choice(self, what: str) -> None:
        gen = [t for t in self.tasks if self.is_generation(t)]
        if gen:
            from icml26_shared import UserError

            raise UserError(f"{what} scores option log-probs: task(s) {', '.join(gen)} have no options")

    def candidates(self, calib_by_task: dict, n: int, scale: float = 0.5) -> dict:
        """Steering candidates [R]: shared directions (both signs), contrastive (CAA-style) prefill
        vectors of the binary tasks (answer 0 minus answer 1), a repaired one, random ones; all at
        ``scale`` x the mean decode-state norm."""
        fit = self.context().fit
        S = fit.shared
        norm = float(np.linalg.norm(np.concatenate(list(self.dec.values())), axis=1).mean())
        vecs = {"shared_pc0": S[:, 0], "shared_pc0_neg": -S[:, 0]}
        if S.shape[1] > 1:
            vecs["shared_pc1"] = S[:, 1]
        caa = []
        for t, its in calib_by_task.items():
            ans = np.array([it["answer"] for it in its])
            if len(its[0]["options"]) == 2 and (ans == 0).any() and (ans == 1).any():
                x = self.pre[t]
                caa.append((f"caa_{t}", x[ans == 0].mean(0) - x[ans == 1].mean(0)))
        for name, v in caa[:2]:
            vecs[name] = v
        if caa:
            vecs[f"{caa[0][0]}_repaired"] = repair(caa[0][1], S, 1.0)
        rng = np.random.default_rng(self.seed + 7)
        while len(vecs) < n:
            vecs[f"random{len(vecs)}"] = rng.standard_normal(S.shape[0])
        vecs = dict(list(vecs.items())[:n])
        return {k: scale * norm * v / np.linalg.norm(v) for k, v in vecs.items()}, S

    def steer_audit(self, calib_by_task: dict, n_val: int, n_vectors: int, scale: float = 0.5) -> dict:
        self.require_forced_choice("the steering audit")
        vecs, S = self.candidates(calib_by_task, n_vectors, scale)
        val = {t: prepare(self.model, self.tok, its[:n_val]) for t, its in calib_by_task.items()}
        val_clean = {t: choice_logprob(score(self.model, b), b.answers).mean() for t, b in val.items()}
        dec_proxy, pre_proxy, util = ({t: [] for t in self.tasks} for _ in range(3))
        for v in vecs.values():
            vt = torch.as_tensor(v, dtype=torch.float32)
            for t in self.tasks:
                b = val[t]
                with DecodeOnlyIntervention(self.model, self.layer, vt, 1.0, "add") as iv:
                    dec_proxy[t].append(choice_logprob(score(self.model, b), b.answers).mean() - val_clean[t])
                self.all_calls.append(dict(iv.calls))
                with PhaseIntervention(self.model, self.layer, vt, 1.0, "add", phase="prefill"):
                    pb = prepare(self.model, self.tok, b.items)
                pre_proxy[t].append(choice_logprob(score(self.model, pb), pb.answers).mean() - val_clean[t])
                e = self.batches[t]
                held = choice_logprob(self.run(t, vt, 1.0, "add"), e.answers).mean()
                util[t].append(held - choice_logprob(self.clean[t], e.answers).mean())
        out = {"vectors": {}, "rho_decode": [], "rho_prefill": []}
        for m in ("regret1", "flip"):
            out[f"{m}_decode"], out[f"{m}_prefill"] = [], []
        for t in self.tasks:
            for proxy, vals in (("decode", dec_proxy[t]), ("prefill", pre_proxy[t])):
                q = rank_quality(vals, util[t])
                out[f"rho_{proxy}"].append(q["spearman"])
                out[f"regret1_{proxy}"].append(q["regret1"])
                out[f"flip_{proxy}"].append(q["flip"])
        for i, (name, v) in enumerate(vecs.items()):
            out["vectors"][name] = {"sh": steering_overlap(v, S), "sh_repaired": float(np.linalg.norm(S.T @ repair(v, S)) / np.linalg.norm(v)),
                                    "utility": float(np.mean([util[t][i] for t in self.tasks]))}
        return out
