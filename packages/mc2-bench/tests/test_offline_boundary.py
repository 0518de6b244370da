"""Issue 56 item 10: the benchmark imports nothing from ``mc2_bench.offline`` (toys, tiny
checkpoints, smol-vlm, digits, the reproduction)."""

from __future__ import annotations

import json
import subprocess
import sys

BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "mc2_bench.offline" or name.startswith("mc2_bench.offline."):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import mc2_bench, mc2_bench.adapters, mc2_bench.baselines, mc2_bench.cli, mc2_bench.commands
import mc2_bench.core, mc2_bench.direction, mc2_bench.full, mc2_bench.hf, mc2_bench.io
import mc2_bench.plots, mc2_bench.protocol, mc2_bench.registry, mc2_bench.steering
from mc2_bench.cli import build_parser, main
build_parser()
sys.exit(main(["report", sys.argv[1], "--json"]))
"""


def test_benchmark_modules_import_with_offline_blocked(tmp_path):
    per = tmp_path / "per.jsonl"
    per.write_text("".join(json.dumps({"id": f"i{k}", "task": "t", "modality_order0": "vision",
                                       "modality_order1": "text"}) + "\n" for k in range(4)))
    out = subprocess.run([sys.executable, "-c", BLOCK, str(per)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["vision_ratio"] == 0.5
