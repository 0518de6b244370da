"""The rules live once, in the core's ``icml26_shared.merge`` (peft's code for TA / TIES /
magnitude-prune / DARE through its public import; TSV and Iso written there): circumerge resolves
every rule to the core's function object, every space runs it, the results at tensor trim scope
are circumerge 0.4.0's, a bare ``dare`` is refused, and the ``peft`` space is peft's own
add_weighted_adapter (TA by its ``cat``, no SVD)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from circumerge.config import RULE_NAMES, MergeConfig
from circumerge.spaces import SpaceOptions, merge_layer

from icml26_shared import UserError
from icml26_shared import merge as shared

pytest.importorskip("peft")
SRC = Path(__file__).parents[1] / "src"
REFERENCE = Path(__file__).with_name("data") / "rules_0.4.0.safetensors"


def test_no_rule_code_and_no_file_loading_in_src():
    text = {p.name: p.read_text() for p in SRC.rglob("*.py")}
    assert not [n for n, t in text.items() if "spec_from_file_location" in t]
    assert not [n for n, t in text.items() if "register_rule" in t or "merge_utils." in t]
    assert not (SRC / "circumerge" / "rules.py").exists()


def test_circumerge_resolves_each_rule_to_the_cores_function_object():
    import circumerge

    assert circumerge.RULES is shared.RULES
    for name in RULE_NAMES:
        assert circumerge.RULES[name] is shared.RULES[name], name


def test_circumerge_and_orthomerge_resolve_each_rule_to_the_same_function_object():
    import circumerge

    baselines = pytest.importorskip("orthomerge.baselines")  # a workspace sibling, not a dependency
    for name in RULE_NAMES:
        assert circumerge.RULES[name] is baselines.RULES[name], name


def test_tensor_scope_results_equal_circumerge_0_4_0():
    """Reference outputs of circumerge 0.4.0's own rules (captured before the switch) on random
    stacks with weights of either sign, default and given densities, seeded DARE."""
    from safetensors.torch import load_file

    ref = load_file(str(REFERENCE))
    keys = sorted({k.rsplit(".", 1)[0] for k in ref if k.endswith(".mats")})
    checked = 0
    for key in keys:
        mats, w = ref[f"{key}.mats"], ref[f"{key}.weights"]
        seed = 11 + int(key.split("_")[0][1:])
        for old in ("ta", "ties", "magnitude_prune", "dare", "dare_ties", "tsv", "iso"):
            new = "dare_linear" if old == "dare" else old
            for dens in (None, 0.3):
                got = shared.apply_rule(new, mats, w, density=dens,
                                        generator=torch.Generator().manual_seed(seed))
                want = ref[f"{key}.{old}.{dens}"]
                assert torch.allclose(got, want, atol=1e-12, rtol=0), (key, new, dens)
                checked += 1
    assert checked == 6 * 7 * 2


SPACE_OPTS = {"full": None, "knots": None, "core": None, "core_svd": None,
              "circulant": SpaceOptions(sketch_size=24)}  # sketch coordinates, sampling engaged


@pytest.mark.parametrize("space", list(SPACE_OPTS))
def test_every_space_runs_the_shared_rule(space, monkeypatch):
    g = torch.Generator().manual_seed(2)
    As = [torch.randn(3, 40, generator=g, dtype=torch.float64) for _ in range(4)]
    Bs = [torch.randn(50, 3, generator=g, dtype=torch.float64) for _ in range(4)]
    w = [1.0, -0.6, 0.8, 0.4]
    opts = SPACE_OPTS[space]
    before = merge_layer(As, Bs, space=space, rule="ties", weights=w, seed=5, opts=opts)
    real, calls = shared.RULES["ties"], []

    def spy(mats, weights, **kw):
        calls.append((mats.shape, weights.tolist()))
        return real(mats, weights, **kw)

    monkeypatch.setitem(shared.RULES, "ties", spy)
    after = merge_layer(As, Bs, space=space, rule="ties", weights=w, seed=5, opts=opts)
    assert len(calls) == 1 and calls[0][0][0] == 4 and calls[0][1] == pytest.approx(w)
    assert torch.allclose(before[1] @ before[0], after[1] @ after[0], atol=1e-12)


def test_ties_trims_each_layer_on_its_own():
    """Trim scope "tensor", as Core Space's code: scaling one layer's adapters by 1000 leaves the
    other layer's TIES merge unchanged (a model-scope trim would cut that layer to nothing)."""
    from circumerge.adapters import merge_lora

    g = torch.Generator().manual_seed(6)
    ads = [{mod: (torch.randn(3, 20, generator=g, dtype=torch.float64),
                  torch.randn(16, 3, generator=g, dtype=torch.float64)) for mod in ("a", "b")}
           for _ in range(3)]
    big = [{"a": (A * 1000, B), "b": ad["b"]} for ad in ads for A, B in [ad["a"]]]
    cfg = MergeConfig(rule="ties")
    one, two = merge_lora(ads, cfg)["b"], merge_lora(big, cfg)["b"]
    assert torch.allclose(one[1] @ one[0], two[1] @ two[0], atol=1e-10)


