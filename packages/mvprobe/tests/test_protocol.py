"""The reproduction's protocol: Thm 1 against all four probe sets, convergence flags, curves and
val-chosen settings in the results, global RNG untouched, labels refused in one line, PEFT sweeps."""

from __future__ import annotations

import json

import pytest
import torch
from mvprobe.cli import main
from mvprobe.core import MVProbe, theorem1_collision, theorem1_gaps
from mvprobe.train import converged


def test_theorem1_only_the_gram_views_tell_the_collision_apart():
    torch.manual_seed(0)
    model = MVProbe((64, 48), n_probes=12, proj_dim=8, rep_dim=16, n_outputs=10)
    X1 = 0.1 * torch.randn(64, 48)
    X2 = theorem1_collision(model, X1, seed=1)
    P = {b: p.detach() for b, p in model.probes.items()}
    for lhs in (X1 @ P["xu"] - X2 @ P["xu"], X1 @ P["xtxu"] - X2 @ P["xtxu"],
                X1.T @ P["xtu"] - X2.T @ P["xtu"], X1.T @ P["xxtu"] - X2.T @ P["xxtu"]):
        assert lhs.abs().max() < 1e-5  # every first-order response collides
    gaps = theorem1_gaps(model, X1, seed=1)
    assert gaps["first_order_logit_gap"] < 1e-5
    assert gaps["mvprobe_logit_gap"] > 1e-2  # fails when the Gram branches leave `encode`
    with pytest.raises(ValueError, match="2r < min"):
        theorem1_collision(MVProbe((16, 16), n_probes=8, proj_dim=4, rep_dim=4, n_outputs=2), X1[:16, :16])


def test_a_kept_epoch_near_the_cap_is_not_converged():
    assert converged(best_epoch=100, epochs=300, patience=40)
    assert not converged(best_epoch=261, epochs=300, patience=40)
    assert converged(best_epoch=260, epochs=300, patience=40)
    assert not converged(best_epoch=480, epochs=500, patience=None)  # window: a tenth of the cap


def test_fit_leaves_the_global_random_state_alone():
    from mvprobe.baselines import build
    from mvprobe.config import ProbeConfig, TrainConfig

    X, Y = torch.randn(20, 8, 6), (torch.rand(20, 3) > 0.5).float()
    learner = build("mvprobe", (8, 6), 3, ProbeConfig(n_probes=2, proj_dim=2, rep_dim=4))
    state = torch.get_rng_state()
    info = learner.fit(X, Y, X[:5], Y[:5], TrainConfig(epochs=2, seed=3))
    assert torch.equal(torch.get_rng_state(), state)
    again = build("mvprobe", (8, 6), 3, ProbeConfig(n_probes=2, proj_dim=2, rep_dim=4))
    assert again.fit(X, Y, X[:5], Y[:5], TrainConfig(epochs=2, seed=3))["best_val_accuracy"] == info["best_val_accuracy"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from mvprobe.experiments import _jungle

    return _jungle("smoke", tmp_path_factory.mktemp("smoke"), 0)


def test_smoke_keeps_curves_choices_and_checks_apart(smoke):
    from mvprobe.experiments import ARMS

    torch_arms = [a for a in ARMS if a not in ("statnn", "prior")]
    curves = {(c.method, c.metric) for c in smoke.curves}
    for arm in torch_arms:
        assert (arm, "train_loss") in curves and (arm, "val_per_label_accuracy") in curves, arm
    rows = {(r.method, r.metric) for r in smoke.rows}
    for arm in torch_arms:
        assert (arm, "lr") in rows and (arm, "best_epoch") in rows, arm
    assert ("prior", "per_label_accuracy") in rows
    kinds = {c.claim_id: c.kind for c in smoke.claims}
    assert {k for k, v in kinds.items() if v == "check"} == {"thm1", "thm3", "probex_below_ceiling",
                                                              "statnn_below_ceiling"}


def _jsonl(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for n in needles:
        assert n in err[0], err


def test_unknown_and_missing_labels_end_in_one_line(tmp_path, capsys):
    from safetensors.torch import save_file

    paths = []
    for i in range(6):
        p = tmp_path / f"m{i}.safetensors"
        save_file({"w": torch.randn(6, 5)}, str(p))
        paths.append(str(p))
    train = _jsonl(tmp_path / "train.jsonl", [{"path": p, "labels": [str(i % 3)]} for i, p in enumerate(paths)])
    val = _jsonl(tmp_path / "val.jsonl", [{"path": paths[0], "labels": ["0"]}, {"path": paths[1], "labels": ["cat"]}])
    nolab = _jsonl(tmp_path / "nolab.jsonl", [{"path": p} for p in paths])
    out = tmp_path / "probe"
    small = ["--n-probes", "2", "--proj-dim", "2", "--rep-dim", "4", "--epochs", "2"]
    for method in ("mvprobe", "statnn"):
        assert main(["train", "--data", str(nolab), "--layer", "w", "--out", str(out), "--method", method, *small]) == 2
        _one_line(capsys, "nolab.jsonl", "no record has labels")
    assert main(["train", "--data", str(train), "--layer", "w", "--out", str(out), "--val", str(val), *small]) == 2
    _one_line(capsys, "val.jsonl:2", "'cat'")
    assert not out.exists()
    assert main(["train", "--data", str(train), "--layer", "w", "--out", str(out), *small]) == 0
    bad = _jsonl(tmp_path / "test.jsonl", [{"path": paths[2], "labels": ["1"]}, {"path": paths[3], "labels": ["2", "dgo"]}])
    capsys.readouterr()
    assert main(["eval", "--probe", str(out), "--data", str(bad)]) == 2
    _one_line(capsys, "test.jsonl:2", "'dgo'")


def test_sweep_layers_all_on_peft_adapters(tmp_path, capsys):
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from icml26_shared.testing import save_tiny_llama

    base = tmp_path / "base"
    save_tiny_llama(base)
    recs = []
    for i in range(8):
        torch.manual_seed(i)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                               LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                          init_lora_weights=False))
        model.save_pretrained(tmp_path / f"a{i}")
        recs.append({"path": str(tmp_path / f"a{i}"), "labels": [str(i % 2)]})
    train, val = _jsonl(tmp_path / "train.jsonl", recs[:6]), _jsonl(tmp_path / "val.jsonl", recs[6:])
    capsys.readouterr()
    assert main(["sweep-layers", "--data", str(train), "--val", str(val), "--layers", "all", "--json",
                 "--n-probes", "1", "--proj-dim", "2", "--rep-dim", "2", "--epochs", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [r["layer"] for r in out["layers"]]
    assert len(names) == 2 and all(n.endswith(("q_proj", "v_proj")) for n in names)
    assert out["best_layer"] in names
