"""The coupling study's section of ``RESULTS.md``: the 2×2 design of
study.md ("The thesis").

Loads the committed thesis runs of each budget (:func:`load_thesis_budgets`), names
a configuration (:func:`thesis_task_label`) and renders its table, figures and the
frequency attribution of the deposit head (:func:`thesis_section`). The verdict rows
(e), (f), (f2), (g) stay in ``studies.arxiv_2505_13027.report``, beside the other claims.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from pe_spectral.analysis import plotting, stats
from studies.arxiv_2505_13027 import claims as rules

plt = plotting.plt  # pyplot, on the Agg backend plotting selects


def load_thesis(root: str) -> dict:
  """``{pe: thesis run}`` for every finished run under ``root`` (the four PEs
  of the 2x2 design first, in the design's order)."""
  if not root or not os.path.isdir(root):
    return {}
  order = [pe for _, m, a in rules.PAIRS for pe in (m, a)]
  found = sorted((d for d in os.listdir(root)
                  if os.path.exists(os.path.join(root, d, "summary.json"))),
                 key=lambda d: (order.index(d) if d in order else len(order), d))
  return {d: rules.load(os.path.join(root, d)) for d in found}


def load_thesis_budgets(roots) -> tuple[dict, list[dict]]:
  """``(judged, superseded)`` over several budget directories
  (:func:`studies.arxiv_2505_13027.rules.judged_runs`)."""
  return rules.judged_runs([b for b in (load_thesis(r) for r in roots) if b])


def thesis_budget(truns: dict) -> str:
  """e.g. ``cpu: rope, rope_additive 16 ep × 8 seeds; alibi 8 ep × 5 seeds``."""
  groups: dict = {}
  for pe, r in truns.items():
    key = (r["config"]["run"]["train"]["epochs"], len(r["summary"]["seeds"]))
    groups.setdefault(key, []).append(pe)
  preset = next(iter(truns.values()))["summary"]["preset"]
  return f"{preset}: " + "; ".join(f"{', '.join(p)} {e} ep × {n} seeds"
                                  for (e, n), p in groups.items())


def _thesis_table(truns: dict) -> list[str]:
  lines = [
      "| PE | coupling | test acc % | plateaued | "
      "coupling ratio L0 / L1 (geo-mean over training) | "
      "examples to 90 % of final (median) | peak λ_max(P⁻¹H) (mean) | peak in the first half "
      "(mean) | peak at (median fraction of training) | loss spikes (total; "
      f"of them above loss {rules.SPIKE_FLOOR_SENSITIVITY:g}) |",
      "|---|---|---|---|---|---|---|---|---|---|"]
  e_rows = {(r["pe"], r["layer"]): r for r in rules.claim_e(truns)["rows"]}
  for pe, r in truns.items():
    acc = np.asarray(r["summary"]["test_accuracy"]) * 100
    m, lo, hi = stats.bootstrap_mean_ci(acc)
    per = r["summary"]["plateau"]["per_seed"]
    nl = rules.ratio_over_training(r).shape[-1]
    ratios = " / ".join(f"{e_rows[(pe, l)]['ratio']:.3f} [{e_rows[(pe, l)]['lo']:.3f}, "
                        f"{e_rows[(pe, l)]['hi']:.3f}]" for l in range(nl))
    sharp = rules.peak_sharpness(r) if r["curvature"] else None
    lines.append(f"| {pe} | {r['coupling']} | {m:.1f} [{lo:.1f}, {hi:.1f}] | "
                 f"{sum(per)}/{len(per)} | {ratios} | "
                 f"{np.median(rules.examples_to_threshold(r)) / 1e3:.0f} k | "
                 f"{'—' if sharp is None else f'{sharp.mean():.0f}'} | "
                 f"{'—' if sharp is None else f'{rules.peak_sharpness(r, 0.5).mean():.0f}'} | "
                 f"{'—' if sharp is None else f'{np.median(rules.peak_sharpness_at(r)):.2f}'} | "
                 f"{int(rules.spike_counts(r).sum())} "
                 f"({int(rules.spike_counts(r, rules.SPIKE_FLOOR_SENSITIVITY).sum())}) |")
  return lines


def thesis_task_label(truns: dict) -> str:
  """A thesis configuration's name from its runs' own config: ``Task 1`` or,
  for the Task 2 runs (study.md, fourth amendment), e.g. ``Task 2
  (counting, 48 tokens, counts 0–40), dropout 0``."""
  rc = next(iter(truns.values()))["config"]["run"]
  t = rc["task"]
  if t["name"] != "count":
    return "Task 1"
  return (f"Task 2 (counting, {t['seq_len']} tokens, counts 0–{t['count_max']}), "
          f"dropout {rc['model']['dropout']:g}")


def thesis_section(truns: dict, figdir: str, outdir: str,
                   superseded: Sequence[dict] = (), *, task: str = "Task 1",
                   slug: str = "", heading: bool = True) -> list[str]:
  """The 2x2 design's section for one configuration (``task`` names it in the
  text, ``slug`` in the figure names); ``heading`` off for a second
  configuration, which gets a sub-heading instead."""
  lines = (["## Spectral contraction and optimisation", ""] if heading
           else [f"### The 2×2 design on {task}", ""])
  if not truns:
    return lines + ["No coupling-study runs (`launch/thesis_cpu.sh`) are committed yet.", ""]
  rel = lambda path: os.path.relpath(os.path.abspath(path), outdir)
  lines += [
      "The 2×2 design of [study.md](study.md) (\"The thesis\", pre-registered before "
      "these runs): one kernel coupled multiplicatively or additively — rotary (`rope` vs "
      "`rope_additive`) and decay (`alibi_multiplicative` vs `alibi`). "
      f"{task}, {thesis_budget(truns)} (pairs compared on the seeds they share); the "
      "coupling ratio is "
      "spread(S(L)) over the same spread without the coupling (θ = 0, ρ = 1, or the bias "
      "removed), head median, geometric mean over all evaluations; sharpness is Adam's "
      "λ_max(P⁻¹H) on 64 fixed training examples. The registered measure is its peak over "
      "all evaluations; the two columns after it are a sensitivity figure, not a verdict: "
      "near zero loss Adam's second moments shrink with the gradients and λ_max(P⁻¹H) "
      "climbs at the end of training, so the peak often falls on the last evaluation.", "",
      ] + _thesis_table(truns)
  for sup in superseded:
    lines += ["", f"Not judged — runs at another budget ({thesis_budget(sup)}); a pair is "
              "judged at the longest budget at which both of its members are committed "
              "(study.md, second amendment):", ""] + _thesis_table(sup)
  os.makedirs(figdir, exist_ok=True)
  paths = {k: os.path.join(figdir, f"thesis_{slug + '_' if slug else ''}{k}.png")
           for k in ("curves", "ratio", "sharpness", "scatter")}
  thesis_figures(truns, paths)
  lines += ["", f"![test accuracy]({rel(paths['curves'])})", "",
            f"![coupling ratio over training]({rel(paths['ratio'])})", "",
            f"![sharpness over training]({rel(paths['sharpness'])})", "",
            f"![examples to threshold vs early ratio]({rel(paths['scatter'])})", ""]
  if heading:
    lines += frequency_lines([truns, *superseded], figdir, rel)
  lines += [f"Verdicts (e), (f), (f2){', (g)' if heading else ''} "
            f"{'' if heading else 'on ' + task + ' '}are in the verdict table at the top.", ""]
  return lines


def frequency_lines(budgets: Sequence[dict], figdir: str, rel) -> list[str]:
  """The frequency-band attribution of each seed's layer-0 deposit head, from a
  committed ``ablation-freq.json`` (``ablate --frequencies``): per PE, the
  first budget in ``budgets`` that has one."""
  lines, done = [], set()
  for pe, r in ((pe, r) for b in budgets for pe, r in b.items()):
    path = os.path.join(r.get("workdir", ""), "ablation-freq.json")
    if pe in done or not os.path.exists(path):
      continue
    done.add(pe)
    with open(path) as f:
      fr = json.load(f)
    drop = np.asarray(fr["drop_points"])                      # [seeds, L, H, P]
    theta = np.asarray(fr["frequencies"])
    heads = np.asarray(fr["deposit_head"])[:, 0]
    fig = os.path.join(figdir, f"thesis_frequencies_{pe}.png")
    plotting.frequency_heatmaps(drop[:, 0], theta, heads, fr["seeds"], fig,
                                f"{pe}: layer 0, accuracy drop (points) with one head's "
                                "rotary pair unrotated; deposit head boxed")
    e, n = rules.budget(r)
    lines += [f"**Which frequencies carry the deposit ({pe}, {e} ep × {n} seeds).** "
              "Each (layer, head, rotary "
              f"pair) of every seed had its rotation switched off (θ_k → 0), on the "
              f"{fr['num_examples']} test examples; the deposit head is the layer-0 head whose "
              "knock-out costs most (head ablation). Per seed: the deposit head's largest "
              "single-pair drop, its pair's θ_k, and the share of the head's positive "
              "pair-drops carried by its top pair.", "",
              "| seed | deposit head | largest pair drop (points) | θ_k | share of the head's "
              "pair damage |", "|---|---|---|---|---|"]
    for s, seed in enumerate(fr["seeds"]):
      d = drop[s, 0, heads[s]]
      k = int(np.argmax(d))
      pos = np.clip(d, 0, None).sum()
      share = f"{d[k] / pos:.2f}" if pos > 0 else "—"
      lines.append(f"| {seed} | {heads[s]} | {d[k]:.1f} | {theta[k]:.3g} | {share} |")
    lines += ["", f"![frequency heatmaps {pe}]({rel(fig)})", ""]
  return lines


# The thesis figures (moved from pe_spectral.analysis.plotting: they read the study's rules).
_THESIS_COLORS = {"rope": "tab:blue", "rope_additive": "tab:cyan",
                  "alibi_multiplicative": "tab:red", "alibi": "tab:orange"}


def _color(pe, i):
  return _THESIS_COLORS.get(pe, f"C{i}")


def _log_band(ax, x, per_seed, label, color, style="-"):
  """Geometric mean ± one geometric std over seeds of positive ``[evals, seeds]``."""
  a = np.log(np.asarray(per_seed, float))
  mean, std = a.mean(1), a.std(1)
  ax.plot(x, np.exp(mean), style, color=color, label=label)
  ax.fill_between(x, np.exp(mean - std), np.exp(mean + std), color=color, alpha=0.15, lw=0)


# The sharpness figure's panels: y label -> a curvature.jsonl row's [seeds] values.
_CURVATURE_PANELS = {"λ_max(P⁻¹H), Adam's P": lambda row: row["precond_sharpness"],
                     "λ_max(H)": lambda row: np.asarray(row["top_eigs"])[:, 0]}


def thesis_figures(runs: dict, paths: dict) -> None:
  """The thesis section's figures from ``{pe: thesis run}`` (``studies.arxiv_2505_13027.claims``):

  * ``paths["ratio"]``: coupling ratio over training per PE and layer (contraction
    ratio for multiplicative PEs, widening ratio for additive ones; geometric
    mean and band over seeds; 1 = no effect);
  * ``paths["sharpness"]``: Adam-preconditioned sharpness and the top Hessian
    eigenvalue over training;
  * ``paths["scatter"]``: examples to 90 % of final test accuracy against the
    early coupling ratio, one point per seed;
  * ``paths["curves"]``: test accuracy over training.
  """
  pes = list(runs)
  layers = rules.ratio_over_training(runs[pes[0]]).shape[-1]
  fig, axes = plt.subplots(1, layers, figsize=(4.2 * layers, 3.4), dpi=110, squeeze=False)
  for i, pe in enumerate(pes):
    r = runs[pe]
    ratio = rules.ratio_over_training(r)                        # [evals, seeds, layers]
    ex = [row["examples_seen"] for row in r["metrics"]][:ratio.shape[0]]
    for layer in range(layers):
      _log_band(axes[0, layer], np.asarray(ex) / 1e3, ratio[:, :, layer],
                f"{pe} ({r['coupling'][:4]}.)", _color(pe, i))
  for layer, ax in enumerate(axes[0]):
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("examples seen per seed (thousands)")
    ax.set_ylabel("spread(S(L)) / spread without the coupling")
    ax.set_title(f"layer {layer}: head median", fontsize=9)
    ax.grid(alpha=0.3)
  axes[0, 0].legend(fontsize=7)
  plotting.save_figure(fig, paths["ratio"])

  fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
  for i, pe in enumerate(pes):
    r = runs[pe]
    if not r["curvature"]:
      continue
    ex = np.asarray([row["step"] for row in r["curvature"]], float)
    ex = ex * r["config"]["run"]["train"]["batch_size"] / 1e3
    for ax, per_seed in zip(axes, _CURVATURE_PANELS.values()):
      _log_band(ax, ex, [per_seed(row) for row in r["curvature"]], pe, _color(pe, i))
  for ax, label in zip(axes, _CURVATURE_PANELS):
    ax.set_ylabel(label)
  for ax in axes:
    ax.set_yscale("log")
    ax.set_xlabel("examples seen per seed (thousands)")
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=7)
  fig.suptitle("loss curvature on 64 fixed training examples (geometric mean ± std over seeds)",
               fontsize=9)
  plotting.save_figure(fig, paths["sharpness"])

  fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
  for i, pe in enumerate(pes):
    r = runs[pe]
    mark = "o" if rules.thesis_converged(r) else "x"
    ax.scatter(rules.early_ratio(r), rules.examples_to_threshold(r) / 1e3, marker=mark,
               color=_color(pe, i),
               label=pe + ("" if rules.thesis_converged(r) else " (not converged)"))
  ax.set_xscale("log")
  ax.axvline(1.0, color="k", lw=0.8)
  ax.set_xlabel("coupling ratio at the first evaluation (layer geometric mean)")
  ax.set_ylabel("examples to 90 % of final test acc (k)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  plotting.save_figure(fig, paths["scatter"])

  fig, ax = plt.subplots(figsize=(5.5, 3.5), dpi=110)
  for i, pe in enumerate(pes):
    r = runs[pe]
    ex = np.asarray([row["examples_seen"] for row in r["metrics"]]) / 1e3
    plotting.seed_band(ax, ex, [row["test_accuracy"] for row in r["metrics"]], pe, _color(pe, i))
  ax.set_xlabel("examples seen per seed (thousands)")
  ax.set_ylabel("test accuracy (%)")
  ax.set_ylim(0, 100)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="lower right")
  plotting.save_figure(fig, paths["curves"])
