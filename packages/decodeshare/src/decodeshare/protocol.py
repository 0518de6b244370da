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
    replicate,
    score,
)


def choice_logprob(scores: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """log p(correct option | options) per row."""
    m = scores.max(1, keepdims=True)
    lse = (m + np.log(np.exp(scores - m).sum(1, keepdims=True))).ravel()
    return scores[np.arange(len(answers)), answers] - lse


class Protocol:
    def __init__(self, model, tok, layer: int, dec_states: dict, pre_states: dict,
                 eval_by_task: dict, seed: int = 0, gen_tokens: int = 16, *,
                 tau: float = 1e-3, tau_k: float | None = None, var: float = 0.95, m="all"):
        self.model, self.tok, self.layer, self.seed = model, tok, layer, seed
        self.fit_kw = dict(var=var, tau=tau, m=m, tau_k=tau_k)  # the shared-set rule of every fit
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
        fit = fit_shared({t: self.dec[t] for t in keep}, **self.fit_kw)
        pfit = fit_shared({t: self.pre[t] for t in keep}, **self.fit_kw) if self.pre else None
        return ControlContext(fit, np.concatenate([self.dec[t] for t in keep]), pfit, self.seed)

    def run(self, task: str, basis, alpha: float = 1.0, mode: str = "remove", **kw) -> np.ndarray:
        with DecodeOnlyIntervention(self.model, self.layer, torch.as_tensor(basis, dtype=torch.float32),
                                    alpha, mode, **kw) as iv:
            s = self.evaluate(task)
        self.all_calls.append(dict(iv.calls))
        return s

    def run_many(self, task: str, conditions: list[tuple[np.ndarray, float]]) -> list[np.ndarray]:
        """``run(task, Q, alpha)`` for each condition, all in one replicated batch (row r * K + j
        is row r under condition j): each decode pass reads the weights once for all K."""
        b = self.batches[task]
        K = len(conditions)
        if isinstance(b, GenPrepared) or K < 2:
            return [self.run(task, Q, a) for Q, a in conditions]
        d, width = conditions[0][0].shape[0], max(Q.shape[1] for Q, _ in conditions)
        stack = np.zeros((K, d, width))
        for j, (Q, a) in enumerate(conditions):  # zero columns remove nothing; alpha folded in
            stack[j, :, : Q.shape[1]] = np.sqrt(a) * Q
        rb = replicate(b, K)
        with DecodeOnlyIntervention(self.model, self.layer, torch.as_tensor(stack, dtype=torch.float32),
                                    1.0, "remove") as iv:
            s = score(self.model, rb)
        self.all_calls += [dict(iv.calls)] * K
        s = s.reshape(len(b.items), K, -1)
        return [s[:, j] for j in range(K)]

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
        empty = []
        for t in self.tasks:
            ctx = self.context(t) if loto else shared_ctx
            if len(ctx.fit.shared_idx) == 0:  # no shared direction: nothing to remove or match
                empty.append(t)
                ok = self.correct(t, self.clean[t])
                for c in conditions:
                    out[c]["correct"].append(ok)
                    out[c]["dim"].append(0)
                    out[c]["alpha"].append(0.0)
                continue
            built = [build(c, ctx) for c in conditions]
            for c, (Qc, a), s in zip(conditions, built, self.run_many(t, built)):
                out[c]["correct"].append(self.correct(t, s))
                out[c]["energy_ratio"].append(a * a * energy(ctx.states, Qc) / ctx.target)
                out[c]["dim"].append(Qc.shape[1])
                out[c]["alpha"].append(a)
        for c in conditions:
            out[c]["correct"] = np.concatenate(out[c]["correct"])
            for key in ("energy_ratio", "dim", "alpha"):
                out[c][key] = float(np.mean(out[c][key])) if out[c][key] else float("nan")
        task_of = np.concatenate([[t] * len(self.batches[t].items) for t in self.tasks])
        return {"baseline": base, "conditions": out, "empty_folds": empty, "task_of": task_of}

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
            for name, s in zip(plans, self._patch_many(t, list(plans.values()))):
                gap = (s != self.clean[t]).mean() if self.is_generation(t) else np.abs(s - self.clean[t]).max()
                diff[name] = max(diff[name], float(gap))
                rescued[name].append(self.correct(t, s)[flip])
        rates = {c: float(np.concatenate(v).mean()) if flips else float("nan") for c, v in rescued.items()}
        return {"flips": flips, "rescue": rates, "diff": diff}

    def _patch_many(self, task: str, plans: list) -> list[np.ndarray]:
        """Each ``(basis, donor, window)`` patch run, all in one replicated batch (forced choice):
        bases zero-padded into one stack, and a donor of zeros outside a plan's window (h - P h + 0
        is what the unbatched hook does there)."""
        b = self.batches[task]
        if isinstance(b, GenPrepared):
            return [self.run(task, Q, 1.0, "patch", donor=[torch.from_numpy(x) for x in dn], window=w)
                    for Q, dn, w in plans]
        K, d = len(plans), plans[0][0].shape[0]
        stack = np.zeros((K, d, max(Q.shape[1] for Q, _, _ in plans)))
        for j, (Q, _, _) in enumerate(plans):
            stack[j, :, : Q.shape[1]] = Q
        steps = len(plans[0][1])
        donor = []
        for s in range(steps):
            per = [dn[s] if w is None or s in w else np.zeros_like(dn[s]) for _, dn, w in plans]
            x = np.stack(per, 1)  # [b, K, 1, d]
            donor.append(torch.from_numpy(x.reshape(-1, *x.shape[2:])))
        rb = replicate(b, K)
        with DecodeOnlyIntervention(self.model, self.layer, torch.as_tensor(stack, dtype=torch.float32),
                                    1.0, "patch", donor=donor) as iv:
            out = score(self.model, rb)
        self.all_calls += [dict(iv.calls)] * K
        out = out.reshape(len(b.items), K, -1)
        return [out[:, j] for j in range(K)]

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
        # every vector in one batch: row r * K + j of a replicated batch carries vector j, so each
        # pass reads the weights once for all K vectors (the same passes and log-probs per vector)
        V = torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in vecs.values()])
        K = len(V)
        dec_proxy, pre_proxy, util = {}, {}, {}

        def per_vector(p, scores, n):
            return choice_logprob(scores, p.answers).reshape(n, K).mean(0)

        for t in self.tasks:
            b, e = val[t], self.batches[t]
            nb, ne = len(b.items), len(e.items)
            rb = replicate(b, K)
            with DecodeOnlyIntervention(self.model, self.layer, V.repeat(nb, 1), 1.0, "add") as iv:
                dec_proxy[t] = list(per_vector(rb, score(self.model, rb), nb) - val_clean[t])
            self.all_calls += [dict(iv.calls)] * K
            with PhaseIntervention(self.model, self.layer, V.repeat(nb, 1), 1.0, "add", phase="prefill"):
                pb = prepare(self.model, self.tok, rb.items)
            pre_proxy[t] = list(per_vector(pb, score(self.model, pb), nb) - val_clean[t])
            re = replicate(e, K)
            with DecodeOnlyIntervention(self.model, self.layer, V.repeat(ne, 1), 1.0, "add") as iv:
                held = per_vector(re, score(self.model, re), ne)
            self.all_calls += [dict(iv.calls)] * K
            util[t] = list(held - choice_logprob(self.clean[t], e.answers).mean())
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
