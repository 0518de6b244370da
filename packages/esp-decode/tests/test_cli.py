"""CLI: users' mistakes give one line on stderr and exit 2, nothing written; a real run works."""

import json

import pytest
from esp_decode.cli import main


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, make_tiny):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-llama")
    vocab = {"<pad>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .")}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>").save_pretrained(path)
    make_tiny("llama").save_pretrained(path)
    return path


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _user_error(capsys, argv, needle):
    rc, out, err = _run(capsys, argv)
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("esp-decode: error:") and needle in lines[0], err
    assert "Traceback" not in err


def test_bad_prompt_files(tmp_path, capsys, model_dir):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    out = tmp_path / "out.jsonl"
    base = ["generate", "--model", str(model_dir), "--max-new-tokens", "4", "--out", str(out)]
    _user_error(capsys, [*base, "--prompt-file", str(empty)], "empty prompt file")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "prompt": "abc"}\n{"id": 2, "prompt": \n')
    _user_error(capsys, [*base, "--prompt-file", str(bad)], "bad.jsonl:2")
    noprompt = tmp_path / "np.jsonl"
    noprompt.write_text('{"id": 1, "text": "abc"}\n')
    _user_error(capsys, [*base, "--prompt-file", str(noprompt)], "np.jsonl:1")
    _user_error(capsys, [*base, "--prompt-file", str(tmp_path / "missing.txt")], "no such prompt file")
    assert not out.exists() and not list(tmp_path.glob("out.jsonl*"))


def test_bad_options(tmp_path, capsys, model_dir):
    pf = tmp_path / "p.txt"
    pf.write_text("abc abc\n")
    base = ["generate", "--model", str(model_dir), "--prompt-file", str(pf)]
    _user_error(capsys, [*base, "--max-new-tokens", "0"], "positive integer")
    _user_error(capsys, [*base, "--max-new-tokens", "-3"], "positive integer")
    _user_error(capsys, [*base, "--temperature", "nan"], "finite")
    _user_error(capsys, [*base, "--drafter", "medusa"], "unknown drafter 'medusa'")
    _user_error(capsys, [*base, "--topk", "8,x"], "8,4,2,2")
    _user_error(capsys, ["bench", "--model", str(model_dir), "--prompt-file", str(pf), "--drafters", "ar,eagle"],
                "unknown drafter 'eagle'")
    _user_error(capsys, [*base[:2], str(tmp_path), *base[3:]], "has no config.json")
    existing = tmp_path / "exists.jsonl"
    existing.write_text("keep me\n")
    _user_error(capsys, [*base, "--out", str(existing)], "already exists")
    assert existing.read_text() == "keep me\n"


def test_model_without_4d_mask_support(tmp_path, capsys, model_dir):
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=20)).save_pretrained(tmp_path)
    PreTrainedTokenizerFast.from_pretrained(model_dir).save_pretrained(tmp_path)
    pf = tmp_path / "p.txt"
    pf.write_text("hello\n")
    _user_error(capsys, ["generate", "--model", str(tmp_path), "--prompt-file", str(pf)], "4-D")


def test_generate_json_is_greedy_and_atomic(tmp_path, capsys, model_dir, greedy):
    from transformers import AutoModelForCausalLM

    pf = tmp_path / "p.jsonl"
    pf.write_text('{"id": "a", "prompt": "abc abc ab"}\n{"id": "b", "prompt": "the cat. the"}\n')
    out = tmp_path / "out.jsonl"
    rc, stdout, err = _run(capsys, ["generate", "--model", str(model_dir), "--prompt-file", str(pf),
                                    "--max-new-tokens", "6", "--drafter", "esp+pld", "--batch-size", "2",
                                    "--json", "--out", str(out)])
    assert rc == 0 and err == "", err   # no library warning or log line on stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"] and stdout == out.read_text()
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for r in rows:
        assert r["output_ids"] == greedy(model, r["prompt_ids"], 6)
        assert set(r) == {"id", "prompt_ids", "output_ids", "text", "model_calls", "accepted_lengths",
                          "mean_accepted_length", "drafter", "config"}
        assert set(r["config"]) == {"esp", "pld"}


