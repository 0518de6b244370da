"""M5: the defaults are ``tune``'s shipped SmolLM2 choice (``tuned_smollm2.json``), and there is one
set of them: ``ESPDecoder``, the CLI (``generate``, ``bench``) and every drafter take their settings
from the config dataclasses, so the tuned choice in ``config.py`` reaches every entry point."""

import json
from importlib.resources import files

import pytest
from esp_decode.baselines import make_drafter
from esp_decode.cli import _settings, build_parser
from esp_decode.config import ESPConfig
from esp_decode.esp import ESPDecoder
from esp_decode.settings import SECTIONS

TUNED = ("esp", "pld", "lade", "stand")


def test_defaults_are_tunes_shipped_smollm2_choice():
    from esp_decode.settings import as_json

    doc = json.loads((files("esp_decode") / "tuned_smollm2.json").read_text())
    src = doc["_source"]
    assert src["command"].startswith("esp-decode tune --model smollm2") and len(src["prompts"]) >= 12
    assert src["max_new_tokens"] >= 32 and set(src["scores"]) == set(TUNED)
    for name in TUNED:
        assert as_json(SECTIONS[name]()) == doc[name], name


def test_esp_decoder_defaults_are_espconfigs():
    assert ESPDecoder(None).cfg == ESPConfig()
    assert ESPDecoder(None, attach="top", topk=[16, 4, 2, 2]).cfg == ESPConfig(attach="top", topk=(16, 4, 2, 2))


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_the_cli_without_flags_uses_every_configs_defaults(command):
    cfgs = _settings(build_parser().parse_args([command, "--model", "m", "--prompt-file", "p"]))
    for name in TUNED:
        assert cfgs[name] == SECTIONS[name](), name


def test_every_drafter_without_a_config_uses_the_defaults():
    for name in TUNED:
        assert make_drafter(name).cfg == SECTIONS[name](), name
    hybrid = make_drafter("esp+pld")
    assert hybrid.esp.cfg == ESPConfig() and hybrid.pld.cfg == SECTIONS["pld"]()


def test_tunes_dev_prompts_are_disjoint_from_quicks_test_prompts():
    from esp_decode.experiments import CFG
    from esp_decode.smol import TUNE_DEV
    from esp_decode.tasks import REGIMES, full_split

    src = json.loads((files("esp_decode") / "tuned_smollm2.json").read_text())["_source"]
    dev = src["prompts"]
    test = [p for r in REGIMES for p in full_split(r, TUNE_DEV, CFG["quick"]["smol"]["n_test"])[1]]
    assert all(sum(i.startswith(r) for i in src["prompt_ids"]) >= 4 for r in REGIMES)   # >= 4 per regime
    assert len(test) >= 30 and not set(dev) & set(test)
