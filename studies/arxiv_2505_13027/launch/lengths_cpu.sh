#!/usr/bin/env bash
# Length-generalisation study on the CPU (cpu preset, Task 1, 8 seeds per PE):
# trains each PE (resumable: rerun to continue), evaluates every seed at 1-4x
# the training length (plus PI/NTK/YaRN for RoPE), and copies each finished
# run's small files to results/lengths/<pe>-cpu/ so the report rebuilds from git.
# A PE already committed there is skipped (FORCE=1 redoes it).
#   launch/lengths_cpu.sh [PE ...]      (default: the list below)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PES=("$@")
[[ ${#PES[@]} -gt 0 ]] || PES=(rope alibi sinusoidal relative mla nope learned rope_sinusoidal)
for pe in "${PES[@]}"; do
  if [[ -z "${FORCE:-}" && -f "studies/arxiv_2505_13027/results/lengths/${pe}-cpu/lengths.json" ]]; then
    echo "studies/arxiv_2505_13027/results/lengths/${pe}-cpu is committed: skipping ${pe}" >&2
    continue
  fi
  wd="runs/lengths/${pe}-cpu"
  python -m experiments.sweep --preset=cpu --task=distance --pe="$pe" --seeds=8 \
    --workdir="$wd"
  python -m experiments.lengths --workdir="$wd"
  if [[ "$pe" == rope || "$pe" == rope_sinusoidal ]]; then
    for s in pi ntk yarn_turns; do python -m experiments.lengths --workdir="$wd" --rope_scaling="$s"; done
  fi
  out="studies/arxiv_2505_13027/results/lengths/${pe}-cpu"
  mkdir -p "$out"
  cp "$wd"/config.json "$wd"/summary.json "$wd"/metrics.jsonl "$wd"/lengths*.json "$out"/
done
