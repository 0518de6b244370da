"""The language-model run (``orthomerge lm-demo``): the same code path end to end on a tiny Llama
with SmolLM2's tokenizer, the answer-only loss, the splits, and the dense rules' λ."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from orthomerge import lm as lmrun
from orthomerge.cli import main
from orthomerge.config import OFTMergeConfig
from orthomerge.io import Adapter
from orthomerge.merging import oft_dense

TINY = dict(seeds=2, max_steps=4, eval_every=2, batch=4, block=8, n_dev=6, n_test=6, n_general=4, general_len=16,
            lrs=(1e-2, 3e-2), grids={"orthomerge": (0.5, 1.0), "avg": (1.0, 2.0), "ta": (0.5,), "ties": (1.0,),
                                     "tsv": (1.0,)})


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from icml26_shared.data import smollm2_hf_dir

    return AutoTokenizer.from_pretrained(smollm2_hf_dir())


def tiny_loader(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    def load():
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          tie_word_embeddings=True)
        return LlamaForCausalLM(cfg), tok
    return load


def test_tasks_and_splits_are_disjoint(tok):
    assert lmrun.example("sort", ["k", "d", "a"]) == ("sort: k d a ->", " a d k")
    assert lmrun.example("reverse", ["k", "d", "a"])[1] == " a d k"
    assert lmrun.example("upper", ["k", "d", "a"])[1] == " K D A"
    cfg = lmrun.LMConfig(n_dev=20, n_test=30, batch=16)
    data = lmrun.TaskData(tok, cfg, 3)
    assert len(data.held) == 3 * 50  # dev and test strings all distinct, over every task
    held = {tuple(tok.decode(p)) for t in lmrun.TASKS for part in ("dev", "test") for p, _ in data.splits[t][part]}
    batches = data.train_batches("sort", 0)
    for _ in range(20):
        for p, _ in next(batches):
            assert tuple(tok.decode(p)) not in held


def test_answer_loss_is_the_answer_tokens_only(tok):
    """Left padding + logits_to_keep equal the plain full-sequence loss over the answer tokens."""
    model = tiny_loader(tok)()[0].eval()
    data = lmrun.TaskData(tok, lmrun.LMConfig(n_dev=4, n_test=4), 0)
    batch = data.splits["reverse"]["dev"][:2] + data.splits["upper"]["dev"][:2]  # different lengths
    with torch.no_grad():
        loss, exact = lmrun.answer_losses(model, batch, tok.eos_token_id)
    for i, (p, a) in enumerate(batch):
        ids = torch.tensor([p + a])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        ref = F.cross_entropy(logits[len(p) - 1:-1], torch.tensor(a))
        assert float(loss[i]) == pytest.approx(float(ref), rel=1e-4, abs=1e-5)
        assert bool(exact[i]) == bool((logits[len(p) - 1:-1].argmax(-1) == torch.tensor(a)).all())


def test_merged_weights_equal_oft_dense_and_one_expert_equals_peft(lm, kit):
    """λ·rule(Δ) from the rule's λ = 1 weights equals ``oft_dense`` at λ; a one-adapter
    OrthoMerge and ``expert_weights`` equal peft's ``merge_and_unload``."""
    from transformers import AutoModelForCausalLM

    W0 = lmrun.base_weights(AutoModelForCausalLM.from_pretrained(lm["base"]))
    ads = [Adapter.open(d) for d in lm["oft"]]
    for m in lmrun.DENSE:
        unit = lmrun.merged_weights(ads, W0, m, 1.0)
        for lam in (0.3, 1.7):
            ref = oft_dense(ads, W0, OFTMergeConfig(method=m, scale=lam, density=lmrun._density(m)))
            ours = lmrun.merged_weights(ads, W0, m, lam, unit)
            assert all(torch.allclose(ours[k], ref[k].float(), atol=1e-5) for k in W0)
    oracle = kit.load_peft(lm["base"], lm["oft"][0]).merge_and_unload().state_dict()
    for got in (lmrun.expert_weights(ads[0], W0), lmrun.merged_weights(ads[:1], W0, "orthomerge", 1.0)):
        assert all(torch.allclose(got[k], oracle[k], atol=1e-5) for k in W0)
    om, avg = (lmrun.merged_weights(ads, W0, m, 1.0) for m in ("orthomerge", "avg"))
    assert not all(torch.allclose(om[k], avg[k], atol=1e-6) for k in W0)  # the magnitude correction acts


