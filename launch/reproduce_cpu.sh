#!/usr/bin/env bash
# The CPU reproduction study (cpu preset, 3 seeds): sweeps, head ablations, report.
# Rerunnable: finished runs are skipped, interrupted ones resume from checkpoints.
#   launch/reproduce_cpu.sh [--dry_run] [--seeds N]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
. launch/common.sh

parse_dry_run_and_seeds 3 "$@"
# --seed_group=1: one seed at a time inside the compiled chunk (faster on a 2-core CPU, same results).
SWEEP=(python -m experiments.sweep --preset=cpu --seeds="$SEEDS" --seed_group=1)

# Most informative first, so a partial study already answers the main questions.
run_or_print "${SWEEP[@]}" --task=distance --pe=rope,nope,alibi,sinusoidal
run_or_print "${SWEEP[@]}" --task=count --pe=nope,rope,mla
run_or_print "${SWEEP[@]}" --task=distance --pe=mla,learned,relative,rope_sinusoidal
run_or_print "${SWEEP[@]}" --task=distance --pe=partial_rope --rope_heads=1,2
run_or_print "${SWEEP[@]}" --task=distance --faithful --pe=rope_sinusoidal,nope,mla
run_or_print "${SWEEP[@]}" --task=count --faithful --pe=rope_sinusoidal,nope,mla
run_or_print "${SWEEP[@]}" --task=count --pe=alibi,sinusoidal,learned,relative
# Budget check: the same steps with twice the examples per step (batch 256 x 8 epochs = 436
# steps, the ../shared/CPU-PRESET.md data point), for the Task 1 PEs that were still climbing.
for pe in rope alibi sinusoidal; do
  run_or_print "${SWEEP[@]}" --task=distance --pe="$pe" --batch_size=256 --epochs=8 \
    --workdir="runs/distance/$pe-b256"
done
run_or_print "${SWEEP[@]}" --task=distance --pe=partial_rope --rope_heads=1 --batch_size=256 \
  --epochs=8 --workdir=runs/distance/partial_rope-k1-b256
# ALiBi with the paper's steeper slopes exp(-h/H) in clean mode (standard: 2^(-8h/H)).
run_or_print "${SWEEP[@]}" --task=distance --pe=alibi --alibi_slopes=paper \
  --workdir=runs/distance/alibi-paper_slopes

for wd in runs/distance/*/ runs/count/*/; do
  [ -f "$wd/summary.json" ] || [ "$DRY_RUN" -eq 1 ] || continue
  run_or_print python -m experiments.ablate --workdir="${wd%/}"
  run_or_print python -m experiments.decompose --workdir="${wd%/}"
done
run_or_print python -m experiments.report --runs=runs --out=RESULTS.md
