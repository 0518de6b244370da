"""Peak memory of merging a whole PEFT adapter set from disk, measured in fresh subprocesses.

One process writes T synthetic adapters of L layers; a second imports everything, records its RSS,
resets the kernel's peak-RSS counter (Linux ``/proc/self/clear_refs``), merges the set with
``merge_adapters`` and reads the peak (VmHWM). The increase is compared with
the size of the inputs, of the output and of the dense deltas a densifying merger would hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

_WRITE = """
import json, sys, torch
from pathlib import Path
from safetensors.torch import save_file
root, L, T, r, n, seed = Path(sys.argv[1]), *map(int, sys.argv[2:])
g = torch.Generator().manual_seed(seed)
for t in range(T):
    d = root / f"a{t}"
    d.mkdir(parents=True)
    save_file({f"base_model.model.layers.{l}.proj.lora_{ab}.weight":
               (torch.randn(r, n, generator=g) if ab == "A" else torch.randn(n, r, generator=g))
               for l in range(L) for ab in "AB"}, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": r,
        "target_modules": ["proj"], "base_model_name_or_path": "synthetic"}))
"""

_MERGE = """
import json, sys, torch
torch.set_num_threads(1)
from pathlib import Path
import circumerge.baselines, circumerge.core, circumerge.rules, safetensors.torch  # imports first
from circumerge.adapters import merge_adapters
from circumerge.config import MergeConfig

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])

root, T, space = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
before = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
merge_adapters([root / f"a{t}" for t in range(T)], root / ("out-" + space), MergeConfig(space=space))
print(json.dumps({"before_kb": before, "after_kb": status("VmHWM")}))
"""


def measure_peak(L: int, T: int, r: int, n: int, seed: int = 0, space: str = "circulant") -> dict:
    """Peak RSS increase (MB) of merging T adapters of L n×n layers, with reference sizes (MB)."""
    with tempfile.TemporaryDirectory(prefix="circumerge-mem-") as tmp:
        subprocess.run([sys.executable, "-c", _WRITE, tmp, str(L), str(T), str(r), str(n), str(seed)],
                       check=True, capture_output=True, timeout=600)
        out = subprocess.run([sys.executable, "-c", _MERGE, tmp, str(T), space], check=True,
                             capture_output=True, text=True, timeout=600)
    rss = json.loads(out.stdout.strip().splitlines()[-1])
    mb = 4 / 2**20  # float32 bytes -> MB
    return {
        "peak_increase_mb": (rss["after_kb"] - rss["before_kb"]) / 1024,
        "inputs_mb": T * L * 2 * n * r * mb,
        "output_mb": L * 2 * n * T * r * mb,
        "one_layer_inputs_mb": T * 2 * n * r * mb,
        "one_layer_dense_stack_mb": T * n * n * mb,
        "all_dense_deltas_mb": L * T * n * n * mb,
    }


if __name__ == "__main__":  # pragma: no cover
    print(measure_peak(*map(int, sys.argv[1:5])))
    del Path