def test_lm_run_end_to_end_on_a_tiny_llama(tok, tmp_path, monkeypatch):
    cfg = lmrun.LMConfig(**TINY)
    events, evaluate = [], lmrun.eval_answers
    test_sets = [[tuple(p + a) for p, a in lmrun.TaskData(tok, cfg, s).splits[t]["test"]]
                 for s in (0, 1) for t in lmrun.TASKS]

    def spy(model, examples, pad_id, chunk=24):
        events.append("test" if [tuple(p + a) for p, a in examples] in test_sets else "other")
        return evaluate(model, examples, pad_id, chunk)

    monkeypatch.setattr(lmrun, "eval_answers", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = lmrun.run(tmp_path, cfg, tiny_loader(tok), log=lambda m: events.append(m))
    last_sweep = max(i for i, e in enumerate(events) if e.endswith("dev sweeps") or "dev sweeps " in e)
    assert "test" not in events[:last_sweep] and "test" in events[last_sweep:]  # nothing chosen on test
    names = {r.method for r in res.rows if r.metric == "test answer loss"}
    assert names == {"base", "orthomerge", "orthomerge λ=1", "avg", "avg λ=1", "TA", "TIES", "TIES, authors' λ=1",
                     "TSV-M", "expert (own task)"}
    for t in lmrun.TASKS:  # one adapter per task and seed, loadable; the lr grid only on the first seed
        assert Adapter.open(tmp_path / "adapters" / "seed1" / t).peft_type == "OFT"
        assert {p.name for p in (tmp_path / "adapters" / "seed0").iterdir() if p.name.startswith(t)} == \
            {f"{t}-lr0.01", f"{t}-lr0.03"}
    curves = {(c.method, c.split, c.seed) for c in res.curves}
    assert ("expert sort lr 0.01", "dev", 0) in curves and ("expert sort lr 0.01", "train", 0) in curves
    claims = {c.claim_id: c for c in res.claims}
    assert set(claims) == {"LM1", "LM2", "LM-check"}
    assert claims["LM-check"].kind == "check" and claims["LM-check"].status == "held"
    assert claims["LM1"].interval is not None and claims["LM2"].interval is not None
    # base and merges never trained: the base's loss is what the base model gives
    assert res.get("lm", "expert (own task)", "test answer loss").value < res.get("lm", "base", "test answer loss").value
    assert "| orthomerge |" in lmrun.table(res)
    json.dumps(res.to_dict(), allow_nan=False, default=str)


def test_lm_demo_command(tok, tmp_path, monkeypatch, capsys):
    import icml26_shared.data

    monkeypatch.setattr(icml26_shared.data, "load_smollm2", tiny_loader(tok))
    real = lmrun.LMConfig
    monkeypatch.setattr(lmrun, "LMConfig", lambda **kw: real(**{**TINY, **kw}))  # small splits and grids
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["lm-demo", "--out", str(out), "--seeds", "1", "--max-steps", "2", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "| TIES, authors' λ=1 |" in text and "LM2 " in text
    data = json.loads((out / "results.json").read_text())
    assert {c["claim_id"] for c in data["claims"]} == {"LM1", "LM2", "LM-check"}
    assert (out / "table.md").read_text().startswith("| model |")
    (out / "notes.txt").write_text("mine")
    for argv in (["--seeds", "0"], ["--force"], []):  # bad input; a folder holding a user's file
        assert main(["lm-demo", "--out", str(out), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("orthomerge: error:") and "\n" not in err
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_smollm2_expert_learns_and_peft_equals_our_weights(tmp_path):
    """SmolLM2-135M-Instruct (offline): a few OFT steps lower the dev loss; peft's model and our
    W0·Rᵀ agree (the ``lm-demo`` code path on the real model)."""
    from icml26_shared.data import load_smollm2

    model, tok = load_smollm2()
    for p in model.parameters():
        p.requires_grad_(False)
    cfg = lmrun.LMConfig(max_steps=4, eval_every=2, patience=5, n_dev=8, n_test=4)
    data = lmrun.TaskData(tok, cfg, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, best, curve, gap = lmrun.train_expert(model, data, "upper", 3e-3, 0, tmp_path / "upper", tok.eos_token_id)
    assert best < curve["dev"][0] and gap < 1e-3
