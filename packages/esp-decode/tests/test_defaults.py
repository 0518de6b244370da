"""M5 (first half): one set of defaults. ``ESPDecoder``, the CLI (``generate``, ``bench``) and every
drafter take their settings from the config dataclasses, so a tuned choice written into
``config.py`` reaches every entry point. (The second half, defaults == ``tune``'s shipped SmolLM2
choice, waits for the tune run: see docs/experiments.md.)"""

import pytest
from esp_decode.baselines import make_drafter
from esp_decode.cli import _settings, build_parser
from esp_decode.config import ESPConfig
from esp_decode.esp import ESPDecoder
from esp_decode.settings import SECTIONS

TUNED = ("esp", "pld", "lade", "stand")


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
