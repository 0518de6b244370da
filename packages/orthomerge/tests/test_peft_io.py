"""Real adapters: peft-made OFT / BOFT / LoRA on tiny causal LMs, merged by the CLI, loaded by peft."""

from __future__ import annotations

import json

import pytest
import torch
from orthomerge import core
from orthomerge.cli import main
from safetensors.torch import load_file, save_file


def test_peft_packing_and_cayley_equal_ours():
    from peft.tuners.oft.layer import OFTRotationModule

    b, nb = 6, 3
    vec = 0.3 * torch.randn(nb, core.n_params(b), dtype=torch.float64)
    mod = OFTRotationModule(nb, core.n_params(b), b, nb * b, use_cayley_neumann=False)
    assert torch.equal(mod._pytorch_skew_symmetric(vec, b), core.skew_from_vec(vec, b))
    exact = mod._cayley_batch(vec, b, use_cayley_neumann=False)
    assert torch.allclose(exact, core.cayley(core.skew_from_vec(vec, b), "peft"), atol=1e-12)
    neu = mod._cayley_batch(vec, b, use_cayley_neumann=True, num_neumann_terms=5)
    assert torch.allclose(neu, core.cayley_neumann(core.skew_from_vec(vec, b), 5), atol=1e-12)


def test_one_adapter_or_copies_merge_to_the_same_outputs(lm, tmp_path, kit):
    a = lm["oft"][0]
    ref = kit.logits(kit.load_peft(lm["base"], a))
    for k, adapters in ((1, [a]), (3, [a, a, a])):
        out = tmp_path / f"m{k}"
        assert main(["oft", *map(str, adapters), "--out", str(out), "--quiet"]) == 0
        assert torch.allclose(kit.logits(kit.load_peft(lm["base"], out)), ref, atol=1e-5)
        saved, orig = load_file(out / "adapter_model.safetensors"), load_file(a / "adapter_model.safetensors")
        assert all(torch.allclose(saved[k2], orig[k2], atol=1e-6) for k2 in orig)


