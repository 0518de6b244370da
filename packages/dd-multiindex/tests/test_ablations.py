"""Issue 54 items 4, 5 and 8: the kink-free (quadratic) learner, the ablation sweeps of `reproduce`,
the distiller's lr chosen per d, and a user's own activation / distiller (documented callables and
the `dd_multiindex.plugins` entry-point group)."""

from __future__ import annotations

import importlib
import math
from dataclasses import fields

import pytest
import torch
from dd_multiindex.cli import main
from dd_multiindex.config import DistillConfig, SearchConfig, SweepSpec
from dd_multiindex.core import (
    ACTIVATIONS,
    MultiIndexTeacher,
    TwoStageLearner,
    alignment,
    monte_carlo_H,
    register_activation,
)
from dd_multiindex.distill import DISTILLERS, gradient_matching, register_distiller

sw = importlib.import_module("dd_multiindex.sweep")


@pytest.mark.parametrize("act", ["relu", "quadratic"])
def test_closed_form_gradient_equals_autograd_for_each_activation(act):
    t = MultiIndexTeacher(6, 2, seed=0)
    X, y = t.sample(40, seed=1)
    X, y = X.double().requires_grad_(True), y.double().requires_grad_(True)
    lrn = TwoStageLearner(10, 1.0, activation=act, seed=0)
    W0s = torch.stack([lrn.init(6, seed=s)[0] for s in range(3)]).double() * 100
    W0s[:, 1::2] *= 1.7  # break the ± pairs, so f ≠ 0 and both terms of the gradient count
    a = lrn.init(6)[1].double()
    G_auto = lrn.grad_autograd(W0s, a, X, y, create_graph=True)
    G_form = lrn.grad_sum(W0s, a, X, y) / len(y)
    assert torch.allclose(G_auto, G_form, atol=1e-10)
    probe = torch.randn_like(G_auto)
    dA = torch.autograd.grad((G_auto * probe).sum(), (X, y), retain_graph=True)
    dF = torch.autograd.grad((G_form * probe).sum(), (X, y))
    assert all(torch.allclose(u, v, atol=1e-8) for u, v in zip(dA, dF, strict=True))


def test_the_quadratic_first_step_is_the_kink_free_map_and_aligns_with_span_U():
    """σ = t²: from the symmetric init f₀ = 0, so row j of the gradient is −2a_j·(mean y x xᵀ)·w_j (no
    indicator), and one step lifts the rows into span(U)."""
    d, r = 16, 2
    t = MultiIndexTeacher(d, r, seed=0)
    X, y = t.sample(4 * d * d, seed=1)
    lrn = TwoStageLearner(64, 1.0, activation="quadratic", seed=3)
    W0, a = lrn.init(d)
    G = lrn.grad_sum(W0, a, X, y) / len(y)
    M = (monte_carlo_H(X, y) + y.double().mean() * torch.eye(d, dtype=torch.float64)).float()  # mean y x xᵀ
    assert torch.allclose(G, -2 * a[:, None] * (W0 @ M), rtol=1e-3, atol=1e-9)
    lrn.eta1 = 2.5 * lrn.eta_unit(d)
    assert alignment(W0, t.U) < 0.6 < 0.9 < alignment(lrn.first_step(X, y), t.U)


def test_the_ablation_sweeps_change_one_thing_each():
    from dd_multiindex.experiments import ablation_specs
    from dd_multiindex.runs import make_spec

    spec = make_spec("quick")
    lrs = {32: 0.03, 64: 0.07, 128: 0.01}
    abl = ablation_specs(spec, lrs)

    def changed(s):
        return {f.name for f in fields(SweepSpec) if getattr(s, f.name) != getattr(spec, f.name)}

    q, sf, st = abl["quadratic"], abl["structure_free"], abl["steps150"]
    assert sw.target_d(sf, 32, 256) == 32
    assert q.activation == "quadratic" and changed(q) == {"cells", "activation", "parts", "target_at"}
    assert q.target_at == st.target_at == 32  # the targets are set where the main grid sets them
    assert sw.target_d(st, 2, 256) == sw.target_d(spec, 2, 256) == 32
    assert {c[0] for c in q.cells} == {32, 64, 128} and all(c[2] == 256 for c in q.cells)
    assert sf.cells == ((32, 32, 256, "12"),) and sf.distill.lr == lrs[32] and not sf.tune_lr
    assert st.cells == ((64, 2, 256, "12"),) and st.distill.lr == lrs[64]
    assert (st.distill.steps, st.distill.plateau_patience) == (150, 0)  # a fixed budget, the rule off
    assert {f.name for f in fields(DistillConfig) if getattr(st.distill, f.name) != getattr(spec.distill, f.name)} \
        == {"steps", "plateau_patience", "lr"}