def test_bench_checks_every_drafter_against_model_generate(tmp_path, capsys, model_dir):
    pf = tmp_path / "p.txt"
    pf.write_text("abc abc ab\nthe cat. the\n")
    rc, out, err = _run(capsys, ["bench", "--model", str(model_dir), "--prompt-file", str(pf), "--max-new-tokens", "5",
                                 "--drafters", "ar,pld,esp", "--check-lossless", "--json"])
    assert rc == 0 and err == "", err
    report = json.loads(out)
    assert set(report) == {"ar", "pld", "esp"} and all(r["lossless"] is True for r in report.values())
    assert report["ar"]["mean_accepted_length"] == 1.0 and report["esp"]["ratio_tokens_per_s_to_ar"] > 0
    assert all(r["exact"] is True for r in report.values())   # fp32 on CPU (--dtype auto): exact


def test_dtype_and_device_options(tmp_path, capsys, model_dir):
    pf = tmp_path / "p.txt"
    pf.write_text("abc abc ab\nthe cat. the\n")
    base = ["bench", "--model", str(model_dir), "--prompt-file", str(pf), "--max-new-tokens", "5"]
    _user_error(capsys, [*base, "--dtype", "fp16"], "--dtype")
    _user_error(capsys, [*base, "--device", "tpu"], "cpu, cuda or cuda:N")
    _user_error(capsys, [*base, "--device", "cuda:99"], "no such CUDA device")
    rc, out, err = _run(capsys, [*base, "--drafters", "ar,esp", "--check-lossless", "--json", "--dtype", "bf16",
                                 "--device", "cpu"])
    assert rc == 0 and err == "", err   # bf16 weights on CPU; judged with core.judge's near-tie rule
    report = json.loads(out)
    assert all(r["lossless"] is True for r in report.values())


def test_probe_reports_top1_and_top5_per_mask_depth(tmp_path, capsys, model_dir):
    pf = tmp_path / "p.txt"
    pf.write_text("abc abc ab\nthe cat. the\n")
    rc, out, err = _run(capsys, ["probe", "--model", str(model_dir), "--prompt-file", str(pf), "--num-masks", "3",
                                 "--max-new-tokens", "6", "--json"])
    assert rc == 0 and err == "", err
    acc = json.loads(out)
    assert set(acc) == {f"top{k}_depth{j}" for k in (1, 5) for j in (1, 2, 3)}
    assert all(0.0 <= v <= 1.0 for v in acc.values())
    assert all(acc[f"top5_depth{j}"] >= acc[f"top1_depth{j}"] for j in (1, 2, 3))


def test_full_scale_refuses_at_once_naming_its_needs(tmp_path, monkeypatch):
    from esp_decode.experiments import reproduce

    from icml26_shared import UserError

    for var in ("ESP_DECODE_LLAMA3", "ESP_DECODE_QWEN3", "ESP_DECODE_SPECBENCH"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError, match="ESP_DECODE_LLAMA3"):
        reproduce("full", tmp_path, 0)


@pytest.fixture
def broken(tmp_path, model_dir):
    import shutil

    return shutil.copytree(model_dir, tmp_path / "model")


@pytest.mark.parametrize("cmd", ["generate", "bench"])
def test_truncated_safetensors(broken, tmp_path, capsys, cmd):
    f = broken / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    pf = tmp_path / "p.txt"
    pf.write_text("abc\n")
    _user_error(capsys, [cmd, "--model", str(broken), "--prompt-file", str(pf)],
                "model.safetensors is truncated or corrupt")


def test_unknown_model_type(broken, tmp_path, capsys):
    config = json.loads((broken / "config.json").read_text())
    config["model_type"] = "nonexistent-arch"
    (broken / "config.json").write_text(json.dumps(config))
    pf = tmp_path / "p.txt"
    pf.write_text("abc\n")
    _user_error(capsys, ["generate", "--model", str(broken), "--prompt-file", str(pf)],
                "'nonexistent-arch'")


