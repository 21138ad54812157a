"""(h), the content-dependent coupling grid (study.md, tenth and eleventh amendments).

Pairs a content-dependent PE with its static twin on the fourth amendment's
Task 2 runs: ``pope`` and ``carope`` vs ``rope`` (multiplicative: contraction
ratio) and ``alibi_data`` vs ``alibi`` (additive: widening ratio), each measured on the
run's last ``spectra.jsonl`` row (median over heads, geometric mean over
layers, per seed), and the examples to 90 % of the final test accuracy.
``rope_learned`` is described (frequency drift), not judged. Pure functions
of loaded runs (``rules.load``); :func:`grid_section` renders them.
"""
from __future__ import annotations

import json
import os

import numpy as np

from pe_spectral.analysis import plotting, stats
from pe_spectral.nn.model import ModelConfig
from pe_spectral.pe import encodings
from studies.arxiv_2505_13027 import claims

# (content-dependent, static, coupling measure)
GRID_PAIRS = (("pope", "rope", "contraction_ratio"),
              ("alibi_data", "alibi", "widening_ratio"),
              ("carope", "rope", "contraction_ratio"))  # the eleventh amendment
DESCRIBED = ("rope_learned",)
NEW_PES = tuple(p for p, _, _ in GRID_PAIRS) + DESCRIBED
# the fourth amendment's other two Task 2 runs, shown beside the grid
SHOWN = ("rope_additive", "alibi_multiplicative")
GRID_ORDER = ("rope", "pope", "rope_learned", "alibi", "alibi_data", "carope")
TABLE_ORDER = GRID_ORDER + SHOWN


# where (h) is measured: Task 2 is judged (the registered rule), Task 1 only
# described; ``prefix`` names the figures, ``budgets`` puts each run's epochs
# and seeds in the table (Task 1's members train at different budgets)
TASK2 = dict(
    title="## (h) The content-dependent coupling grid (Task 2, dropout 0, 24 epochs, seeds 0-4)",
    intro="Registered in study.md's tenth amendment (`carope` in its eleventh); measures "
          "from each run's last `spectra.jsonl` row (16 test examples).",
    caption="Task 2, cpu, dropout 0, 24 epochs", prefix="grid", judged=True, budgets=False)
TASK1 = dict(
    title="### (h), described: the same PEs on Task 1 (`distance`, cpu preset)",
    intro="Descriptive only (study.md, tenth amendment): no statement is made. Each new PE "
          "trains at its static partner's committed Task 1 budget (`results/thesis/`: "
          "`pope`, `rope_learned` and `carope` as `rope`, `alibi_data` as `alibi`); measures "
          "as above, from each run's last `spectra.jsonl` row. The plateau column says which "
          "runs had stopped moving: the ratios of the others describe runs still training.",
    caption="Task 1, cpu, each at its static partner's budget", prefix="grid_distance",
    judged=False, budgets=True)


def load_grid(grid_dir: str, count_dir: str) -> dict:
  """``{pe: run}``: the grid's new runs and the static members' count runs."""
  out = {}
  for root, pes in ((grid_dir, NEW_PES),
                    (count_dir, [s for _, s, _ in GRID_PAIRS] + list(SHOWN))):
    for pe in pes:
      d = os.path.join(root, pe)
      if os.path.exists(os.path.join(d, "summary.json")):
        out[pe] = claims.load(d)
        abl = os.path.join(d, "ablation.json")
        if os.path.exists(abl):
          with open(abl) as f:
            out[pe]["ablation"] = json.load(f)
        freq = os.path.join(d, "frequencies.jsonl")
        if os.path.exists(freq):
          with open(freq) as f:
            out[pe]["frequencies"] = [json.loads(line) for line in f if line.strip()]
  return out


def coupling_per_layer(run: dict, measure: str) -> np.ndarray:
  """``[layers]``: the last spectra row's ``measure``, median over heads, mean
  over seeds."""
  row = run["spectra"][-1]
  return np.median(np.asarray(row[measure], np.float64), axis=-1).mean(axis=0)


def _row_per_seed(row: dict, measure: str) -> np.ndarray:
  """``[seeds]``: one spectra row's ``measure`` ``[seeds, layers, heads]``,
  median over heads, geometric mean over layers (the registered aggregate)."""
  per_layer = np.median(np.asarray(row[measure], np.float64), axis=-1)  # [seeds, layers]
  return np.exp(np.mean(np.log(per_layer), axis=-1))


def coupling_per_seed(run: dict, measure: str) -> np.ndarray:
  """``[seeds]``: :func:`_row_per_seed` of the last spectra row."""
  return _row_per_seed(run["spectra"][-1], measure)


