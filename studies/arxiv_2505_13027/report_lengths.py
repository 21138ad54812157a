"""The length-generalisation section of ``RESULTS.md``.

Reads the ``<run>/lengths*.json`` files ``experiments.lengths`` writes (committed by
``launch/lengths_cpu.sh``) and renders the PE × test-length table, with the spectral
module's prediction beside it, the figure, RoPE's eval-time scalings and shifted starts.
``studies.arxiv_2505_13027.report`` calls :func:`load_lengths` and :func:`lengths_section`.
"""
from __future__ import annotations

import glob
import json
import os

from pe_spectral.analysis import plotting
from pe_spectral.analysis.extrapolation import Prediction


def load_lengths(root: str) -> list[dict]:
  """Every ``<root>/<run>/lengths*.json`` with its run's plateau status."""
  out = []
  for path in sorted(glob.glob(os.path.join(root, "*", "lengths*.json"))):
    with open(path) as f:
      res = json.load(f)
    summ = os.path.join(os.path.dirname(path), "summary.json")
    if os.path.exists(summ):
      with open(summ) as f:
        s = json.load(f)
      res["plateau"] = s.get("plateau")
      res["run_test_accuracy"] = s.get("test_accuracy")
    cfg = os.path.join(os.path.dirname(path), "config.json")
    if os.path.exists(cfg) and "random_positions" not in res:
      with open(cfg) as f:
        res["random_positions"] = json.load(f)["run"]["model"].get("random_positions")
    res["run"] = os.path.basename(os.path.dirname(path))
    out.append(res)
  return out


def _lengths_label(r) -> str:
  """A length-study row's name: the PE, partial RoPE's k, randomized positions."""
  name = r["pe"] + (f" (k={r['rope_heads']})" if r.get("rope_heads") else "")
  if r.get("random_positions"):
    name += f" (random positions < {r['random_positions']})"
  return name


def _cell(row) -> str:
  if row["mean"] is None:
    return "n/a"
  lo, hi = row["ci95"]
  return f"{100 * row['mean']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _prediction_txt(res) -> str:
  """The spectral prediction at the longest length, in words."""
  last = res["lengths"][-1]
  if not last.get("prediction"):
    return "—"
  return Prediction.from_dict(last["prediction"]).describe(last["seq_len"])


def lengths_section(results: list[dict], figdir: str, outdir: str) -> list[str]:
  """PE × test length table (mean [95 % bootstrap CI] over seeds), the spectral
  prediction beside it, the figure, and RoPE's eval-time scalings."""
  plain = [r for r in results if r.get("rope_scaling", "none") == "none" and not r.get("shift")]
  if not plain:
    return []
  rel = lambda path: os.path.relpath(os.path.abspath(path), outdir)
  lines = ["## Length generalisation", "",
           "Trained at one length, every seed evaluated at longer ones with the same labels "
           "(`experiments.lengths`; Task 1: the same distances, longer side segments). Test "
           "accuracy %, mean [95 % percentile-bootstrap CI] over seeds; `n/a`: the PE cannot "
           "reach that length (a learned table). The last column is what the spectral module "
           "says at the longest length.", ""]
  for task in sorted({r["task"] for r in plain}):
    rows = sorted((r for r in plain if r["task"] == task),
                  key=lambda r: (r["preset"], r["faithful"], r["pe"]))
    factors = [x["factor"] for x in rows[0]["lengths"]]
    head = " | ".join(f"{f:g}× ({int(round(f * rows[0]['train_len']))})" for f in factors)
    lines += [f"### {task}, trained at {rows[0]['train_len']} tokens", "",
              f"| PE | mode | preset | n | plateaued | {head} | spectral prediction |",
              "|---|---|---|---|---|" + "---|" * len(factors) + "---|"]
    for r in rows:
      pl = (r.get("plateau") or {}).get("per_seed")
      pl = "?" if pl is None else f"{sum(pl)}/{len(pl)}"
      name = _lengths_label(r)
      cells = " | ".join(_cell(x) for x in r["lengths"])
      lines.append(f"| {name} | {'faithful' if r['faithful'] else 'clean'} | "
                   f"{r['preset']} | {len(r['seeds'])} | {pl} | {cells} | "
                   f"{_prediction_txt(r)} |")
    fig = os.path.join(figdir, f"lengths_{task}.png")
    plotting.length_curves(rows, fig)
    lines += ["", f"![lengths {task}]({rel(fig)})", ""]
    scaled = sorted((r for r in results if r["task"] == task
                     and r.get("rope_scaling", "none") != "none" and not r.get("shift")),
                    key=lambda r: (r["pe"], r["rope_scaling"]))
    if scaled:
      lines += ["Eval-time context extension of the trained rotary models (no retraining): "
                "position interpolation (pi), NTK-aware base (ntk), YaRN as its paper's "
                "equation is written (yarn_turns: the ramp linear in turns, not the reference "
                "implementations' yarn).", "",
                f"| PE | scaling | n | {head} |", "|---|---|---|" + "---|" * len(factors)]
      for base_run in (r for r in rows if any(s["run"] == r["run"] for s in scaled)):
        lines.append(f"| {base_run['pe']} | none | {len(base_run['seeds'])} | "
                     + " | ".join(_cell(x) for x in base_run["lengths"]) + " |")
        for r in (s for s in scaled if s["run"] == base_run["run"]):
          lines.append(f"| {r['pe']} | {r['rope_scaling']} | {len(r['seeds'])} | "
                       + " | ".join(_cell(x) for x in r["lengths"]) + " |")
      lines.append("")
    shifted = sorted((r for r in results if r["task"] == task and r.get("shift")
                      and r.get("rope_scaling", "none") == "none"),
                     key=lambda r: (r["pe"], r["shift"]))
    if shifted:
      lines += ["Shifted starts: each test sentence moved right by a random 0..S pad tokens "
                "(masked: the content and its relative positions are unchanged, the absolute "
                "positions move).", ""]
      for r in shifted:
        base_run = next((b for b in rows if b["run"] == r["run"]), None)
        fs = [x["factor"] for x in r["lengths"]]
        lines += ["| PE | S | " + " | ".join(f"{f:g}×" for f in fs) + " |",
                  "|---|---|" + "---|" * len(fs)] if r is shifted[0] else []
        if base_run is not None:
          by_f = {x["factor"]: x for x in base_run["lengths"]}
          lines.append(f"| {r['pe']} | 0 | " + " | ".join(
              _cell(by_f[f]) if f in by_f else "—" for f in fs) + " |")
        lines.append(f"| {r['pe']} | {r['shift']} | "
                     + " | ".join(_cell(x) for x in r["lengths"]) + " |")
      lines.append("")
  return lines
