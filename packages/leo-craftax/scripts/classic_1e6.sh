#!/bin/bash
# The Craftax-Classic comparison at equal env steps (issue 52, item 3): 983,040 env steps
# = 30 LEO updates of 32 x 1024 = 480 PQN / PQN+HER updates of 2 x 1024, each method at its
# authors' script defaults [C] (config.ALGO_DEFAULTS), seeds 0-2, 136 goals x 16 episodes x
# 512 steps at the final point. Usage: scripts/classic_1e6.sh OUT_DIR [STAGE]
#   STAGE dev  : PQN+HER's random proportion, README's 0.5 vs the grid file's 0.75, on dev seed 100
#   STAGE main : LEO, leo_commanded, PQN, PQN+HER (both proportions) on seeds 0-2
#   STAGE table: the paired comparisons (compare), as JSON: held-out success over the 136 goals
#                and the authors' live success rate (live_success_rates_aggregate/all: first
#                tries of the commanded goals in training, counts decayed by 0.999 per update,
#                mean over all goals), after the last update, per seed and LEO - B over seeds;
#                each run's whole live curve is in its exported JSON (live_success_curve)
# Cost on a 2-core CPU, 1 XLA thread (docs/experiments.md): measured per update, see there.
# Runs resume after an interruption (--checkpoint-every; run the same command with --resume).
set -euo pipefail
OUT=${1:?usage: classic_1e6.sh OUT_DIR [dev|main|table]}
STAGE=${2:-main}
STEPS=983040
mkdir -p "$OUT"
run() {  # algo seed name [extra flags]
  local algo=$1 seed=$2 name=$3; shift 3
  local every=5  # LEO: 30 updates; PQN / PQN+HER: 480
  case $algo in pqn|pqn_her) every=40 ;; esac
  [ -f "$OUT/$name.msgpack" ] && return 0
  uv run --no-sync leo-craftax train --algo "$algo" --env craftax-classic --steps $STEPS \
    --seed "$seed" --checkpoint-every $every --out "$OUT/$name.msgpack" "$@" \
    > "$OUT/$name.log" 2>&1
  uv run --no-sync leo-craftax export "$OUT/$name.msgpack" --out "$OUT/$name.json" --force
}
case $STAGE in
  dev)
    run pqn_her 100 pqn_her-p0.5-s100 --her-random-proportion 0.5
    run pqn_her 100 pqn_her-p0.75-s100 --her-random-proportion 0.75 ;;
  main)
    for s in 0 1 2; do
      run leo $s leo-s$s
      run leo_commanded $s leo_commanded-s$s
      run pqn $s pqn-s$s
      run pqn_her $s pqn_her-p0.5-s$s --her-random-proportion 0.5
      run pqn_her $s pqn_her-p0.75-s$s --her-random-proportion 0.75
    done ;;
  table)
    for b in pqn_her-p0.5 pqn_her-p0.75 pqn leo_commanded; do
      uv run --no-sync leo-craftax compare -a "$OUT"/leo-s{0,1,2}.json -b "$OUT"/$b-s{0,1,2}.json \
        --json "$OUT/leo-vs-$b.json"
    done ;;
  *) echo "unknown stage $STAGE (dev, main or table)" >&2; exit 2 ;;
esac
