"""Real adapters: peft-made LoRAs on a tiny model, merged by the CLI, loaded back by peft."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn as nn
from circumerge.cli import main
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from safetensors.torch import load_file, save_file

TARGETS = ("q", "v")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(16, 24)
        self.v = nn.Linear(24, 16)
        self.o = nn.Linear(16, 8)

    def forward(self, x):
        return self.o(torch.relu(self.v(torch.relu(self.q(x)))))


def base_model() -> Tiny:
    torch.manual_seed(123)
    return Tiny().eval()


# (rank, alpha, rsLoRA): heterogeneous ranks and scalings
SPECS = [(4, 8, False), (2, 2, False), (6, 3, True)]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """Three peft adapters on one base; returns their folders and each module's true ΔW_t."""
    root = tmp_path_factory.mktemp("adapters")
    dirs, deltas = [], []
    for t, (r, alpha, rs) in enumerate(SPECS):
        torch.manual_seed(t)
        cfg = LoraConfig(r=r, lora_alpha=alpha, use_rslora=rs, target_modules=list(TARGETS),
                         init_lora_weights=False)
        pm = get_peft_model(base_model(), cfg)
        d = root / f"task{t}"
        pm.save_pretrained(str(d))
        dirs.append(d)
        deltas.append({name: (getattr(pm.base_model.model, name).lora_B["default"].weight
                              @ getattr(pm.base_model.model, name).lora_A["default"].weight
                              * getattr(pm.base_model.model, name).scaling["default"]).detach()
                       for name in TARGETS})
    return dirs, deltas


def expected_forward(x, deltas, weights):
    model = base_model()
    with torch.no_grad():
        for name in TARGETS:
            lin = getattr(model, name)
            lin.weight += sum(w * d[name] for w, d in zip(weights, deltas, strict=True))
        return model(x)


@pytest.fixture(scope="module")
def peft_factors(adapters):
    return factors_from(adapters[0])


def factors_from(dirs):
    """Each adapter's (A_t, B_t·scaling) read by peft itself, independently of our reader."""
    out = {name: ([], []) for name in TARGETS}
    for d in dirs:
        pm = PeftModel.from_pretrained(base_model(), str(d))
        for name in TARGETS:
            lin = getattr(pm.base_model.model, name)
            out[name][0].append(lin.lora_A["default"].weight.detach())
            out[name][1].append((lin.lora_B["default"].weight * lin.scaling["default"]).detach())
    return out


@pytest.mark.parametrize("rule", ["ties", "tsv"])
@pytest.mark.parametrize("space", ["full", "knots", "core", "core_svd", "circulant", "peft"])
def test_nonlinear_round_trip_in_every_space(adapters, peft_factors, tmp_path, space, rule, capsys):
    """The merged file, loaded by peft, gives the model that merge_layer's ΔW* defines."""
    if space == "peft" and rule == "tsv":
        pytest.skip("peft has no TSV")
    from circumerge.spaces import merge_layer

    dirs, _ = adapters
    weights = [1.0, 0.5, 0.25]
    out = tmp_path / "merged"
    assert main(["merge", *map(str, dirs), "--out", str(out), "--space", space, "--rule", rule,
                 "--weights", ",".join(map(str, weights)), "--sketch-size", "12", "--quiet"]) == 0
    capsys.readouterr()
    facs = peft_factors
    from circumerge.config import MergeConfig

    opts = MergeConfig(sketch_size=12).space_options()
    want_model = base_model()
    with torch.no_grad():
        for i, name in enumerate(sorted(TARGETS)):  # layer streams follow the sorted module names
            A, B = merge_layer(*facs[name], space=space, rule=rule, weights=weights, layer_index=i,
                               opts=opts)
            getattr(want_model, name).weight += B @ A
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    loaded = PeftModel.from_pretrained(base_model(), str(out)).eval()
    with torch.no_grad():
        got, want = loaded(x), want_model(x)
        ta = expected_forward(x, facs_deltas(facs), weights)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got, ta, atol=1e-3)  # a nonlinear rule: not the weighted sum


def facs_deltas(facs):
    T = len(next(iter(facs.values()))[0])
    return [{name: facs[name][1][t] @ facs[name][0][t] for name in TARGETS} for t in range(T)]


