"""train-tiny: the char-level Llama is trained on training-split prompts only, saved as a model
folder every verb loads, with its dev curve; and the quick reproduction's whole path (train,
collect, H1, LOTO H2 over two protocol seeds) runs end to end on a toy budget."""

from __future__ import annotations

import json
import random

import pytest
from decodeshare.cli import main
from decodeshare.io import char_tokenizer, load_model
from decodeshare.tasks import GEN_GENERATORS, make_gen_tasks, split_of
from decodeshare.train import _train_batch, teacher_forced_em, train_tiny

TOY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=4, max_position_embeddings=64)


def test_training_batches_hold_only_training_prompts():
    batch = _train_batch(random.Random(0), tuple(GEN_GENERATORS), 400)
    assert {split_of(p) for p, _ in batch} == {"train"}
    held = {it["prompt"] for it in make_gen_tasks(40, 0)} | {it["prompt"] for it in make_gen_tasks(40, 0, split="dev")}
    assert not held & {p for p, _ in batch}


def test_train_tiny_saves_a_loadable_folder_with_its_curve(tmp_path):
    out = tmp_path / "m"
    curve = train_tiny(out, steps=3, eval_every=2, arch=TOY)
    assert curve["dev_steps"] == [2, 3] and len(curve["dev_em"]) == 2 == len(curve["train_loss"])
    saved = json.loads((out / "train_curve.json").read_text())
    assert saved["dev_em"] == curve["dev_em"]
    model, tok = load_model(str(out))
    assert model.config.num_hidden_layers == 2 and tok.padding_side == "left"
    dev = [(it["prompt"], it["target"]) for it in make_gen_tasks(3, 0, ("add",), split="dev")]
    assert teacher_forced_em(model, tok, dev) == pytest.approx(curve["dev_em"][-1])


def test_step_rule_stops_a_run_whose_dev_em_stalls_and_the_cap_binds_otherwise(tmp_path):
    """lr = 0: dev EM never moves, so the rule (patience 2) fires at the third evaluation, far
    before the cap; with the rule off the same run trains every step of the cap."""
    kw = dict(eval_every=1, arch=TOY, lr=0.0, dev_per_task=4, tasks=("add", "next"))
    stalled = train_tiny(tmp_path / "a", steps=50, **kw)
    assert stalled["stopped_at"] == 3 == stalled["steps"] and stalled["dev_steps"] == [1, 2, 3]
    assert set(stalled["dev_em_by_task"]) == {"add", "next"}
    assert all(len(v) == 3 for v in stalled["dev_em_by_task"].values())
    fixed = train_tiny(tmp_path / "b", steps=5, rule=False, **kw)
    assert fixed["stopped_at"] is None and fixed["steps"] == 5 and fixed["dev_steps"] == [1, 2, 3, 4, 5]
    saved = json.loads((tmp_path / "a" / "train_curve.json").read_text())
    assert saved["stopped_at"] == 3 and saved["recipe"]["lr"] == 0.0


def test_teacher_forced_em_is_one_on_a_model_that_emits_the_target():
    """An oracle: logits that put all mass on the true next token give EM 1; shifted, EM 0."""
    import torch

    tok = char_tokenizer()

    class Oracle(torch.nn.Module):
        def __init__(self, shift):
            super().__init__()
            self.shift = shift

        def forward(self, input_ids, attention_mask):
            nxt = torch.roll(input_ids, -1, 1) + self.shift
            return type("O", (), {"logits": torch.nn.functional.one_hot(nxt % len(tok), len(tok)).float()})

    items = [("add 1+2", "3"), ("reverse abcd", "dcba")]
    assert teacher_forced_em(Oracle(0), tok, items) == 1.0
    assert teacher_forced_em(Oracle(1), tok, items) == 0.0


def test_cli_train_tiny_refuses_an_existing_folder(tmp_path, capsys):
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["train-tiny", "--out", str(out), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists" in err[0]
    assert (out / "keep.txt").read_text() == "mine"


def test_cli_train_tiny_fixed_steps_and_recipe_flags(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["train-tiny", "--out", str(out), "--steps", "2", "--fixed-steps", "--lr", "1e-3",
                 "--warmup", "0", "--clip", "0.5", "--eval-every", "1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["steps"] == 2 and printed["stopped_by_rule"] is False
    recipe = json.loads((out / "train_curve.json").read_text())["recipe"]
    assert (recipe["lr"], recipe["warmup"], recipe["clip"]) == (1e-3, 0, 0.5)
    assert main(["train-tiny", "--out", str(tmp_path / "n"), "--lr", "-1"]) == 2
    assert not (tmp_path / "n").exists()


def test_quick_path_runs_end_to_end_on_a_toy_budget(tmp_path):
    from decodeshare.experiments import _quick_tiny

    res = _quick_tiny(tmp_path, 0, cfg=dict(calib=6, evals=3, trials=5, min_clean_em=0.0, layers=(0, 1), main=1, tau_k=0.1),
                      train_kw=dict(steps=2, eval_every=1, arch=TOY, lr=2e-3, warmup=0, clip=None))
    assert (tmp_path / "model" / "config.json").exists()
    assert [c.metric for c in res.curves] == ["dev_em_teacher_forced"] * 6 + ["train_loss"]
    assert {c.method for c in res.curves} == {"char_llama", *(f"char_llama:{t}" for t in GEN_GENERATORS)}
    ids = {c.claim_id for c in res.claims}
    assert {"h1_nulls", "h2_vs_matched", "h2_vs_prefill", "steer_rank"} <= ids
    h2 = [c for c in res.claims if c.claim_id == "h2_vs_matched"]
    assert len(h2) == 3 and all("seeds [0, 1]" in c.note for c in h2)
    assert res.get("mechanism", "all_interventions", "prefill_passes_modified").value == 0
    assert res.get("mechanism", "all_interventions", "decode_passes_modified").value > 0
