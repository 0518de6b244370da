"""icml26_shared.merge: the rules every merging package shares, model-scope trim, the --out guard."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from icml26_shared import UserError  # noqa: E402
from icml26_shared import merge as M  # noqa: E402
from icml26_shared.io import atomic_dir  # noqa: E402


def _stack(T=3, p=6, q=5, seed=0):
    return torch.randn(T, p, q, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_peft_rules_are_peft_at_tensor_scope():
    from peft.utils import merge_utils as mu

    X, w = _stack(), torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    ts = list(X.unbind(0))
    torch.testing.assert_close(M.apply_rule("ta", X, w), mu.task_arithmetic(ts, w))
    torch.testing.assert_close(M.apply_rule("ties", X, w, density=0.3), mu.ties(ts, w, 0.3, "total"))
    torch.testing.assert_close(M.apply_rule("magnitude_prune", X, w, density=0.3),
                               mu.magnitude_prune(ts, w, 0.3))


def test_dare_masks_follow_the_generator_and_leave_global_rng_alone():
    X = _stack()
    state = torch.random.get_rng_state()
    a = M.apply_rule("dare_linear", X, generator=torch.Generator().manual_seed(5))
    b = M.apply_rule("dare_linear", X, generator=torch.Generator().manual_seed(5))
    c = M.apply_rule("dare_linear", X, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(torch.random.get_rng_state(), state)
    # DARE-TIES elects signs: a single expert's masked rescaled entries come back as they are
    d = M.apply_rule("dare_ties", X[:1], density=0.5, generator=torch.Generator().manual_seed(1))
    kept = d != 0
    torch.testing.assert_close(d[kept], 2 * X[0][kept])


def test_bare_dare_and_unknown_rules_are_refused():
    with pytest.raises(UserError, match="dare_linear.*dare_ties"):
        M.apply_rule("dare", _stack())
    with pytest.raises(UserError, match="unknown merge rule"):
        M.apply_rule("nope", _stack())
    with pytest.raises(UserError, match="density"):
        M.apply_rule("ties", _stack(), density=0.0)


def test_model_thresholds_are_exact_kth_values():
    g = torch.Generator().manual_seed(0)
    experts = [[torch.randn(40, 30, generator=g), 1e-3 * torch.randn(77, generator=g),
                torch.randn(5, 5, 5, generator=g).to(torch.float16)] for _ in range(3)]
    for density in (0.01, 0.2, 0.5, 1.0):
        thr = M.model_thresholds(experts, density)
        for t, ts in enumerate(experts):
            flat = torch.cat([x.double().abs().reshape(-1) for x in ts])
            k = max(1, int(density * flat.numel()))
            assert thr[t].item() == torch.topk(flat, k).values[-1].item()
    # callables are read twice (a lazy reader)
    calls = []
    thr = M.model_thresholds([lambda: (calls.append(1), experts[0])[1]], 0.2)
    assert len(calls) == 2 and thr[0] == M.model_thresholds([experts[0]], 0.2)[0]


def test_model_scope_trims_over_the_whole_model_and_elects_zero_sums_positive():
    g = torch.Generator().manual_seed(1)
    big = torch.randn(2, 50, 50, generator=g, dtype=torch.float64)
    small = big / 100  # 100x smaller, same pattern
    stacks = {"big": big, "small": small}
    model = M.merge_stacks("magnitude_prune", stacks, density=0.2, trim_scope="model")
    tensor = M.merge_stacks("magnitude_prune", stacks, density=0.2, trim_scope="tensor")
    assert (model["small"] != 0).sum() == 0                # model scope keeps nothing of the small one
    nz = (tensor["small"] != 0).double().mean().item()     # tensor scope keeps ~20 % of each expert
    assert 0.2 <= nz <= 0.4 and torch.equal(tensor["small"] != 0, tensor["big"] != 0)
    # a zero sign sum elects +1 (peft's rule): the positive entry survives the disjoint mean
    X = torch.tensor([[[1.0]], [[-1.0]]], dtype=torch.float64)
    assert M.apply_rule("ties", X, density=1.0).item() == 1.0
    assert M.apply_rule("ties", X, thresholds=[0.5, 0.5]).item() == 1.0


def test_model_scope_ties_equals_peft_when_one_tensor():
    X, w = _stack(T=4, p=20, q=10, seed=3), torch.tensor([1.0, 0.5, 2.0, 1.0], dtype=torch.float64)
    out = M.merge_stacks("ties", {"a": X}, w, density=0.3, trim_scope="model")["a"]
    torch.testing.assert_close(out, M.apply_rule("ties", X, w, density=0.3))  # one tensor: same cut


def test_tsv_and_iso():
    X = _stack(T=2, p=8, q=8)
    out = M.apply_rule("tsv", X)
    # orthogonalised vectors: the merge's singular values are exactly the kept ones (top 4 of each)
    kept = torch.cat([torch.linalg.svdvals(X[t])[:4] for t in range(2)]).sort(descending=True).values
    torch.testing.assert_close(torch.linalg.svdvals(out), kept)
    # one expert: TSV keeps all its triplets, so it returns that expert
    torch.testing.assert_close(M.apply_rule("tsv", X[:1]), X[0])
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(M.apply_rule("tsv", v, [1.0, 3.0]), (v[0] + 3 * v[1]) / 4)
    iso = M.apply_rule("iso", X)
    s = torch.linalg.svdvals(iso)
    torch.testing.assert_close(s, s.mean().expand_as(s))
    torch.testing.assert_close(s.mean(), torch.linalg.svdvals(X.sum(0)).mean())


def test_prepare_out_guards(tmp_path, monkeypatch):
    a = tmp_path / "a"
    a.mkdir()
    (a / "w.bin").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    for bad, msg in [(a, "is the input"), (tmp_path, "contains the input"), (".", "contains the input"),
                     (a / "sub", "inside the input")]:
        with pytest.raises(UserError, match=msg):
            M.prepare_out(bad, True, [a], tool="mytool")
    link = tmp_path / "link"
    link.symlink_to(a)
    with pytest.raises(UserError, match="symbolic link"):
        M.prepare_out(link, True, [a], tool="mytool")
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not written by mytool"):
        M.prepare_out(user, True, [a], tool="mytool")
    out = tmp_path / "out"
    M.prepare_out(out, False, [a], tool="mytool")
    with atomic_dir(out, writer="mytool 1.0") as tmp:
        (tmp / "m.bin").write_bytes(b"y")
    with pytest.raises(UserError, match="already exists"):
        M.prepare_out(out, False, [a], tool="mytool")
    with pytest.raises(UserError, match="not written by other"):
        M.prepare_out(out, True, [a], tool="other")
    assert M.prepare_out(out, True, [a], tool="mytool") == out
    (out / "extra.txt").write_text("user's")
    with pytest.raises(UserError, match="no run wrote"):
        M.prepare_out(out, True, [a], tool="mytool")
    assert (a / "w.bin").read_bytes() == b"x" and (user / "notes.txt").read_text() == "mine"
    assert json.loads((out / ".icml26-manifest.json").read_text())["writer"] == "mytool 1.0"
