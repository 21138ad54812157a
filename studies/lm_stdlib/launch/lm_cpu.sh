#!/usr/bin/env bash
# The language study, CPU-sized (study.md): for each PE, a 5-seed sweep of
# --task=lm at the cpu preset, the length tool (1x-16x; RoPE with its
# evaluation-time scalings), the trained-logit decomposition and the single-head
# ablation. Each finished run's small files are copied to results/runs/<pe>/ so
# the report rebuilds from git; a run already there is skipped (FORCE=1 redoes
# it); an interrupted run resumes from runs/.
#   studies/lm_stdlib/launch/lm_cpu.sh [--dry_run] [PE ...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
source launch/common.sh
PES=()
for a in "$@"; do
  case "$a" in
    --dry_run) DRY_RUN=1 ;;
    -*) die "unknown argument '$a' (use --dry_run, then PE names)" ;;
    *) PES+=("$a") ;;
  esac
done
[[ ${#PES[@]} -gt 0 ]] || PES=(nope sinusoidal learned alibi rope fire kerple_log pope alibi_data carope)
SEEDS=5
for pe in "${PES[@]}"; do
  out="studies/lm_stdlib/results/runs/${pe}"
  if [[ -z "${FORCE:-}" && -f "$out/lengths.json" ]]; then
    echo "$out is committed: skipping" >&2
    continue
  fi
  wd="runs/lm_stdlib/${pe}"
  run_or_print nice python -m experiments.sweep --task=lm --preset=cpu --pe="$pe" \
    --seeds="$SEEDS" --workdir="$wd"
  run_or_print nice python -m experiments.lengths --workdir="$wd"
  run_or_print nice python -m experiments.decompose --workdir="$wd"
  run_or_print nice python -m experiments.ablate --workdir="$wd"
  if [[ "$DRY_RUN" -eq 0 ]]; then
    mkdir -p "$out"
    cp "$wd"/config.json "$wd"/summary.json "$wd"/metrics.jsonl "$wd"/lengths.json "$out"/
    for f in ablation.json decompose.json lengths.png loss_by_position.png passkey.png; do
      [[ ! -f "$wd/$f" ]] || cp "$wd/$f" "$out"/
    done
  fi
done