def deposit_drift(run: dict) -> str:
  """Where the deposit head's frequencies went: per seed, the layer-0 head
  whose knock-out costs most test accuracy (``ablation.json``'s ``drop``),
  its median |log θ/θ₀| at the last evaluation, against the median over
  the seed's other layer-0 heads."""
  drift = np.asarray(run["frequencies"][-1]["drift_median"], np.float64)  # [S, L, H]
  abl = run["ablation"]
  drop = 100 * np.asarray(abl["drop"], np.float64)                            # [S, L, H]
  parts, ratios = [], []
  for s in range(drop.shape[0]):
    h = int(np.argmax(drop[s, 0]))
    others = np.median(np.delete(drift[s, 0], h))
    ratios.append(drift[s, 0, h] / others)
    parts.append(f"seed {abl['seeds'][s]}: head {h} (drop {drop[s, 0, h]:.1f} points) "
                 f"{drift[s, 0, h]:.3f} vs {others:.3f}")
  return ("rope_learned, layer 0's largest-drop head per seed: its median |log θ/θ₀| vs "
          "the median over the seed's other layer-0 heads — " + "; ".join(parts)
          + f". Ratio, median over seeds: {np.median(ratios):.2f}.")


def _statement(p: dict, what: str, higher: str, lower: str) -> str:
  if p["lo"] > 0:
    word = f"changes: {higher}"
  elif p["hi"] < 0:
    word = f"changes: {lower}"
  else:
    word = "no change detected"
  return (f"{word} ({what} {p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}], "
          f"{p['wins']}/{p['n']} seeds higher, sign-flip p = {p['p']:.3f})")


def claim_h(runs: dict) -> list[dict]:
  """One dict per (pair, measure): ``pair``, ``measure``, ``statement``."""
  out = []
  for dyn, static, measure in GRID_PAIRS:
    for kind in ("spectrum", "examples"):
      row = {"pair": f"{dyn} vs {static}", "measure": kind}
      missing = [pe for pe in (dyn, static) if pe not in runs]
      if missing:
        row["statement"] = "not run yet (" + ", ".join(missing) + ")"
        out.append(row)
        continue
      a, b = runs[dyn], runs[static]
      unconverged = [pe for pe, r in ((dyn, a), (static, b)) if not claims.thesis_converged(r)]
      if unconverged:
        row["statement"] = "inconclusive (not converged: " + ", ".join(unconverged) + ")"
        out.append(row)
        continue
      seeds_a, seeds_b = a["summary"]["seeds"], b["summary"]["seeds"]
      if kind == "spectrum":
        p = stats.paired(np.log(coupling_per_seed(a, measure)),
                         np.log(coupling_per_seed(b, measure)), seeds_a=seeds_a, seeds_b=seeds_b)
        more, less = (("contracts less", "contracts more") if measure == "contraction_ratio"
                      else ("widens more", "widens less"))
        row["statement"] = _statement(p, f"log {measure.replace('_', ' ')} difference",
                                      f"{dyn} {more}", f"{dyn} {less}")
      else:
        ea = stats.examples_to_threshold(a["metrics"])
        eb = stats.examples_to_threshold(b["metrics"])
        p = stats.paired(np.log(ea), np.log(eb), seeds_a=seeds_a, seeds_b=seeds_b)
        row["statement"] = _statement(p, "log examples-to-threshold difference",
                                      f"{dyn} needs more examples", f"{dyn} needs fewer examples")
      out.append(row)
  return out


def _table_pe(pe: str, run: dict, setting: dict) -> str:
  if not setting["budgets"]:
    return pe
  train = run["config"]["run"]["train"]
  return f"{pe} ({train['epochs']} ep × {len(run['summary']['seeds'])} seeds)"


