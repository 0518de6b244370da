"""The contract every package passes, as one line in its tests::

    from icml26_shared.testing import ContractTests

    class TestContract(ContractTests):
        package = "circumerge"          # the entry-point / distribution name

It checks: the entry point resolves to a descriptor; ``<cli> --help`` answers without importing
torch or jax; ``reproduce --scale smoke`` writes schema-valid results; two runs with one seed agree.
"""

from __future__ import annotations

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


class ContractTests:
    package: str = ""
    #: CLI module exposing ``main(argv) -> int``; default ``<import name>.cli``
    cli_module: str | None = None
    #: metrics that measure time or memory and so legitimately differ between two runs
    nondeterministic_metrics: tuple[str, ...] = ("time", "seconds", "ms", "latency", "speedup",
                                                  "throughput", "memory", "ratio_time")

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
