#!/usr/bin/env bash
# Claims (b) and (d) without dropout, on the CPU (docs/study.md, "Task 2
# without dropout"): the registered CPU-sized Task 2 runs of the study plan
# (study preset, 80 tokens, counts 0-66, dropout 0, 40 epochs) with seeds 0-4, one PE after
# another, at low priority so that other work keeps the cores. Each PE is one
# `studies.arxiv_2505_13027.plan` entry: it is skipped when its small files are committed
# under results/runs/, resumed when its checkpoint is under runs/, then
# ablated, and its small files are copied to
# results/runs/count/<pe>-study-len80-dropout0/ (commit them). About 65-75 min per
# PE on a 2-core CPU; on a GPU, launch/study_gpu.sh runs them with 8 seeds.
#   launch/task2_cpu.sh [--dry_run] [PE ...]
#       (default: nope rope mla rope_sinusoidal sinusoidal; SEEDS=5, NICE=10)
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
REGISTERED=(nope rope mla rope_sinusoidal sinusoidal)
PES=("$@")
if [[ ${#PES[@]} -eq 0 ]]; then PES=("${REGISTERED[@]}"); fi
for pe in "${PES[@]}"; do
  [[ " ${REGISTERED[*]} " == *" $pe "* ]] || die "unknown PE '$pe'; registered: ${REGISTERED[*]}"
done
SEEDS=${SEEDS:-5}
require_positive_int "$SEEDS" "SEEDS"
PY=${PYTHON:-python3}
for pe in "${PES[@]}"; do
  run_or_print nice -n "${NICE:-10}" "$PY" -m studies.arxiv_2505_13027.plan \
    --only="count/${pe}-study-len80-dropout0" --seeds="$SEEDS"
done
