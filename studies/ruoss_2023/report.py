r"""RESULTS.md of the Ruoss et al. tasks study, from the committed results only.

  python -m studies.ruoss_2023.report            # writes studies/ruoss_2023/RESULTS.md

Reads ``results/<task>/<label>/`` (summary.json, lengths.json, ablation.json)
and applies study.md's rules: Q1 the table per task, Q2 randomized vs rope
paired over seeds behind the convergence gate, Q3 the single-head deposit on
even_pairs. A run not yet committed is listed as missing, never guessed.
"""
from __future__ import annotations

import json
import os

import numpy as np
from absl import app, flags

from pe_spectral.analysis import plotting, stats

HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Only when run as a program: importing the module (tests, another
  study's report in the same process) defines no flag."""
  flags.DEFINE_string("results", os.path.join(HERE, "results"), "The committed runs.")
  flags.DEFINE_string("out", os.path.join(HERE, "RESULTS.md"), "Where to write.")
  flags.DEFINE_string("figdir", os.path.join(HERE, "results", "figures"),
                      "Where the per-task length figures go (beside --out's links).")

TASKS = ("even_pairs", "parity_check", "cycle_navigation", "modular_arithmetic")
LABELS = ("nope", "sinusoidal", "rope", "alibi", "randomized")
LONG = (80, 160, 320)       # the long lengths (study.md)
GATE = 0.90                  # mean test accuracy at 40 tokens for Q2
DEPOSIT_RATIO, DEPOSIT_SEED_FRAC = 3.0, 2.0 / 3.0   # Q3 (study.md)


def _load(root: str, task: str, label: str):
  d = os.path.join(root, task, label)
  if not os.path.exists(os.path.join(d, "lengths.json")):
    return None
  out = {}
  for name in ("summary", "lengths", "ablation", "decompose"):
    p = os.path.join(d, name + ".json")
    if os.path.exists(p):
      with open(p) as f:
        out[name] = json.load(f)
  return out


def per_length(run) -> dict:
  """``{seq_len: [accuracy per seed]}``."""
  return {r["seq_len"]: np.asarray(r["accuracy"], float) for r in run["lengths"]["lengths"]
          if r["accuracy"] is not None}


def long_accuracy(run) -> np.ndarray:
  """Per seed: the mean accuracy over the long lengths."""
  acc = per_length(run)
  return np.mean([acc[n] for n in LONG], axis=0)


def deposit(ablation: dict) -> dict:
  """Q3's per-seed rule on a single-head ablation: in layer 0 (the first half
  of 2 layers), the largest drop > 0 and >= 3x the second largest."""
  d = 100 * np.asarray(ablation["drop"], float)  # [seeds, layers, heads] points
  early = max(1, d.shape[1] // 2)
  srt = np.sort(d[:, :early], axis=-1)
  top, second = srt[..., -1], srt[..., -2]
  hit = ((top > 0) & (top >= DEPOSIT_RATIO * np.maximum(second, 0.0))).any(1)
  return {"per_seed": hit.tolist(), "fraction": float(hit.mean()),
          "present": bool(hit.mean() >= DEPOSIT_SEED_FRAC),
          "top": top[:, 0].tolist(), "second": second[:, 0].tolist()}


def _pct(x) -> str:
  return f"{100 * float(np.mean(x)):.1f}"


def length_figure(runs: dict, task: str, figdir: str):
  """Draws ``lengths_<task>.png`` (accuracy vs test length, one line per
  committed PE, 95 % bootstrap band over seeds); its file name, or None when
  no run of the task is committed."""
  results = [r["lengths"] for r in runs.values() if r is not None]
  if not results:
    return None
  os.makedirs(figdir, exist_ok=True)
  name = f"lengths_{task}.png"
  plotting.length_curves(results, os.path.join(figdir, name),
                         f"{task}: trained on lengths 1-40 (mean, 95% CI over seeds)")
  return name


def report(root: str, figdir=None, rel: str = "") -> str:
  """RESULTS.md's text; with ``figdir``, also draws each task's length
  figure there and links it as ``rel/<name>``."""
  lines = ["# Ruoss et al.'s tasks on this CPU: results", "",
           "Built by `python -m studies.ruoss_2023.report` from `results/` only; the questions "
           "and rules are in [study.md](study.md), written before the runs. Accuracy in %, mean "
           "over 5 seeds (0-4, paired across PEs); `long` is the mean over 80, 160 and 320 "
           "tokens; train on lengths 1-40.", ""]
  verdicts = {}
  for task in TASKS:
    runs = {lab: _load(root, task, lab) for lab in LABELS}
    lines += [f"## {task}", "",
              "| PE | train acc | test 40 | 80 | 160 | 320 | long |",
              "|---|---|---|---|---|---|---|"]
    for lab, run in runs.items():
      if run is None:
        lines.append(f"| {lab} | not run yet | | | | | |")
        continue
      acc = per_length(run)
      cells = [_pct(acc[n]) if n in acc else "n/a" for n in (40, *LONG)]
      lines.append(f"| {lab} | {_pct(run['summary']['train_accuracy'])} | "
                   + " | ".join(cells) + f" | {_pct(long_accuracy(run))} |")
    fig = length_figure(runs, task, figdir) if figdir else None
    if fig:
      lines += ["", f"![{task}: accuracy against test length]({rel}/{fig})"]
    rope, rnd = runs["rope"], runs["randomized"]
    if rope is None or rnd is None:
      verdicts[task] = "not run yet"
    else:
      at40 = {lab: float(np.mean(per_length(r)[40])) for lab, r in (("rope", rope),
                                                                     ("randomized", rnd))}
      if min(at40.values()) < GATE:
        verdicts[task] = (f"not testable at this scale (test accuracy at 40: rope "
                          f"{100 * at40['rope']:.1f} %, randomized "
                          f"{100 * at40['randomized']:.1f} %; "
                          f"the gate is {100 * GATE:.0f} %)")
      else:
        p = stats.paired(long_accuracy(rnd), long_accuracy(rope),
                         seeds_a=rnd["lengths"]["seeds"], seeds_b=rope["lengths"]["seeds"])
        verdicts[task] = (f"{stats.verdict(p)}: randomized - rope = {100 * p['mean']:+.1f} points "
                          f"[{100 * p['lo']:+.1f}, {100 * p['hi']:+.1f}], {p['wins']}/{p['n']} "
                          f"seeds, sign-flip p = {p['p']:.3f}")
    lines += ["", f"**Q2 (randomized > rope on the long lengths):** {verdicts[task]}.", ""]
  lines += ["## Q3: a single-head deposit on even_pairs", ""]
  for lab in ("rope", "nope"):
    run = _load(root, "even_pairs", lab)
    if run is None or "ablation" not in run:
      lines.append(f"- {lab}: not run yet")
      continue
    dep = deposit(run["ablation"])
    lines.append(f"- {lab}: deposit {'present' if dep['present'] else 'absent'} "
                 f"({sum(dep['per_seed'])}/{len(dep['per_seed'])} seeds; layer-0 largest "
                 f"single-head drops {', '.join(f'{t:.1f}' for t in dep['top'])} points, "
                 f"second largest {', '.join(f'{t:.1f}' for t in dep['second'])})")
    dec = run.get("decompose")
    if dec is not None:
      ratio = np.asarray(dec["contraction_ratio_median"], float)  # [seeds, layers, heads]
      per_layer = ", ".join(f"layer {i} {r:.3f}" for i, r in
                            enumerate(np.median(ratio, axis=2).mean(0)))
      text = (f"  trained-logit decomposition ({dec['examples']} test examples): contraction "
              f"ratio spread(L)/spread(L at θ = 0), median over heads, mean over seeds: "
              f"{per_layer}")
      if "deposit_head_ratio_mean" in dec:
        text += (f"; the ablation's largest-drop head {dec['deposit_head_ratio_mean']:.3f}, "
                 f"the other heads {dec['other_heads_ratio_mean']:.3f}")
      lines.append(text)
  lines += ["", "## Beside the published numbers", "",
            "Ruoss et al. (2023) report, per task and PE, accuracy averaged over test lengths "
            "beyond the training lengths (their main table). That table could not be retrieved "
            "on this machine, so no published number is placed beside ours and no ranking is "
            "compared yet: it is the one step of the issue still open, and their scale (model "
            "size, steps, seeds) is to be taken from their paper with it. Ours: 2 layers, 4 "
            "heads, d_model 64, 872 steps of batch 128, 5 seeds, test to 320 tokens.", ""]
  return "\n".join(lines)


def main(argv):
  del argv
  rel = os.path.relpath(os.path.abspath(FLAGS.figdir),
                        os.path.dirname(os.path.abspath(FLAGS.out)))
  text = report(FLAGS.results, FLAGS.figdir, rel)
  with open(FLAGS.out, "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
