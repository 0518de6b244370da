"""The batched steering audit (all vectors in one replicated batch) equals the per-vector loop."""

from __future__ import annotations

import numpy as np
import torch
from decodeshare.hooks import DecodeOnlyIntervention, PhaseIntervention
from decodeshare.io import tiny_model
from decodeshare.protocol import choice_logprob
from decodeshare.readout import prepare, replicate, score
from decodeshare.tasks import make_tasks

torch.set_num_threads(1)


def test_replicated_batch_scores_each_vector_as_its_own_run():
    model, tok = tiny_model("llama", seed=0)
    items = make_tasks(4, 0, ("parity",))
    d = model.config.hidden_size
    V = torch.randn(3, d, generator=torch.Generator().manual_seed(0))
    b = prepare(model, tok, items)
    rb = replicate(b, len(V))
    with DecodeOnlyIntervention(model, 1, V.repeat(len(items), 1), 1.0, "add") as iv:
        dec = choice_logprob(score(model, rb), rb.answers).reshape(len(items), len(V))
    assert iv.calls["prefill"] == 0 and iv.calls["decode"] > 0
    with PhaseIntervention(model, 1, V.repeat(len(items), 1), 1.0, "add", phase="prefill"):
        pb = prepare(model, tok, rb.items)
    pre = choice_logprob(score(model, pb), pb.answers).reshape(len(items), len(V))
    for j, v in enumerate(V):
        with DecodeOnlyIntervention(model, 1, v, 1.0, "add"):
            one = choice_logprob(score(model, b), b.answers)
        np.testing.assert_allclose(dec[:, j], one, atol=1e-5)
        with PhaseIntervention(model, 1, v, 1.0, "add", phase="prefill"):
            p1 = prepare(model, tok, items)
        np.testing.assert_allclose(pre[:, j], choice_logprob(score(model, p1), p1.answers), atol=1e-5)
    clean = choice_logprob(score(model, b), b.answers)  # the original cache is untouched
    np.testing.assert_allclose(clean, choice_logprob(score(model, prepare(model, tok, items)), b.answers),
                               atol=1e-6)


def _protocol(arch: str):
    """A protocol on a tiny random model with two tasks and random calibration states."""
    from decodeshare.protocol import Protocol
    from decodeshare.tasks import by_task

    model, tok = tiny_model(arch, seed=0)
    d = model.config.hidden_size
    items = make_tasks(4, 0, ("parity", "addition"))
    rng = np.random.default_rng(0)
    states = {t: rng.standard_normal((12, d)) for t in ("parity", "addition")}
    return model, d, Protocol(model, tok, 1, states, states, by_task(items))


def test_run_many_equals_one_run_per_condition():
    from decodeshare.core import random_basis

    model, d, proto = _protocol("qwen2")
    conds = [(random_basis(d, 3, 0), 1.0), (random_basis(d, 7, 1), 0.4), (random_basis(d, 1, 2), 2.0)]
    for t in proto.tasks:
        many = proto.run_many(t, conds)
        for (Q, a), s in zip(conds, many):
            np.testing.assert_allclose(s, proto.run(t, Q, a), atol=1e-5)
    assert all(c["prefill"] == 0 and c["decode"] > 0 for c in proto.all_calls)


def test_patch_many_equals_one_patch_run_per_plan():
    from decodeshare.core import random_basis

    model, d, proto = _protocol("llama")
    rng = np.random.default_rng(1)
    S, W = random_basis(d, 3, 0), random_basis(d, 5, 1)
    for t in proto.tasks:
        with DecodeOnlyIntervention(model, 1, torch.eye(d), record=True) as rec:
            proto.evaluate(t)
        hs = [h.double().numpy() for h in rec.recorded]
        plans = [(S, [h @ S @ S.T for h in hs], None), (S, [h @ S @ S.T for h in hs], (0,)),
                 (W, [rng.standard_normal(h.shape) for h in hs], None)]
        for (Q, dn, w), s in zip(plans, proto._patch_many(t, plans)):
            one = proto.run(t, Q, 1.0, "patch", donor=[torch.from_numpy(x) for x in dn], window=w)
            np.testing.assert_allclose(s, one, atol=1e-5)
        np.testing.assert_allclose(proto._patch_many(t, plans)[0], proto.clean[t], atol=1e-4)
