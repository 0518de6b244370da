"""The library-backed suites: CEC-2017 through opfunu."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from mesret import cec17_mix, optimize
from mesret.tasks import evaluate

from icml26_shared import UserError


@pytest.mark.parametrize("D", [10, 30, 50])
def test_each_cec17_function_at_x_global_returns_f_global(D):
    """Through the wrapper, in the unit box the suite maps to [-100, 100]^D: opfunu's ``x_global``
    gives ``f_global`` for all 29 functions (and ``f_opt`` is ``f_global``)."""
    pytest.importorskip("opfunu", reason="cec17-mix needs opfunu (the mesret[cec] extra)")
    tasks = cec17_mix((D,))
    assert len(tasks) == 29 and all(t.dim == D for t in tasks)
    for i, task in enumerate(tasks):
        prob = task.fn.problem
        lo, hi = task.bounds()
        u = (np.asarray(prob.x_global, float) - lo) / (hi - lo)  # the optimum in the unit box
        assert np.all((u >= 0) & (u <= 1)), task.name
        f, _ = evaluate(task, i, np.stack([u, np.full(D, 0.5)]))
        np.testing.assert_allclose(lo + u * (hi - lo), prob.x_global, rtol=0, atol=1e-12)
        # the mapped point is x_global to 1e-14; a few hybrids (F19 at D 30) amplify that to 3e-4
        assert f[0] == pytest.approx(prob.f_global, abs=1e-3), task.name
        assert task.f_opt == prob.f_global
        assert f[1] > task.f_opt  # the box centre is not the optimum
    assert [t.name.split("-")[1] for t in tasks] == [f"F{i}" for i in range(1, 30)]


def test_cec17_mix_runs_in_the_loop():
    pytest.importorskip("opfunu", reason="cec17-mix needs opfunu (the mesret[cec] extra)")
    tasks = cec17_mix((10,), functions=(1, 4, 20))
    r = optimize(tasks, "mesret", fe_per_task=300, seed=0)
    assert np.all(r.best_f >= np.array([t.f_opt for t in tasks]) - 1e-9)
    assert int(r.fe_used.sum()) <= 900


def test_cec17_mix_without_opfunu_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "opfunu", None)
    monkeypatch.setitem(sys.modules, "opfunu.cec_based", None)
    with pytest.raises(UserError, match=r"mesret\[cec\]"):
        cec17_mix((10,))


def test_cec17_mix_refuses_unknown_functions_and_dims():
    pytest.importorskip("opfunu", reason="cec17-mix needs opfunu (the mesret[cec] extra)")
    with pytest.raises(UserError, match="1..29"):
        cec17_mix((10,), functions=(30,))
    with pytest.raises(UserError, match="among 2, 10, 20, 30, 50, 100"):
        cec17_mix((7,), functions=(20,))