def test_the_distillers_lr_is_chosen_per_d_and_each_cell_gets_its_own(monkeypatch, tmp_path):
    from dd_multiindex.runs import sweep

    calls = []

    def fake(spec, d, r, L):
        calls.append((d, r, L))
        return d / 1000

    monkeypatch.setattr(sw, "_tune_lr", fake)
    spec = SweepSpec(cells=((8, 2, 16, "12"), (8, 1, 16, "12"), (12, 1, 16, "12")), seeds=1, tune_lr=True, parts=(),
                     distill=DistillConfig(steps=3, n_inits=1),
                     search=SearchConfig(m1_max=2, n_val=64, n_test=64, real_max_factor=1))
    rows = sweep(spec, tmp_path / "run")
    assert sorted(calls) == [(8, 1, 16), (12, 1, 16)]  # per d, at its smallest r
    assert {(r["d"], r["distill_lr"]) for r in rows} == {(8, 0.008), (12, 0.012)}


@pytest.fixture
def plugin(monkeypatch):
    """A user's package that registers an activation and a distiller through the entry point."""
    import dd_multiindex.plugins as pl

    def register():
        register_activation("softsquare", lambda t: torch.nn.functional.softplus(t) ** 2,
                            lambda t: 2 * torch.nn.functional.softplus(t) * torch.sigmoid(t))

        @register_distiller("gm_fast")
        def gm_fast(learner, X, y, m1, cfg, seed, **kw):
            from dataclasses import replace

            return gradient_matching(learner, X, y, m1, replace(cfg, steps=min(cfg.steps, 5)), seed, **kw)

    class EP:
        name, value = "mine", "my_pkg.dd:register"

        @staticmethod
        def load():
            return register

    monkeypatch.setattr(pl, "entry_points", lambda group: [EP] if group == pl.GROUP else [])
    monkeypatch.setattr(pl, "_LOADED", [])
    yield
    ACTIVATIONS.pop("softsquare", None)
    DISTILLERS.pop("gm_fast", None)


def test_a_users_activation_and_distiller_from_an_entry_point_run_in_distill_and_evaluate(plugin, tmp_path, capsys):
    out = tmp_path / "s.safetensors"
    assert main(["distill", "--d", "8", "--r", "1", "--L", "16", "--m1", "4", "--teacher-seed", "0",
                 "--activation", "softsquare", "--distiller", "gm_fast", "--eta1", "3", "--ridge", "0.01",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--json"]) == 0
    assert '"test_mse"' in capsys.readouterr().out
    # the registered activation's closed-form gradient is the autograd one
    lrn = TwoStageLearner(8, 1.0, activation="softsquare", seed=0)
    X, y = MultiIndexTeacher(4, 1, seed=0).sample(16, seed=1)
    W = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(lrn.grad_sum(W, lrn.init(4)[1], X, y) / 16, lrn.grad_autograd(W, lrn.init(4)[1], X, y),
                          atol=1e-5)


def test_a_broken_plugin_is_one_line_exit_2(monkeypatch, capsys):
    import dd_multiindex.plugins as pl

    class EP:
        name, value = "bad", "my_pkg:nope"

        @staticmethod
        def load():
            raise ImportError("No module named 'my_pkg'")

    monkeypatch.setattr(pl, "entry_points", lambda group: [EP])
    monkeypatch.setattr(pl, "_LOADED", [])
    assert main(["evaluate", "x.safetensors"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plugin 'bad'" in err[0], err


def test_an_unknown_activation_is_refused_in_one_line(capsys):
    assert main(["sweep", "--grid", "smoke", "--activation", "cubic", "--out", "x"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="unknown activation"):
        TwoStageLearner(4, 1.0, activation="cubic")
    assert math.isfinite(ACTIVATIONS["quadratic"].eta_unit(16, 1e-3))


def test_an_ablation_pairs_with_the_main_row_of_its_cell_and_seed_and_counts_ceilings_apart():
    from dd_multiindex.experiments import _paired_ablation

    from icml26_shared.results import Results

    res = Results("dd-multiindex", "0", "smoke", 0)
    main_rows = {s: {"d": 16, "r": 1, "L": 64, "seed": s, "m1_star": 10 * (s + 1), "test_mse": 1.0} for s in range(4)}
    abl = [dict(main_rows[s], m1_star=20 * (s + 1), test_mse=0.5) for s in range(3)]
    abl.append(dict(main_rows[3], m1_star=None, test_mse=0.5, flags=["m1:ceiling"]))  # censored: counted, not paired
    _paired_ablation(res, "quadratic", [(a, main_rows[a["seed"]]) for a in abl] + [(abl[0], None)], 64, "relu")
    rows = {(r.method, r.metric): {"value": r.value, **r.extra} for r in res.rows}
    m1 = rows[("quadratic", "log_m1_ratio_to_relu")]
    assert m1["n_pairs"] == 3 and m1["n_censored_pairs"] == 1
    assert m1["value"] == pytest.approx(math.log(2.0))
    assert rows[("quadratic", "log_test_mse_ratio_to_relu")]["value"] == pytest.approx(math.log(0.5))
