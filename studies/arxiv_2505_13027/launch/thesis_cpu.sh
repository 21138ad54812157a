#!/usr/bin/env bash
# The coupling study on the CPU (docs/study.md, "The thesis"): the 2x2 design
# (rotary kernel: rope vs rope_additive; decay kernel: alibi_multiplicative vs
# alibi) at the cpu preset, Task 1, recording the logits'
# contraction/widening and the loss curvature at every evaluation. The rotary
# pair trains 16 epochs with 8 seeds, the decay pair the cpu preset's 8 epochs
# with seeds 0-4 (docs/study.md says why). Each run is resumable (rerun to continue) and, once finished, its small
# files are copied to results/thesis/<pe>/ so the report rebuilds from git.
# A PE already there is skipped (FORCE=1 redoes it).
# --long: the rotary pair's longer budget (32 epochs, seeds 0-4; the second
# amendment in docs/study.md), in runs/thesis-32ep/ and results/thesis-32ep/.
# --longer: 64 epochs, seeds 0-4 (the third amendment), in runs/thesis-64ep/
# and results/thesis-64ep/.
# --last_rung: 128 epochs, seeds 0-4 (the seventh amendment), in
# runs/thesis-128ep/ and results/thesis-128ep/; rope only once rope_additive
# converged there (else the pair cannot be decided at 128 epochs). GATE=0 lets
# rope run without waiting (launch/gpu_decide.sh trains both at once on a GPU);
# its result may be committed only once rope_additive's has passed the gate.
# --count: the four PEs on Task 2 (counting, 48 tokens, dropout 0; the fourth
# amendment), 24 epochs, seeds 0-4, in runs/thesis-count/ and
# results/thesis-count/.
# --grid: the content-dependent coupling grid (the tenth amendment): the same
# Task 2 runs for alibi_data, pope, rope_learned and carope (the eleventh
# amendment), beside --count's alibi and
# rope, in runs/grid-count/ and results/grid-count/, each followed by its
# trained-logit decomposition (decompose.json) and, for rope_learned, its
# recorded frequencies (frequencies.jsonl) and head ablation (ablation.json).
# --grid_distance: the grid's descriptive Task 1 table (the tenth amendment):
# the same PEs at the cpu preset on Task 1, each at its static partner's
# budget and seeds in results/thesis/ (pope, rope_learned, carope: rope's 16
# epochs x 8 seeds; alibi_data: alibi's 8 x 5), in runs/grid-distance/ and
# results/grid-distance/, with the same decomposition and ablation as --grid.
# GIT_COMMIT=1 commits each finished PE's results/<dir>/<pe>/ (those paths only).
#   launch/thesis_cpu.sh [--dry_run] [--long|--longer|--last_rung|--count|--grid|--grid_distance] [PE ...]
#       (default: the four, rotary pair first; with --long/--longer/--last_rung:
#       rope_additive rope; with --count: alibi_multiplicative alibi rope_additive rope;
#       with --grid or --grid_distance: pope alibi_data rope_learned carope)
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=launch/common.sh
. launch/common.sh
if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
long=""
count=""
grid=""
grid_distance=""
last_rung=""
case "${1:-}" in
  --long) long=32; shift ;;
  --longer) long=64; shift ;;
  --last_rung) long=128; last_rung=1; shift ;;
  --count) count=1; shift ;;
  --grid) count=1; grid=1; shift ;;
  --grid_distance) grid=1; grid_distance=1; shift ;;
esac
PES=("$@")
if [[ ${#PES[@]} -eq 0 ]]; then
  if [[ -n "$grid" ]]; then PES=(pope alibi_data rope_learned carope)
  elif [[ -n "$count" ]]; then PES=(alibi_multiplicative alibi rope_additive rope)
  elif [[ -n "$long" ]]; then PES=(rope_additive rope)
  else PES=(rope_additive rope alibi_multiplicative alibi); fi
fi
name=thesis
[[ -z "$long" ]] || name="thesis-${long}ep"
[[ -z "$count" ]] || name="thesis-count"
[[ -z "$grid" ]] || name="grid-count"
[[ -z "$grid_distance" ]] || name="grid-distance"
task=distance
extra=()
COUNT_EPOCHS=24
PY=${PYTHON:-python3}
# converged SUMMARY_JSON: the study's rule (>= 2/3 of seeds plateaued)
converged() {
  "$PY" -c 'import json, sys
from studies.arxiv_2505_13027 import claims
sys.exit(0 if claims.thesis_converged({"summary": json.load(open(sys.argv[1]))}) else 1)' "$1"
}
for pe in "${PES[@]}"; do
  out="studies/arxiv_2505_13027/results/${name}/${pe}"
  if [[ -z "${FORCE:-}" && -f "$out/summary.json" ]]; then
    echo "$out is committed: skipping ${pe}" >&2
    continue
  fi
  gate="studies/arxiv_2505_13027/results/${name}/rope_additive/summary.json"
  if [[ -n "$last_rung" && "$pe" == rope && "${GATE:-1}" != 0 ]] &&
     ! { [[ -f "$gate" ]] && converged "$gate"; }; then
    echo "rope at ${long} epochs runs only once rope_additive converged there ($gate;" \
         "docs/study.md, seventh amendment): skipping rope" >&2
    continue
  fi
  if [[ -n "$count" ]]; then
    epochs=$COUNT_EPOCHS seeds=5 task=count extra=(--config.model.dropout=0)
  elif [[ -n "$long" ]]; then
    epochs="$long" seeds=5
  elif [[ -n "$grid_distance" ]]; then
    case "$pe" in
      alibi_data) epochs=8 seeds=5 ;;
      *) epochs=16 seeds=8 ;;
    esac
  else
    case "$pe" in
      rope|rope_additive) epochs=16 seeds=8 ;;
      *) epochs=8 seeds=5 ;;
    esac
  fi
  wd="runs/${name}/${pe}"
  run_or_print "$PY" -m experiments.sweep --preset=cpu --task="$task" --pe="$pe" \
    --seeds="$seeds" --epochs="$epochs" --record_spectra=16 --record_curvature=64 \
    --workdir="$wd" "${extra[@]}"
  if [[ -n "$grid" ]]; then
    run_or_print "$PY" -m experiments.decompose --workdir="$wd"
    # rope_learned: where the deposit head's trained frequencies went needs
    # the head ablation (the tenth amendment's descriptive part)
    [[ "$pe" != rope_learned ]] || run_or_print "$PY" -m experiments.ablate --workdir="$wd"
  fi
  [ "$DRY_RUN" -eq 0 ] || continue
  mkdir -p "$out"
  cp "$wd"/config.json "$wd"/summary.json "$wd"/metrics.jsonl "$wd"/steps.jsonl \
    "$wd"/spectra.jsonl "$wd"/curvature.jsonl "$out"/
  for extra_file in decompose.json frequencies.jsonl ablation.json; do
    [[ ! -f "$wd/$extra_file" ]] || cp "$wd/$extra_file" "$out"/
  done
  if [[ -n "${GIT_COMMIT:-}" ]]; then
    "$PY" -c 'import sys
from studies.arxiv_2505_13027.plan import git_commit
err = git_commit([sys.argv[1]], sys.argv[2])
print("git: " + (err or "committed " + sys.argv[1]), file=sys.stderr)' \
      "$out" "thesis: ${pe} at ${epochs} epochs x ${seeds} seeds (launch/thesis_cpu.sh, finished run)"
  fi
done
