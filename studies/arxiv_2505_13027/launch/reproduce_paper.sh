#!/usr/bin/env bash
# The reproduction study at the paper preset (one GPU; 8 seeds; faithful and clean).
#   launch/reproduce_paper.sh [--dry_run] [--seeds N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=launch/common.sh
. launch/common.sh

parse_dry_run_and_seeds 8 "$@"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# --seed_group=auto: 8 seeds vmapped at batch 512 need ~91 GiB for one training
# chunk (measured on an H200, results/device/; benchmarks/README.md), so the
# sweep vmaps the widest group of seeds that fits the GPU (auto is the sweep's
# default on a GPU; named here so the choice shows in the command).
SWEEP=(python -m experiments.sweep --preset=paper --seeds="$SEEDS" --seed_group=auto)
ALL=nope,sinusoidal,learned,relative,alibi,rope,rope_sinusoidal,mla

for task in distance count; do
  run_or_print "${SWEEP[@]}" --task="$task" --pe="$ALL"
  run_or_print "${SWEEP[@]}" --task="$task" --pe=partial_rope --rope_heads=1,2,3
  run_or_print "${SWEEP[@]}" --task="$task" --faithful --pe=rope_sinusoidal,nope,alibi,relative,learned,sinusoidal,mla
done
for wd in runs/distance/*-paper/ runs/count/*-paper/; do
  [ -f "$wd/summary.json" ] || [ "$DRY_RUN" -eq 1 ] || continue
  run_or_print python -m experiments.ablate --workdir="${wd%/}" --split=all
  run_or_print python -m experiments.decompose --workdir="${wd%/}"
done
run_or_print python -m studies.arxiv_2505_13027.report --runs=runs --out=RESULTS-paper.md \
  --figdir=runs/paper-figures
