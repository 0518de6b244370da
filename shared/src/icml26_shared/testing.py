"""The contract every package passes, as one line in its tests::

    from icml26_shared.testing import ContractTests

    class TestContract(ContractTests):
        package = "circumerge"          # the entry-point / distribution name

It checks: the entry point resolves to a descriptor; ``<cli> --help`` answers without importing
torch or jax; ``reproduce --scale smoke`` writes schema-valid results; two runs with one seed agree;
every ``*.json`` the smoke run wrote, and the stdout of each declared ``json_commands`` argv, is
strict JSON (no ``NaN``/``Infinity``); ``reproduce --force`` never deletes a file no run wrote.
"""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
import textwrap

import pytest

from . import registry
from .results import Results

HEAVY = ("torch", "jax", "transformers", "triton", "tensorflow")


def _rows_key(res: Results) -> dict[tuple[str, str, str], float]:
    return {(r.experiment, r.method, r.metric): r.value for r in res.rows}


def _refuse_constant(token: str):
    raise ValueError(f"non-standard JSON token {token}")


def strict_json_loads(text: str):
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (Python's json reads
    and writes them; no other JSON parser does)."""
    return json.loads(text, parse_constant=_refuse_constant)


def _call_main(main, argv: list[str]) -> int:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's --help / usage errors
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0 if rc is None else rc


def save_tiny_llama(out, **save_kw):
    """A tiny random Llama (1 layer, width 16, seed 0) with a word-level tokenizer, saved as a
    Hugging Face folder at ``out`` (``save_kw`` go to ``save_pretrained``): the model folder that
    loader tests break one way at a time. Needs transformers and tokenizers."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    LlamaForCausalLM(config).save_pretrained(out, **save_kw)
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(61)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", bos_token="<s>",
                            eos_token="</s>").save_pretrained(out)
    return out


class ContractTests:
    package: str = ""
    #: CLI module exposing ``main(argv) -> int``; default ``<import name>.cli``
    cli_module: str | None = None
    #: metrics that measure time or memory and so legitimately differ between two runs
    nondeterministic_metrics: tuple[str, ...] = ("time", "seconds", "ms", "latency", "speedup",
                                                  "throughput", "memory", "ratio_time")
    #: CLI argv lists whose stdout must be strict JSON (``--json`` commands), run in-process
    #: through the CLI module's ``main``; ``"{smoke_out}"`` in an argument becomes the smoke
    #: run's package folder (``<out>/<package>``), ``"{tmp}"`` a fresh empty folder
    json_commands: tuple[tuple[str, ...], ...] = ()

    @property
    def _module(self) -> str:
        return self.cli_module or self.package.replace("-", "_") + ".cli"

    @pytest.fixture(scope="class")
    @classmethod
    def smoke_runs(cls, tmp_path_factory):
        from .runner import run_one

        desc = registry.get(cls.package)
        out_a, out_b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
        a = run_one(desc, "smoke", out_a, seed=0, catch=False)
        b = run_one(desc, "smoke", out_b, seed=0, catch=False)
        return a, b, out_a / cls.package / "results.json"

    def test_entry_point_resolves(self):
        desc = registry.get(self.package)
        assert desc.name == self.package
        assert desc.version == registry.package_version(self.package)
        assert desc.claims, "a package must state the claims it reproduces"
        assert callable(desc.load_reproduce())

    def test_help_is_fast_and_light(self):
        code = textwrap.dedent(f"""
            import sys
            from {self._module} import main
            try:
                rc = main(["--help"])
            except SystemExit as e:
                rc = e.code
            heavy = [m for m in {HEAVY!r} if m in sys.modules]
            print("HEAVY=" + ",".join(heavy))
            sys.exit(rc or 0)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "usage" in out.stdout.lower()
        assert "HEAVY=\n" in out.stdout, f"--help imported heavy modules: {out.stdout.splitlines()[-1]}"

    def test_smoke_results_are_valid(self, smoke_runs):
        res, _, path = smoke_runs
        assert res.status == "ok", res.error
        res.validate()
        assert res.package == self.package
        again = Results.from_json(path)
        again.validate()
        assert again.to_dict() == json.loads(json.dumps(res.to_dict()))
        for fig in again.figures:
            assert (path.parent / fig).is_file(), f"listed figure {fig} was not written"

    def test_same_seed_same_results(self, smoke_runs):
        a, b, _ = smoke_runs
        ka, kb = _rows_key(a), _rows_key(b)
        assert ka.keys() == kb.keys()
        for key, va in ka.items():
            if any(t in key[2].lower() for t in self.nondeterministic_metrics):
                continue
            vb = kb[key]
            assert (math.isnan(va) and math.isnan(vb)) or va == pytest.approx(vb, rel=1e-6, abs=1e-9), key

    def test_json_outputs_are_strict(self, smoke_runs):
        """Every ``*.json`` (and each line of every ``*.jsonl``) the smoke run wrote parses with
        a strict parser: no ``NaN``/``Infinity`` (write them with ``icml26_shared.io``)."""
        _, _, path = smoke_runs
        files = sorted(path.parent.rglob("*.json"))
        assert path in files
        for f in files + sorted(path.parent.rglob("*.jsonl")):
            text = f.read_text(encoding="utf-8")
            docs = [x for x in text.splitlines() if x.strip()] if f.suffix == ".jsonl" else [text]
            for doc in docs:
                try:
                    strict_json_loads(doc)
                except ValueError as exc:  # JSONDecodeError included
                    pytest.fail(f"{f.relative_to(path.parent)} is not strict JSON: {exc}")

    def test_json_commands(self, smoke_runs, tmp_path, capsys):
        if not self.json_commands:
            pytest.skip("no json_commands declared")
        main = importlib.import_module(self._module).main
        smoke_out = str(smoke_runs[2].parent)
        for i, argv in enumerate(self.json_commands):
            tmp = tmp_path / f"cmd{i}"
            tmp.mkdir()
            args = [a.replace("{smoke_out}", smoke_out).replace("{tmp}", str(tmp)) for a in argv]
            capsys.readouterr()
            rc = _call_main(main, args)
            out, err = capsys.readouterr()
            assert rc == 0, f"{' '.join(argv)}: exit {rc}: {err.strip()[-500:]}"
            assert out.strip(), f"{' '.join(argv)} printed nothing"
            try:
                strict_json_loads(out)
            except ValueError:  # JSON lines: each line one strict document
                for line in out.splitlines():
                    if not line.strip():
                        continue
                    try:
                        strict_json_loads(line)
                    except ValueError as exc:
                        pytest.fail(f"{' '.join(argv)}: stdout is not strict JSON: {exc}")

    def test_force_never_deletes_user_files(self, tmp_path, capsys):
        main = importlib.import_module(self._module).main
        out = tmp_path / "out"
        out.mkdir()
        notes = out / "notes.txt"
        notes.write_bytes(b"my notes\n")
        rc = _call_main(main, ["reproduce", "--scale", "smoke", "--out", str(out), "--force"])
        err = capsys.readouterr().err
        assert rc == 2, f"reproduce --force into a folder holding notes.txt: exit {rc}: {err}"
        assert notes.read_bytes() == b"my notes\n"
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
        assert [p.name for p in tmp_path.iterdir()] == ["out"]
