#!/usr/bin/env bash
# crossq beside faiss IVFPQ and fast-plaid on one export, one machine, one run (issue 59 item 5).
#   bash packages/crossq/bench/run_all.sh OUT_DIR            # the reproduction's docstring corpus
#   bash packages/crossq/bench/run_all.sh OUT_DIR EMB QUERIES QRELS   # a `crossq embed` folder
# Run from the workspace root. fast-plaid runs in its own throw-away environment (it pins torch
# 2.11); its script imports numpy, torch and fast_plaid only.
set -euo pipefail
out=${1:?usage: run_all.sh OUT_DIR [EMB QUERIES QRELS]}
threads=${THREADS:-1}
export OMP_NUM_THREADS=$threads RAYON_NUM_THREADS=$threads
if [ $# -ge 4 ]; then
  uv run --no-sync python -m crossq.enginebench export --embeddings "$2" --queries "$3" --qrels "$4" --out "$out/export"
else
  uv run --no-sync python -m crossq.enginebench export --docstrings --out "$out/export"
fi
uptime | tee "$out/uptime.txt"
uv run --no-sync python -m crossq.enginebench run "$out/export" --out "$out/crossq.json" --threads "$threads"
uptime | tee -a "$out/uptime.txt"
uv run --isolated --no-project --with "fast-plaid==1.7.0.2110" \
  python packages/crossq/bench/fastplaid_bench.py "$out/export" --out "$out/fastplaid.json" --threads "$threads"
uptime | tee -a "$out/uptime.txt"
uv run --no-sync python -m crossq.enginebench merge "$out/export" "$out/crossq.json" "$out/fastplaid.json" \
  --json "$out/merged.json" | tee "$out/table.md"
