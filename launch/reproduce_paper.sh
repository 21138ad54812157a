#!/usr/bin/env bash
# The reproduction study at the paper preset (one GPU; 8 seeds; faithful and clean).
#   launch/reproduce_paper.sh [--dry_run] [--seeds N]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
. launch/common.sh

parse_dry_run_and_seeds 8 "$@"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
SWEEP=(python -m experiments.sweep --preset=paper --seeds="$SEEDS")
ALL=nope,sinusoidal,learned,relative,alibi,rope,rope_sinusoidal,mla

for task in distance count; do
  run_or_print "${SWEEP[@]}" --task="$task" --pe="$ALL"
  run_or_print "${SWEEP[@]}" --task="$task" --pe=partial_rope --rope_heads=1,2,3
  run_or_print "${SWEEP[@]}" --task="$task" --faithful --pe=rope_sinusoidal,nope,alibi,relative,learned,sinusoidal,mla
done
for wd in runs/distance/*-paper/ runs/count/*-paper/; do
  [ -f "$wd/summary.json" ] || [ "$DRY_RUN" -eq 1 ] || continue
  run_or_print python -m experiments.ablate --workdir="${wd%/}" --split=all
  case "$wd" in
    *mla*) ;;  # the decomposition does not cover MLA's decoupled rotary channel
    *) run_or_print python -m experiments.decompose --workdir="${wd%/}" ;;
  esac
done
run_or_print python -m experiments.report --runs=runs --out=RESULTS.md