def test_folder_loads_through_the_core_in_the_asked_dtype(model_dir):
    import torch
    from esp_decode.io import load_model

    model, tok = load_model(str(model_dir), "bfloat16", "cpu")
    p = next(model.parameters())
    assert p.dtype == torch.bfloat16 and p.device.type == "cpu" and not model.training
    assert model.config._attn_implementation == "sdpa" and tok("ab")["input_ids"] == [2, 3]


def _other_value(section, f):
    """A valid non-default value for every config field."""
    import typing

    from esp_decode.settings import SECTIONS

    alt = {("esp", "mask_init"): "vocab_mean", ("esp", "attach"): "top", ("esp", "shape"): "chain",
           ("esp", "topk"): (3, 2, 2, 2, 1), ("esp", "num_masks"): 5, ("stand", "topk"): (3, 2, 1),
           ("lade", "ngram"): 4}
    if (section, f.name) in alt:
        return alt[(section, f.name)]
    typ = typing.get_type_hints(SECTIONS[section])[f.name]
    return (not f.default) if typ is bool else f.default + 1


def _capture(monkeypatch):
    import esp_decode.baselines as bl

    seen = []
    orig = bl.make_drafter

    def spy(name, **kw):
        seen.append((name, kw))
        return orig(name, **{k: v for k, v in kw.items() if k != "eagle2"})

    monkeypatch.setattr(bl, "make_drafter", spy)
    return seen


def test_every_config_field_reaches_the_drafter_from_set_and_config(tmp_path, capsys, model_dir, monkeypatch):
    """M4: each ``dataclasses.fields`` entry of every config, set from the CLI (``--set`` on
    ``generate``, ``--config`` on ``bench``), arrives in the drafter's keyword arguments and in
    ``--json``."""
    import dataclasses

    from esp_decode.settings import SECTIONS, as_json

    pf = tmp_path / "p.txt"
    pf.write_text("abc abc abc\n")
    want = {s: {f.name: _other_value(s, f) for f in dataclasses.fields(cls)} for s, cls in SECTIONS.items()}
    sets = [x for s, fs in want.items() for k, v in fs.items()
            for x in ("--set", f"{s}.{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}")]
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps({"_source": "test", **{s: {k: list(v) if isinstance(v, tuple) else v
                                                              for k, v in fs.items()} for s, fs in want.items()}}))
    runs = [["generate", "--drafter", "esp", "--out", str(tmp_path / "o.jsonl"), *sets],
            ["bench", "--drafters", "pld,lade,stand,esp", "--config", str(cfg_file)]]
    for argv in runs:
        seen = _capture(monkeypatch)
        rc, out, err = _run(capsys, [*argv, "--model", str(model_dir), "--prompt-file", str(pf),
                                     "--max-new-tokens", "3", "--json"])
        assert rc == 0, err
        assert seen
        for _, kw in seen:
            for section, fields in want.items():
                got = dataclasses.asdict(kw[section])
                assert got == fields, (argv[0], section, got, fields)
        rec = json.loads(out.splitlines()[0])
        arm = rec["config"] if argv[0] == "generate" else rec["lade"]["config"]
        sec = "esp" if argv[0] == "generate" else "lade"
        assert arm[sec] == as_json(kw[sec])


def test_bad_settings_are_one_line(tmp_path, capsys, model_dir):
    pf = tmp_path / "p.txt"
    pf.write_text("abc\n")
    base = ["generate", "--model", str(model_dir), "--prompt-file", str(pf)]
    _user_error(capsys, [*base, "--set", "lade.windw=4"], "unknown field lade.windw")
    _user_error(capsys, [*base, "--set", "medusa.k=4"], "unknown config section")
    _user_error(capsys, [*base, "--set", "lade.window=four"], "lade.window")
    _user_error(capsys, [*base, "--set", "lade.window"], "SECTION.FIELD=VALUE")
    _user_error(capsys, [*base, "--set", "lade.ngram=2"], "ngram")
    _user_error(capsys, [*base, "--set", "esp.mask_init=learned"], "learned")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _user_error(capsys, [*base, "--config", str(bad)], "not a JSON config")
    _user_error(capsys, [*base, "--config", str(tmp_path / "none.json")], "no such config file")