def test_merged_adapter_loads_is_orthogonal_and_dense_equals_merge_and_unload(lm_arch, tmp_path, kit):
    lm = lm_arch
    from transformers import AutoModelForCausalLM

    out, dense = tmp_path / "merged", tmp_path / "dense"
    ads = list(map(str, lm["oft"]))
    assert main(["oft", *ads, "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "adapter_config.json").read_text())["peft_type"] == "OFT"
    merged = load_file(out / "adapter_model.safetensors")
    orig = [load_file(a / "adapter_model.safetensors") for a in lm["oft"]]
    for key, vec in merged.items():
        Q = core.skew_from_vec(vec.double(), 8)
        assert core.orthogonality_error(core.cayley(Q, "peft")) < 1e-6
        theta = [float(torch.linalg.vector_norm(o[key].double())) * 2 ** 0.5 for o in orig]
        assert float(torch.linalg.vector_norm(Q)) == pytest.approx(sum(theta) / 3, rel=1e-5)
    pm = kit.load_peft(lm["base"], out)
    y_adapter = kit.logits(pm)
    oracle = pm.merge_and_unload().state_dict()
    assert main(["oft", *ads, "--out", str(dense), "--base", str(lm["base"]), "--dense", "--quiet"]) == 0
    assert (dense / "config.json").is_file()
    ours = load_file(dense / "model.safetensors")
    for k, v in oracle.items():
        if k in ours:
            assert torch.allclose(ours[k], v, atol=1e-5), k
    y_dense = kit.logits(AutoModelForCausalLM.from_pretrained(dense).eval())
    assert torch.allclose(y_dense, y_adapter, atol=1e-4)
    # the magnitude correction moved the model away from the plain average of Q
    avg = tmp_path / "avg"
    assert main(["oft", *ads, "--out", str(avg), "--method", "avg", "--quiet"]) == 0
    assert not torch.allclose(kit.logits(kit.load_peft(lm["base"], avg)), y_adapter, atol=1e-4)


def test_euclidean_dense_merge_of_oft_experts(lm, tmp_path, kit):
    from transformers import AutoModelForCausalLM

    ads = list(map(str, lm["oft"][:2]))
    out = tmp_path / "ta"
    assert main(["oft", *ads, "--out", str(out), "--method", "ta", "--scale", "1", "--base",
                 str(lm["base"]), "--dense", "--quiet"]) == 0
    base = AutoModelForCausalLM.from_pretrained(lm["base"]).state_dict()
    experts = [kit.load_peft(lm["base"], a).merge_and_unload().state_dict() for a in lm["oft"][:2]]
    got = load_file(out / "model.safetensors")
    key = next(k for k in got if "q_proj" in k)
    want = base[key] + (experts[0][key] - base[key]) + (experts[1][key] - base[key])
    assert torch.allclose(got[key], want, atol=1e-5)
    # TIES on the dense OFT deltas: model-scope trim (default) and peft's per-tensor trim differ
    outs = {}
    for scope in ("model", "tensor"):
        outs[scope] = tmp_path / f"ties_{scope}"
        assert main(["oft", *ads, "--out", str(outs[scope]), "--method", "ties", "--trim-scope", scope,
                     "--base", str(lm["base"]), "--dense", "--quiet"]) == 0
    wm, wt = (load_file(outs[s] / "model.safetensors") for s in ("model", "tensor"))
    assert all(torch.isfinite(v).all() for v in wm.values())
    assert any(not torch.equal(wm[k], wt[k]) for k in wm if "proj" in k)


def test_neumann_block_share_and_legacy_adapters(lm, tmp_path, kit):
    neu = kit.make_adapter(lm["base"], tmp_path / "neu", kit.oft_config(use_cayley_neumann=True), seed=7)
    out = tmp_path / "neu_m"
    assert main(["oft", str(neu), str(neu), "--out", str(out), "--quiet"]) == 0
    assert torch.allclose(kit.logits(kit.load_peft(lm["base"], out)), kit.logits(kit.load_peft(lm["base"], neu)), atol=1e-5)
    shared = kit.make_adapter(lm["base"], tmp_path / "bs", kit.oft_config(block_share=True), seed=8)
    out = tmp_path / "bs_m"
    assert main(["oft", str(shared), "--out", str(out), "--quiet"]) == 0
    assert torch.allclose(kit.logits(kit.load_peft(lm["base"], out)), kit.logits(kit.load_peft(lm["base"], shared)), atol=1e-5)
    # a peft <= 0.15 adapter: full b×b oft_r matrices whose skew part is the generator
    a = lm["oft"][0]
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    sd = load_file(a / "adapter_model.safetensors")
    save_file({k.replace(".oft_R.weight", ".oft_r"): core.skew_from_vec(v, 8) + torch.eye(8) for k, v in sd.items()},
              str(legacy / "adapter_model.safetensors"))
    cfg = json.loads((a / "adapter_config.json").read_text())
    cfg.pop("use_cayley_neumann")
    (legacy / "adapter_config.json").write_text(json.dumps(cfg))
    out = tmp_path / "legacy_m"
    assert main(["oft", str(legacy), "--out", str(out), "--quiet"]) == 0
    assert torch.allclose(kit.logits(kit.load_peft(lm["base"], out)), kit.logits(kit.load_peft(lm["base"], a)), atol=1e-5)


def test_boft_adapters_merge_and_load(lm, tmp_path, kit):
    from peft import BOFTConfig

    cfg = BOFTConfig(boft_block_size=4, boft_n_butterfly_factor=2, target_modules=["q_proj", "v_proj"],
                     init_weights=False)
    ads = [kit.make_adapter(lm["base"], tmp_path / f"boft{i}", cfg, seed=20 + i) for i in range(2)]
    with torch.no_grad():  # plant non-trivial scales to check their geometric mean
        for i, a in enumerate(ads):
            sd = load_file(a / "adapter_model.safetensors")
            save_file({k: (torch.full_like(v, 2.0 ** (2 * i)) if k.endswith("boft_s") else v) for k, v in sd.items()},
                      str(a / "adapter_model.safetensors"))
    one = tmp_path / "one"
    assert main(["oft", str(ads[0]), str(ads[0]), "--out", str(one), "--quiet"]) == 0
    assert torch.allclose(kit.logits(kit.load_peft(lm["base"], one)), kit.logits(kit.load_peft(lm["base"], ads[0])), atol=1e-5)
    out = tmp_path / "both"
    assert main(["oft", *map(str, ads), "--out", str(out), "--quiet"]) == 0
    merged = load_file(out / "adapter_model.safetensors")
    s = next(v for k, v in merged.items() if k.endswith("boft_s"))
    assert torch.allclose(s, torch.full_like(s, 2.0))  # sqrt(1 · 4)
    kit.logits(kit.load_peft(lm["base"], out))  # loads


def test_full_and_lora_experts_through_the_cli(lm, tmp_path, kit):
    from peft import LoraConfig

    lora = kit.make_adapter(lm["base"], tmp_path / "lora", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"],
                                                                      init_lora_weights=False), seed=30)
    expert_sd = kit.load_peft(lm["base"], lora).merge_and_unload().state_dict()
    out = tmp_path / "one"
    assert main(["full", "--base", str(lm["base"]), "--experts", str(lora), "--out", str(out),
                 "--residual-scale", "1", "--quiet"]) == 0
    got = load_file(out / "model.safetensors")
    for k, v in got.items():
        assert torch.allclose(v, expert_sd[k], atol=1e-5), k
    assert (out / "config.json").is_file()
    # two full checkpoints with opposing rows: TIES after OrthoMerge-C differs from TIES alone
    base = load_file(lm["base"] / "model.safetensors")
    noise = {k: torch.randn(v.shape, generator=torch.Generator().manual_seed(0)) for k, v in base.items()}
    ex = []
    for i in range(2):
        g = torch.Generator().manual_seed(i + 1)
        sd = {k: v + 0.02 * ((1.0, -1.5)[i] * noise[k] + 0.3 * torch.randn(v.shape, generator=g))
              for k, v in base.items()}
        save_file(sd, str(tmp_path / f"ft{i}.safetensors"))
        ex.append(str(tmp_path / f"ft{i}.safetensors"))
    c, n = tmp_path / "c", tmp_path / "n"
    assert main(["full", "--base", str(lm["base"]), "--experts", *ex, "--out", str(c), "--ortho", "conflict",
                 "--residual", "ties", "--quiet"]) == 0
    assert main(["full", "--base", str(lm["base"]), "--experts", *ex, "--out", str(n), "--ortho", "none",
                 "--residual", "ties", "--quiet"]) == 0
    wc, wn = load_file(c / "model.safetensors"), load_file(n / "model.safetensors")
    key = next(k for k in wc if k.endswith("q_proj.weight"))
    assert not torch.allclose(wc[key], wn[key], atol=1e-4)
    # 1-D tensors: the residual rule alone either way, but the model-scope trim's cut is each
    # expert's top 20 % over all its residuals, which the rotations change: the kept set of the
    # norm weights moves with it (under --trim-scope tensor they would be equal)
    norm = next(k for k in wc if k.endswith("norm.weight"))
    assert torch.isfinite(wc[norm]).all() and not torch.equal(wc[norm], wn[norm])
    from transformers import AutoModelForCausalLM

    y = kit.logits(AutoModelForCausalLM.from_pretrained(c).eval())
    assert torch.isfinite(y).all()


def _generators(adapter, std, seed):
    """Overwrite an adapter's generators with N(0, std²) entries (what training leaves)."""
    f = adapter / "adapter_model.safetensors"
    sd = load_file(f)
    g = torch.Generator().manual_seed(seed)
    save_file({k: std * torch.randn(v.shape, generator=g) if "oft_R" in k else v for k, v in sd.items()}, str(f))
    return adapter


def test_neumann_adapters_warn_and_exact_cayley_writes_a_rotation(lm, tmp_path, kit, capsys):
    base = lm["base"]
    neu = [_generators(kit.make_adapter(base, tmp_path / f"neu{i}", kit.oft_config(use_cayley_neumann=True), seed=50 + i),
                       0.1, i) for i in range(2)]
    tiny = [_generators(kit.make_adapter(base, tmp_path / f"tiny{i}", kit.oft_config(use_cayley_neumann=True), seed=52 + i),
                        1e-4, i) for i in range(2)]
    capsys.readouterr()
    m = tmp_path / "m"
    assert main(["oft", *map(str, neu), "--out", str(m), "--quiet"]) == 0
    cap = capsys.readouterr()
    warn = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(warn) == 1 and warn[0].startswith("orthomerge: warning:") and "use_cayley_neumann=False" in warn[0]
    assert "proj" in warn[0] and "--exact-cayley" in warn[0]
    assert "Neumann path, 5 terms" in cap.out
    # diagnose --json reports the same error per module, on the path peft uses
    assert main(["diagnose", str(m), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["cayley_path"] == "neumann" for r in rows) and max(r["orthogonality_error"] for r in rows) > 1e-3
    # --exact-cayley: the merged adapter on the exact path is a rotation, near the Neumann one
    e = tmp_path / "e"
    assert main(["oft", *map(str, neu), "--out", str(e), "--exact-cayley", "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "max ‖R_Neumann − R_exact‖₂" in cap.out
    assert json.loads((e / "adapter_config.json").read_text())["use_cayley_neumann"] is False
    assert main(["diagnose", str(e), "--json"]) == 0
    assert max(r["orthogonality_error"] for r in json.loads(capsys.readouterr().out)) < 1e-6
    y_neu, y_exact = kit.logits(kit.load_peft(base, m)), kit.logits(kit.load_peft(base, e))
    from transformers import AutoModelForCausalLM

    y_base = kit.logits(AutoModelForCausalLM.from_pretrained(base).eval())
    # same direction of turn (the exact path is the transpose convention: -Q* is stored)
    assert (y_exact - y_neu).norm() < (y_exact - y_base).norm()
    # no warning: tiny Neumann generators, and the exact path whatever the size
    for ads in (tiny, lm["oft"][:2]):
        out = tmp_path / f"q{len(list(tmp_path.iterdir()))}"
        assert main(["oft", *map(str, ads), "--out", str(out), "--quiet"]) == 0
        assert "warning" not in capsys.readouterr().err