@pytest.mark.parametrize("space", ["core", "circulant", "full"])
def test_round_trip_through_cli_and_peft(adapters, tmp_path, space, capsys):
    dirs, deltas = adapters
    weights = [1.0, 0.5, 0.25]
    out = tmp_path / "merged"
    rc = main(["merge", *map(str, dirs), "--out", str(out), "--space", space, "--rule", "ta",
               "--weights", ",".join(map(str, weights)), "--quiet"])
    assert rc == 0
    assert "merged 3 adapters" in capsys.readouterr().out
    loaded = PeftModel.from_pretrained(base_model(), str(out)).eval()
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = loaded(x)
    want = expected_forward(x, deltas, weights)
    base = base_model()(x)
    assert not torch.allclose(want, base, atol=1e-3)  # the adapters do change the model
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert tensors["base_model.model.q.lora_A.weight"].shape[0] <= sum(r for r, _, _ in SPECS)


def test_out_rank_and_inspect(adapters, tmp_path, capsys):
    dirs, _ = adapters
    out = tmp_path / "small"
    assert main(["merge", *map(str, dirs), "--out", str(out), "--rule", "ties", "--out-rank", "3",
                 "--quiet"]) == 0
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 3 and cfg["lora_alpha"] == 3
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as f:  # streamed file
        meta = json.loads(f.metadata()["circumerge"])
        assert meta["rule"] == "ties" and meta["out_rank"] == 3 and len(meta["sources"]) == 3
        assert f.get_tensor("base_model.model.v.lora_B.weight").shape == (16, 3)
    PeftModel.from_pretrained(base_model(), str(out))  # loads
    capsys.readouterr()
    assert main(["inspect", *map(str, dirs), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [a["ranks"] for a in info["adapters"]] == [[4], [2], [6]]
    ov = torch.tensor(info["overlap"])
    assert torch.allclose(ov.diagonal(), torch.ones(3), atol=1e-6)
    assert (ov < 1).sum() == 6  # different random adapters do not share subspaces


def _refused(argv, capsys, match):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("circumerge: error:") and match in err[0], err
    return err[0]


def _siblings(path):
    return sorted(p.name for p in path.parent.iterdir())


def test_refuses_different_base_models(adapters, tmp_path, capsys):
    dirs, _ = adapters
    other = tmp_path / "other"
    shutil.copytree(dirs[1], other)
    cfg = json.loads((other / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "someone/other-model"
    (other / "adapter_config.json").write_text(json.dumps(cfg))
    out = tmp_path / "merged"
    before = _siblings(out)
    err = _refused(["merge", str(dirs[0]), str(other), "--out", str(out)], capsys, "different base models")
    assert "--ignore-base-name" in err
    assert _siblings(out) == before
    # the same model under two names: the flag merges them, modules and shapes still checked
    assert main(["merge", str(dirs[0]), str(other), "--out", str(out), "--ignore-base-name", "--quiet"]) == 0
    line = capsys.readouterr().out
    assert "merged 2 adapters" in line and "setup and imports" in line
    broken = tmp_path / "broken"
    shutil.copytree(other, broken)
    t = load_file(str(broken / "adapter_model.safetensors"))
    save_file({k: v for k, v in t.items() if ".v." not in k}, str(broken / "adapter_model.safetensors"))
    _refused(["merge", str(dirs[0]), str(broken), "--out", str(tmp_path / "o2"), "--ignore-base-name"],
             capsys, "different modules")


def test_refuses_different_target_modules(adapters, tmp_path, capsys):
    dirs, _ = adapters
    other = tmp_path / "other"
    shutil.copytree(dirs[1], other)
    t = load_file(str(other / "adapter_model.safetensors"))
    save_file({k: v for k, v in t.items() if ".v." not in k}, str(other / "adapter_model.safetensors"))
    out = tmp_path / "merged"
    before = _siblings(out)
    _refused(["merge", str(dirs[0]), str(other), "--out", str(out)], capsys, "different modules")
    assert _siblings(out) == before


@pytest.mark.parametrize("missing", ["adapter_config.json", "adapter_model.safetensors", "dir"])
def test_refuses_missing_files(adapters, tmp_path, capsys, missing):
    dirs, _ = adapters
    broken = tmp_path / "broken"
    shutil.copytree(dirs[0], broken)
    if missing == "dir":
        shutil.rmtree(broken)
    else:
        (broken / missing).unlink()
    out = tmp_path / "merged"
    before = _siblings(out)
    _refused(["merge", str(dirs[1]), str(broken), "--out", str(out)], capsys,
             "does not exist" if missing == "dir" else f"missing {missing}")
    assert _siblings(out) == before


def test_refuses_existing_out_unless_forced(adapters, tmp_path, capsys):
    dirs, _ = adapters
    out = tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _refused(["merge", *map(str, dirs), "--out", str(out)], capsys, "already exists")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert _siblings(out) == ["merged"]
    # --force replaces only a folder a run wrote: never a file the user put there
    _refused(["merge", *map(str, dirs), "--out", str(out), "--force", "--quiet"], capsys,
             "not written by circumerge")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    (out / "keep.txt").unlink()
    for _ in range(2):  # an empty folder, then the run's own folder
        assert main(["merge", *map(str, dirs), "--out", str(out), "--force", "--quiet"]) == 0
        assert sorted(p.name for p in out.iterdir()) == [".icml26-manifest.json", "adapter_config.json",
                                                         "adapter_model.safetensors"]
        assert _siblings(out) == ["merged"]  # no temporary folder left behind


def test_refuses_bad_options(adapters, tmp_path, capsys):
    dirs, _ = adapters
    out = tmp_path / "merged"
    _refused(["merge", *map(str, dirs), "--out", str(out), "--weights", "1,nan,1"], capsys, "finite")
    _refused(["merge", *map(str, dirs), "--out", str(out), "--weights", "1,2"], capsys, "weights")
    _refused(["merge", *map(str, dirs), "--out", str(out), "--density", "1.5"], capsys, "density")
    _refused(["merge", *map(str, dirs), "--out", str(out), "--out-rank", "0"], capsys, "out-rank")
    assert not out.exists()


def test_failure_mid_merge_leaves_nothing(adapters, tmp_path, monkeypatch):
    """A crash after the first layer was streamed to disk must leave no partial adapter."""
    import circumerge.adapters as cad

    dirs, _ = adapters
    out = tmp_path / "merged"
    merge_one = cad._merge_one

    def boom(As, Bs, cfg, index):
        if index == 1:
            raise RuntimeError("disk full")
        return merge_one(As, Bs, cfg, index)

    monkeypatch.setattr(cad, "_merge_one", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        main(["merge", *map(str, dirs), "--out", str(out), "--quiet"])
    assert list(tmp_path.iterdir()) == []


def test_layers_are_streamed_one_at_a_time(adapters, tmp_path, monkeypatch):
    """Each module is loaded from every adapter, merged, and only then is the next one read."""
    import circumerge.adapters as cad
    from circumerge.io import PeftAdapter

    dirs, _ = adapters
    events = []
    load, merge_one = PeftAdapter.load, cad._merge_one

    def spy_load(self, module, *a, **k):
        events.append(("load", module))
        return load(self, module, *a, **k)

    def spy_merge(As, Bs, cfg, index):
        events.append(("merge", index))
        return merge_one(As, Bs, cfg, index)

    monkeypatch.setattr(PeftAdapter, "load", spy_load)
    monkeypatch.setattr(cad, "_merge_one", spy_merge)
    cad.merge_adapters(dirs, tmp_path / "out")
    T, mods = len(dirs), ["base_model.model.q", "base_model.model.v"]
    want = []
    for i, mod in enumerate(mods):
        want += [("load", mod)] * T + [("merge", i)]
    assert events == want


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_force_never_replaces_an_input_or_a_folder_holding_one(adapters, tmp_path, capsys, monkeypatch):
    dirs, _ = adapters
    work = tmp_path / "work"
    work.mkdir()
    x, y = work / "x", work / "y"
    shutil.copytree(dirs[0], x)
    shutil.copytree(dirs[1], y)
    (work / "notes.txt").write_text("mine")
    # an earlier circumerge output used as an input: a run folder, yet never --out of this merge
    prev = work / "prev"
    assert main(["merge", str(x), str(y), "--out", str(prev), "--quiet"]) == 0
    capsys.readouterr()
    (tmp_path / "link").symlink_to(x, target_is_directory=True)
    before = _snapshot(work)
    monkeypatch.chdir(work)
    for out, match in [("x", "is the input"), ("./x/", "is the input"),
                       (str(tmp_path / "link"), "symbolic link"), (".", "contains the input"),
                       (str(tmp_path), "contains the input"), ("prev", "is the input"),
                       ("x/sub", "inside the input")]:
        inputs = ["prev", "y"] if out == "prev" else ["x", "y"]
        _refused(["merge", *inputs, "--out", out, "--force", "--quiet"], capsys, match)
        assert _snapshot(work) == before
    assert (tmp_path / "link").is_symlink()


def test_force_replaces_only_a_circumerge_output(adapters, tmp_path, capsys):
    dirs, _ = adapters
    other = tmp_path / "other_run"  # a run folder another tool wrote: its files are not ours
    from icml26_shared.io import atomic_dir

    with atomic_dir(other, writer="someone-else 1.0") as tmp:
        (tmp / "result.json").write_text("{}")
    before = _snapshot(other)
    _refused(["merge", *map(str, dirs), "--out", str(other), "--force", "--quiet"], capsys,
             "not written by circumerge")
    assert _snapshot(other) == before
    out = tmp_path / "merged"
    assert main(["merge", *map(str, dirs), "--out", str(out), "--quiet"]) == 0
    first = _snapshot(out)
    assert main(["merge", *map(str, dirs), "--out", str(out), "--force", "--rule", "ties", "--quiet"]) == 0
    assert _snapshot(out) != first  # replaced
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    _refused(["merge", *map(str, dirs), "--out", str(link), "--quiet"], capsys, "symbolic link")


def test_default_space_is_core(adapters, tmp_path, capsys):
    import inspect

    from circumerge.config import MergeConfig
    from circumerge.spaces import merge_layer

    assert MergeConfig().space == "core"
    assert inspect.signature(merge_layer).parameters["space"].default == "core"
    dirs, _ = adapters
    a, b = tmp_path / "default", tmp_path / "core"
    assert main(["merge", *map(str, dirs), "--out", str(a), "--rule", "ties", "--quiet"]) == 0
    assert main(["merge", *map(str, dirs), "--out", str(b), "--rule", "ties", "--space", "core", "--quiet"]) == 0
    assert _snapshot(a) == _snapshot(b)


ALL_SPACES = ["full", "knots", "core", "core_svd", "circulant", "peft"]


@pytest.mark.parametrize("space", ALL_SPACES)
def test_an_adapter_minus_itself_is_zero_in_every_space(peft_factors, space):
    from circumerge.spaces import merge_layer

    A0, B0 = peft_factors["q"][0][0], peft_factors["q"][1][0]
    A, B = merge_layer([A0, A0], [B0, B0], space=space, rule="ta", weights=[1.0, -1.0])
    assert float((B @ A).norm()) <= 1e-5 * float((B0 @ A0).norm())


def test_negative_weights_match_peft_cat_through_the_cli(adapters, tmp_path, capsys):
    """TA with (1, −0.5): the merged file gives peft's own ``cat`` merge's logits."""
    dirs, _ = adapters
    out = tmp_path / "merged"
    assert main(["merge", str(dirs[0]), str(dirs[1]), "--out", str(out), "--weights", "1,-0.5",
                 "--quiet"]) == 0
    capsys.readouterr()
    pm = PeftModel.from_pretrained(base_model(), str(dirs[0]), adapter_name="a0")
    pm.load_adapter(str(dirs[1]), adapter_name="a1")
    pm.add_weighted_adapter(["a0", "a1"], [1.0, -0.5], "cat", combination_type="cat")
    pm.set_adapter("cat")
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    loaded = PeftModel.from_pretrained(base_model(), str(out)).eval()
    with torch.no_grad():
        got, want = loaded(x), pm.eval()(x)
        plus = expected_forward(x, facs_deltas(factors_from(dirs[:2])), [1.0, 0.5])
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    assert not torch.allclose(got, plus, atol=1e-3)  # the sign was applied


def test_ties_with_a_negative_weight_matches_peft(peft_factors):
    """TIES with weights (1, −0.5, 0.8): full space and peft's own ``ties_svd`` agree with peft's
    ``ties`` on the dense stack, truncated to the stacked rank Σ r_t as both spaces return it."""
    from circumerge.spaces import merge_layer

    from icml26_shared.merge import peft_merge_utils

    As, Bs = peft_factors["q"]
    w = [1.0, -0.5, 0.8]
    dense = peft_merge_utils().ties([b @ a for a, b in zip(As, Bs, strict=True)], torch.tensor(w), 0.2,
                                    "total")
    k = sum(a.shape[0] for a in As)
    U, S, Vh = torch.linalg.svd(dense.double())
    want = ((U[:, :k] * S[:k]) @ Vh[:k]).float()
    for space in ("full", "peft"):
        A, B = merge_layer(As, Bs, space=space, rule="ties", weights=w)
        assert torch.allclose(B @ A, want, atol=1e-5), space
    A, B = merge_layer(As, Bs, space="full", rule="ties", weights=[1.0, 0.5, 0.8])
    assert not torch.allclose(B @ A, want, atol=1e-3)


def test_merge_time_excludes_imports_and_setup(adapters, tmp_path, monkeypatch):
    """A slow import (peft pulls transformers) lands in setup_seconds, never in merge_seconds."""
    import time

    import circumerge.adapters as cad

    real = cad._warm_up

    def slow(cfg):
        time.sleep(0.5)
        real(cfg)

    monkeypatch.setattr(cad, "_warm_up", slow)
    dirs, _ = adapters
    summary = cad.merge_adapters(dirs, tmp_path / "out")
    assert summary["setup_seconds"] >= 0.5 > summary["merge_seconds"]