def grid_section(runs: dict, setting: dict = TASK2) -> list[str]:
  """RESULTS.md's section for (h) on ``setting`` (:data:`TASK2`, judged, or
  :data:`TASK1`, described only)."""
  lines = [setting["title"], "", setting["intro"], "",
           "| PE | test acc % | plateaued | contraction ratio | widening ratio | "
           "examples to 90 % (median) |", "|---|---|---|---|---|---|"]
  for pe in TABLE_ORDER:
    r = runs.get(pe)
    if r is None:
      lines.append(f"| {pe} | not run yet | | | | |")
      continue
    acc = 100 * np.mean(r["summary"]["test_accuracy"])
    plat = r["summary"]["plateau"]["per_seed"]
    cells = [f"{np.mean(coupling_per_seed(r, m)):.3f}" if r.get("spectra") else "n/a"
             for m in ("contraction_ratio", "widening_ratio")]
    ex = np.median(stats.examples_to_threshold(r["metrics"]))
    lines.append(f"| {_table_pe(pe, r, setting)} | {acc:.1f} | {sum(plat)}/{len(plat)} | "
                 f"{cells[0]} | {cells[1]} | {ex:,.0f} |")
  if setting["judged"]:
    lines += ["", "| pair | measure | statement |", "|---|---|---|"]
    lines += [f"| {c['pair']} | {c['measure']} | {c['statement']} |" for c in claim_h(runs)]
  layered = [(pe, runs[pe]) for pe in TABLE_ORDER if pe in runs and runs[pe].get("spectra")]
  if layered:
    layers = len(coupling_per_layer(layered[0][1], "contraction_ratio"))
    lines += ["", "Per layer (median over heads, mean over seeds):", "",
              "| PE | " + " | ".join(f"contraction L{i}" for i in range(layers)) + " | "
              + " | ".join(f"widening L{i}" for i in range(layers)) + " |",
              "|---|" + "---|" * (2 * layers)]
    for pe, r in layered:
      cells = [f"{v:.3f}" for m in ("contraction_ratio", "widening_ratio")
               for v in coupling_per_layer(r, m)]
      lines.append(f"| {pe} | " + " | ".join(cells) + " |")
  rl = runs.get("rope_learned")
  if rl is not None and rl.get("frequencies"):
    drift = np.asarray(rl["frequencies"][-1]["drift_median"], np.float64)  # [S, L, H]
    theta = np.asarray(rl["frequencies"][-1]["theta"], np.float64)           # [S, L, H, F]
    # medians, not means: a frequency that reached or crossed 0 is infinitely far
    typical = np.median(drift.transpose(1, 0, 2).reshape(drift.shape[1], -1), axis=-1)
    crossed = (theta <= 0).mean(axis=(0, 2, 3))
    lines += ["", "rope_learned at the last evaluation: each head's median |log θ/θ₀| over "
              "its frequencies, median over seeds and heads: "
              + ", ".join(f"layer {i} {d:.3f}" for i, d in enumerate(typical))
              + "; frequencies that reached or crossed 0: "
              + ", ".join(f"layer {i} {100 * c:.0f} %" for i, c in enumerate(crossed))]
    if rl.get("ablation"):
      lines += ["", deposit_drift(rl)]
  return lines + [""]


def _ratio_over_training(run: dict, measure: str) -> tuple[list, np.ndarray]:
  """Examples seen at each spectra row and the row's ``measure`` per seed
  ``[rows, seeds]`` (median over heads, geometric mean over layers)."""
  seen = {m["step"]: m["examples_seen"] for m in run["metrics"]}
  rows = [r for r in run["spectra"] if r["step"] in seen]
  return [seen[r["step"]] for r in rows], np.asarray([_row_per_seed(r, measure) for r in rows])


def _color(pe: str):
  """One colour per grid PE, the same in every (h) figure."""
  return plotting.plt.cm.tab10.colors[TABLE_ORDER.index(pe)]


def grid_figures(runs: dict, figdir: str, rel: str, setting: dict = TASK2) -> list[str]:
  """Draws (h)'s figures under ``figdir``: the learning curves, each
  multiplicative PE's contraction and each additive PE's widening over
  training, and rope_learned's frequencies; returns RESULTS.md's lines that
  show them (``rel``: ``figdir`` as the Markdown file sees it)."""
  present = [pe for pe in TABLE_ORDER if pe in runs]
  if not present:
    return []
  os.makedirs(figdir, exist_ok=True)
  lines = []
  curves = [{"label": f"{pe} ({sum(runs[pe]['summary']['plateau']['per_seed'])}/"
                      f"{len(runs[pe]['summary']['plateau']['per_seed'])} plateaued)",
             "records": runs[pe]["metrics"], "color": _color(pe)} for pe in present]
  pre = setting["prefix"]
  plotting.learning_curves(curves, os.path.join(figdir, f"{pre}_curves.png"),
                           f"(h) grid: {setting['caption']}")
  lines += [f"![(h) learning curves]({rel}/{pre}_curves.png)", ""]
  panels = {}
  for measure, label in (("contraction_ratio", "contraction ratio (spread vs θ = 0)"),
                         ("widening_ratio", "widening ratio (spread vs no bias)")):
    curves = []
    for pe in present:
      coupling = runs[pe]["coupling"]
      if runs[pe].get("spectra") and (("multiplicative" in coupling)
                                      == (measure == "contraction_ratio")):
        x, v = _ratio_over_training(runs[pe], measure)
        if x:  # spectra rows recorded at evaluation steps
          curves.append({"label": pe, "x": x, "values": v, "color": _color(pe)})
    panels[label] = curves
  if any(panels.values()):
    plotting.ratio_curves(panels, os.path.join(figdir, f"{pre}_coupling.png"),
                          "(h) grid: coupling over training (16 test examples' logits)")
    lines += [f"![(h) coupling over training]({rel}/{pre}_coupling.png)", ""]
  rl = runs.get("rope_learned")
  if rl is not None and rl.get("frequencies"):
    cfg = ModelConfig.from_dict(rl["config"]["run"]["model"])
    theta0 = encodings.get("rope_learned").frequencies(cfg)
    plotting.frequencies_over_training(rl["frequencies"], theta0,
                                       os.path.join(figdir, f"{pre}_rope_learned_frequencies.png"),
                                       f"(h) rope_learned, {setting['caption']}")
    lines.append(f"![(h) rope_learned frequencies]({rel}/{pre}_rope_learned_frequencies.png)")
  return ["", *lines]
