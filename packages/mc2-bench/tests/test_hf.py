"""HFVisionChatAdapter on tiny random-init checkpoints of two families built here (LLaVA with a
CLIPImageProcessorPil processor, Idefics3): answers equal a hand computation, the image-token mask
comes from the processor's expansion, and hooks touch only what they name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from mc2_bench.core import options
from mc2_bench.io import load_mc2
from mc2_bench.offline.digits import digits_items, write_digits_items
from mc2_bench.steering import SteeringHook

FAMILIES = ("llava", "idefics3", "qwen2_vl")
N_IMAGE_TOKENS = {"llava": 16, "idefics3": 4, "qwen2_vl": 4}  # qwen: 16x16 px, 4x4 patches, 2x2 merge


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from mc2_bench.hf import HFVisionChatAdapter
    from mc2_bench.offline.tiny import FAMILIES as BUILD

    root = tmp_path_factory.mktemp("hf")
    rng = np.random.default_rng(0)
    imgs = rng.uniform(0, 16, (5, 8, 8)).astype(np.float32)
    write_digits_items(digits_items(imgs, np.arange(5), range(5), seed=0), root / "items")
    items = load_mc2(root / "items" / "items.json", root / "items")
    ads = {}
    for fam in FAMILIES:
        BUILD[fam](root / fam, seed=1)
        ads[fam] = HFVisionChatAdapter.from_pretrained(root / fam, batch=3)
    return root, items, ads


def _hand(ad, it, mode, order, ids_after=None):
    """One item, no padding, no batching: the processor and the model called directly."""
    text = ad.chat_prompt(it, mode, order)
    kw = {}
    if mode != "base_text":
        img = ad.image_loader(it.image)
        kw["images"] = [[img]] if "Idefics" in type(ad.processor).__name__ else [img]
    enc = ad.processor(text=[text], return_tensors="pt", **kw)
    if ids_after is not None:
        enc["input_ids"] = torch.cat([enc["input_ids"], torch.tensor([ids_after])], 1)
        enc["attention_mask"] = torch.ones_like(enc["input_ids"])
        if "mm_token_type_ids" in enc:  # Qwen2-VL: the appended option is text
            enc["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"],
                                                  torch.zeros(1, len(ids_after), dtype=torch.long)], 1)
    with torch.no_grad():
        return torch.log_softmax(ad.model(**enc).logits[0].float(), -1), enc["input_ids"][0]


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("mode", ["single", "base_text"])
def test_letter_logprob_equals_hand_computation(setup, fam, mode):
    _, items, ads = setup
    ad = ads[fam]
    for order in (0, 1):
        recs = ad.answer(items, mode, order, "letter-logprob")  # batch 3: padded batches
        for it, rec in zip(items, recs):
            lp, _ = _hand(ad, it, mode, order)
            a, b = (float(lp[-1, ids].logsumexp(-1)) for ids in ad.letter_ids)  # "A" and " A"
            assert rec["letter"] == ("A" if a >= b else "B")
            assert rec["scores"] == pytest.approx([a, b], abs=2e-4)
            assert rec["prompt"] == ad.chat_prompt(it, mode, order)


@pytest.mark.parametrize("fam,mode", [("llava", "single"), ("idefics3", "single"), ("qwen2_vl", "single"),
                                      ("llava", "base_text")])
def test_option_logprob_equals_scoring_prompt_plus_option(setup, fam, mode):
    _, items, ads = setup
    ad = ads[fam]
    recs = ad.answer(items, mode, 1, "option-logprob")
    for it, rec in zip(items, recs):
        if mode == "base_text":  # the context (and so the text's digit) reaches the prompt, no image
            assert it.context in rec["prompt"] and "<image>" not in rec["prompt"]
        want = []
        for opt in options(it, 1):
            oid = ad.tok.encode(opt, add_special_tokens=False)
            lp, ids = _hand(ad, it, mode, 1, oid)
            n = len(ids) - len(oid)
            want.append(sum(float(lp[n - 1 + j, oid[j]]) for j in range(len(oid))))
        assert rec["scores"] == pytest.approx(want, abs=5e-4)
        assert rec["letter"] == ("A" if want[0] >= want[1] else "B")


@pytest.mark.parametrize("fam", FAMILIES)
def test_letter_logprob_scores_every_spelling_of_the_letter(setup, fam):
    _, _, ads = setup
    ad = ads[fam]
    for letter, ids in zip("AB", ad.letter_ids):
        spellings = {ad.tok.decode([i]) for i in ids}
        want = {t for t in (letter, " " + letter) if len(ad.tok.encode(t, add_special_tokens=False)) == 1}
        assert spellings == want and want, (fam, spellings)


@pytest.mark.parametrize("fam", FAMILIES)
def test_image_mask_comes_from_the_processor_expansion(setup, fam):
    _, items, ads = setup
    ad = ads[fam]
    enc, _ = ad._encode(items[:2], "single", 0, None)
    ad._set_info(enc)
    mask = ad.position_info["image_mask"]
    assert mask.sum(1).tolist() == [N_IMAGE_TOKENS[fam]] * 2
    enc_t, _ = ad._encode(items[:2], "base_text", 0, None)
    assert int((enc_t["input_ids"] == ad.image_token_id).sum()) == 0


def _layer_out(ad, items, layer, hook=None):
    enc, _ = ad._encode(items, "single", 0, None)
    got = {}
    if hook is not None:  # attached first: the grab below sees the steered output
        hook.attach(ad)
    h = ad.layer_modules()[layer].register_forward_hook(
        lambda m, a, o: got.setdefault("h", (o[0] if isinstance(o, tuple) else o).detach().clone()))
    try:
        with torch.no_grad():
            ad._run(enc)
    finally:
        h.remove()
        if hook is not None:
            hook.remove()
    return got["h"], enc["input_ids"] == ad.image_token_id


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("positions", ["image_tokens", "text_tokens", "context"])
def test_positions_touch_only_what_they_name(setup, fam, positions):
    _, items, ads = setup
    ad = ads[fam]
    ref, img = _layer_out(ad, items[:2], 1)
    ctx = ad._context
    assert [ad.tok.decode(ids[m]).strip() for ids, m in zip(ad._encode(items[:2], "single", 0, None)[0]["input_ids"], ctx)] == [it.context for it in items[:2]]
    v = np.random.default_rng(3).standard_normal(ref.shape[-1])
    hook = SteeringHook([1], v, 0.7, positions=positions)
    out, _ = _layer_out(ad, items[:2], 1, hook)
    changed = (out - ref).abs().sum(-1) > 0
    named = {"image_tokens": img, "text_tokens": ~img, "context": ctx}[positions]
    assert changed[named].all() and not changed[~named].any()
    attended = ad._encode(items[:2], "single", 0, None)[0]["attention_mask"].bool()
    assert hook.touched[1] == int((named & attended).sum())  # left padding is not counted


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("positions", ["all", "text_tokens"])
def test_touched_counts_attended_positions_of_a_left_padded_batch(setup, fam, positions):
    import dataclasses

    _, items, ads = setup
    ad = ads[fam]
    batch = [items[0], dataclasses.replace(items[1], context=items[1].context + " Report 1: two three four.")]
    enc, _ = ad._encode(batch, "single", 0, None)
    att = enc["attention_mask"].bool()
    assert not att[0].all() and att[1].all()  # the short prompt is left-padded
    hook = SteeringHook([1], np.ones(32), 0.5, positions=positions)
    _layer_out(ad, batch, 1, hook)
    named = att if positions == "all" else att & (enc["input_ids"] != ad.image_token_id)
    assert hook.touched[1] == int(named.sum())


@pytest.mark.parametrize("fam", FAMILIES)
def test_alpha_zero_bit_identical_and_letter_mode_generates(setup, fam):
    _, items, ads = setup
    ad = ads[fam]
    ref = ad.answer(items, "single", 0, "letter-logprob")
    with SteeringHook([0, 1], np.ones(32), 0.0).attach(ad):
        same = ad.answer(items, "single", 0, "letter-logprob")
    assert [r["scores"] for r in same] == [r["scores"] for r in ref]
    with SteeringHook([0, 1], np.ones(32), 2.0).attach(ad):
        moved = ad.answer(items, "single", 0, "letter-logprob")
    assert [r["scores"] for r in moved] != [r["scores"] for r in ref]
    hook = SteeringHook([1], np.ones(32), 1.0, positions="generated")
    with hook.attach(ad):
        gen = ad.answer(items[:2], "single", 0, "letter")
    assert all(isinstance(r["text"], str) for r in gen)
    assert hook.touched[1] == 2 * (ad.max_new_tokens - 1)  # one new position per cached step


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("answer_mode", ["letter-logprob", "option-logprob"])
def test_prefix_cache_replays_the_unsteered_layers_exactly(setup, fam, answer_mode):
    _, items, ads = setup
    ad = ads[fam]
    v = np.random.default_rng(5).standard_normal(32)

    def answer(hook_layer=None):
        if hook_layer is None:
            return [r["scores"] for r in ad.answer(items, "single", 0, answer_mode)]
        with SteeringHook([hook_layer], v, 0.8).attach(ad):
            return [r["scores"] for r in ad.answer(items, "single", 0, answer_mode)]
    ref, want = answer(), answer(2)
    assert want != ref
    first, calls = ad.layer_modules()[0], []
    orig = first.forward
    first.forward = lambda *a, **k: (calls.append(1), orig(*a, **k))[1]
    try:
        ad.cache_prefix_at(1)
        assert answer() == ref
        multi = any(len(ad.tok.encode(o, add_special_tokens=False)) > 1 for it in items for o in options(it, 0))
        if answer_mode == "option-logprob" and multi:  # a KV cache is continued: no replay, same answers
            assert not ad._prefix and answer(2) == want
            return
        assert len(ad._prefix) == 2  # unsteered passes keep layer 1's output (batch 3: 2 batches)
        n = len(calls)
        assert answer(2) == want and len(calls) == n  # bit-identical, layer 0 not run again
        assert answer(2) == want and len(calls) == n
        answer(1)  # a hook at or below the kept layer: a full pass
        assert len(calls) > n
    finally:
        ad.cache_prefix_at(None)
        del first.forward
    assert list(ad._layer_list) == ad.layer_modules()  # the real layers are back


@pytest.mark.parametrize("fam", ["llava", "qwen2_vl"])
def test_cli_eval_on_a_hf_folder(setup, fam, capsys):
    from mc2_bench.cli import main

    root, _, _ = setup
    per = root / f"per_{fam}.jsonl"
    assert main(["eval", "--model", str(root / fam), "--data", str(root / "items" / "items.json"),
                 "--images", str(root / "items"), "--answer-mode", "letter-logprob", "--json",
                 "--per-item", str(per)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["invalid_rate"] == 0.0 and res["vision_ratio"] + res["text_ratio"] == pytest.approx(1.0)
    recs = [json.loads(x) for x in per.read_text().splitlines()]
    image = {"llava": "<image>", "qwen2_vl": "<|vision_start|><|image_pad|><|vision_end|>"}[fam]
    assert recs[0]["prompt_order0"].startswith("<|user|>\n" + image)