def test_shortcut_flags_reach_the_configs():
    from esp_decode.cli import _settings, build_parser

    for cmd in ("generate", "bench"):
        args = build_parser().parse_args([cmd, "--model", "m", "--prompt-file", "p", "--mask-init", "vocab_mean",
                                          "--attach", "top", "--shape", "chain", "--num-masks", "3", "--topk", "5,2",
                                          "--max-nodes", "9", "--eagle-depth", "2", "--eagle-top-k", "3",
                                          "--eagle-total-tokens", "7", "--set", "esp.max_nodes=4"])
        cfg = _settings(args)
        esp = cfg["esp"]
        assert (esp.mask_init, esp.attach, esp.shape, esp.num_masks, esp.topk, esp.max_nodes) == \
            ("vocab_mean", "top", "chain", 3, (5, 2, 2), 9)        # a flag given beats --set
        e = cfg["eagle2"]
        assert (e.depth, e.top_k, e.max_nodes) == (2, 3, 6)


def test_tune_choice_rule():
    from esp_decode.tune import choose

    rows = [{"accepted": 2.00, "items": 245}, {"accepted": 1.97, "items": 69}, {"accepted": 1.90, "items": 10}]
    assert choose(rows) == 1                           # within 2 % of the best: fewer items
    assert choose([{"accepted": 1.5, "items": 9}, {"accepted": 1.5, "items": 9}]) == 0


def test_tune_scores_the_same_at_any_batch_size(tiny_llama):
    from esp_decode.config import ESPConfig
    from esp_decode.tune import score

    prompts = [[1, 2, 3, 4, 1, 2, 3], [5, 6, 7, 5, 6, 7, 5, 6], [9, 8, 7, 9, 8]]
    for name, kw in (("pld", {}), ("esp", {"esp": ESPConfig(attach="top", max_nodes=12)})):
        one, two = (score(tiny_llama, prompts, name, kw, 8, None, batch=b) for b in (1, 2))
        assert one["accepted"] == pytest.approx(two["accepted"]) and one["items"] == pytest.approx(two["items"]), name


def test_tune_writes_a_config_that_generate_reads(tmp_path, capsys, model_dir):
    pf = tmp_path / "dev.txt"
    pf.write_text("abc abc abc\nthe cat. the cat.\n")
    cfg = tmp_path / "tuned.json"
    rc, out, err = _run(capsys, ["tune", "--model", str(model_dir), "--prompt-file", str(pf), "--drafters", "pld,lade",
                                 "--max-new-tokens", "6", "--out", str(cfg), "--json"])
    assert rc == 0, err
    doc = json.loads(cfg.read_text())
    assert set(doc) == {"_source", "pld", "lade"} and doc["_source"]["prompt_ids"] == ["0", "1"]
    from esp_decode.tune import GRIDS

    assert len(doc["_source"]["scores"]["lade"]) == len(GRIDS["lade"]) and "accepted" in doc["_source"]["scores"]["pld"][0]
    assert doc["_source"]["prompts"] == ["abc abc abc", "the cat. the cat."]
    _user_error(capsys, ["tune", "--model", str(model_dir), "--prompt-file", str(pf), "--out", str(cfg)], "exists")
    rc, out, err = _run(capsys, ["generate", "--model", str(model_dir), "--prompt-file", str(pf), "--drafter", "lade",
                                 "--max-new-tokens", "4", "--config", str(cfg), "--json"])
    assert rc == 0, err
    assert json.loads(out.splitlines()[0])["config"]["lade"] == doc["lade"]