def test_bare_dare_is_refused_naming_both(capsys):
    from circumerge.cli import main

    with pytest.raises(UserError, match="dare_linear.*dare_ties"):
        shared.apply_rule("dare", torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="dare_linear.*dare_ties"):
        MergeConfig(rule="dare")
    with pytest.raises(ValueError, match="dare_linear.*dare_ties"):
        merge_layer([torch.ones(1, 3)], [torch.ones(3, 1)], rule="dare")
    assert main(["merge", "a", "--out", "o", "--rule", "dare"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dare_linear" in err[0] and "dare_ties" in err[0], err
    assert main(["bench", "--rules", "dare"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dare_linear" in err[0], err


def test_seeded_dare_is_reproducible_and_leaves_global_rng_alone():
    mats = torch.randn(5, 12, 9, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    As = [torch.randn(3, 30, generator=g, dtype=torch.float64) for _ in range(3)]
    Bs = [torch.randn(20, 3, generator=g, dtype=torch.float64) for _ in range(3)]
    for rule in ("dare_linear", "dare_ties"):
        torch.manual_seed(123)
        before = torch.random.get_rng_state()
        a = merge_layer(As, Bs, space="core", rule=rule, seed=3)
        b = merge_layer(As, Bs, space="core", rule=rule, seed=3)
        c = merge_layer(As, Bs, space="core", rule=rule, seed=4)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert not torch.allclose(a[1] @ a[0], c[1] @ c[0])
        assert torch.equal(torch.random.get_rng_state(), before)
    g = torch.Generator().manual_seed(3)  # layers of one merge draw distinct masks
    assert not torch.equal(shared.apply_rule("dare_linear", mats, generator=g),
                           shared.apply_rule("dare_linear", mats, generator=g))


def test_peft_space_is_dense_rule_then_truncated_svd():
    g = torch.Generator().manual_seed(1)
    As = [torch.randn(3, 20, generator=g) for _ in range(3)]
    Bs = [torch.randn(24, 3, generator=g) for _ in range(3)]
    w = [1.0, 0.5, 0.7]
    A, B = merge_layer(As, Bs, space="peft", rule="ties", weights=w, density=0.4)
    dense = shared.apply_rule("ties", torch.stack([b @ a for a, b in zip(As, Bs, strict=True)]),
                              torch.tensor(w), density=0.4)
    U, S, Vh = torch.linalg.svd(dense)
    best9 = (U[:, :9] * S[:9]) @ Vh[:9]
    assert A.shape == (9, 20)
    assert torch.allclose(B @ A, best9, atol=1e-4)


def test_peft_space_ta_is_cat_and_calls_no_svd(monkeypatch):
    """``--space peft --rule ta`` runs peft's ``cat``: the factors concatenated, A_t scaled by w_t
    (either sign), rank Σ r_t, exact, and no SVD of any kind."""
    g = torch.Generator().manual_seed(4)
    ranks = (3, 2, 4)
    As = [torch.randn(r, 20, generator=g) for r in ranks]
    Bs = [torch.randn(24, r, generator=g) for r in ranks]
    w = [1.0, -0.5, 0.7]

    def no_svd(*a, **k):
        raise AssertionError("an SVD was called")

    for name in ("svd", "svdvals"):
        monkeypatch.setattr(torch.linalg, name, no_svd)
    monkeypatch.setattr(torch, "svd", no_svd)
    monkeypatch.setattr(torch, "svd_lowrank", no_svd)
    A, B = merge_layer(As, Bs, space="peft", rule="ta", weights=w)
    assert A.shape == (sum(ranks), 20) and B.shape == (24, sum(ranks))
    assert torch.allclose(A, torch.cat([wt * a for wt, a in zip(w, As, strict=True)]), atol=1e-6)
    assert torch.equal(B, torch.cat(Bs, 1))
    truth = sum(wt * b @ a for wt, a, b in zip(w, As, Bs, strict=True))
    assert torch.allclose(B @ A, truth, atol=1e-5)
