r"""Collects every run under ``--runs`` into ``RESULTS.md`` plus figures.

  python -m studies.arxiv_2505_13027.report                      # from the committed results/runs
  python -m studies.arxiv_2505_13027.report --runs=runs --out=/tmp/R.md   # from local workdirs

Reads ``summary.json``, ``metrics.jsonl`` and ``ablation*.json`` of each run
directory ``<runs>/<task>/<name>/`` (the small files ``studies.arxiv_2505_13027.plan``
commits, so the report rebuilds from git alone). RESULTS.md opens with the
verdict table of the pre-registered claims (study.md), then per task:
accuracy with bootstrap CIs, chance and ceiling, plateau status, examples
seen against the paper's budget, learning curves from the committed
metrics, paired comparisons on shared seeds; then the deposit analysis with
per-seed heatmaps and the clean vs paper-style ablation side by side; then
length generalisation from ``--lengths`` (``<run>/lengths*.json`` of
``experiments.lengths``, committed by ``launch/lengths_cpu.sh``); the
faithful Task 2 pilots of ``--pilots`` (``<pilot>/``), which label the
faithful Task 2 rows that have no runs (study.md, sixth amendment).
Hand-written notes after the marker line are kept. Figures go to
``--figdir``. :func:`compute` turns the loaded runs into a :class:`Report`
(ceilings, every rule's Verdict); :func:`render` writes text and figures from
that alone; only :func:`main` reads flags.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Optional

import numpy as np
from absl import app, flags, logging

from experiments import cli
from pe_spectral.analysis import ceilings, plotting, stats
from pe_spectral.analysis.ablation import scores_of_drops
from pe_spectral.data import tasks
from pe_spectral.training import config as configs
from studies.arxiv_2505_13027 import RESULTS, ROOT
from studies.arxiv_2505_13027 import presets as _presets  # noqa: F401 (registers them)

FLAGS = flags.FLAGS
flags.DEFINE_string("runs", os.path.join(RESULTS, "runs"),
                    "Directory holding <task>/<run>/ run directories.")
flags.DEFINE_string("out", os.path.join(ROOT, "RESULTS.md"), "Markdown file to write.")
flags.DEFINE_string("figdir", os.path.join(RESULTS, "figures"),
                    "Directory for the report's figures.")
flags.DEFINE_string("pilots", os.path.join(RESULTS, "pilots"),
                    "Directory of committed <pilot>/ run directories (2-seed sizing runs, not "
                    "evidence); the faithful Task 2 ones label the faithful Task 2 rows that "
                    "have no runs (study.md, sixth amendment).")
flags.DEFINE_integer("ceiling_examples", 5000, "Examples for the Bayes ceiling.")
flags.DEFINE_string("lengths", os.path.join(RESULTS, "lengths"),
                    "Directory of <run>/lengths*.json (experiments.lengths) to report.")
flags.DEFINE_list("thesis", [os.path.join(RESULTS, "thesis"),
                              os.path.join(RESULTS, "thesis-32ep"),
                              os.path.join(RESULTS, "thesis-64ep"),
                              os.path.join(RESULTS, "thesis-128ep")],
                  "Directories of the coupling study's <pe>/ runs, one per budget "
                  "(launch/thesis_cpu.sh [--long|--longer|--last_rung]); each pair is judged "
                  "at its longest budget (study.md).")
flags.DEFINE_list("thesis_count", [os.path.join(RESULTS, "thesis-count")],
                  "Directories of the coupling study's Task 2 runs (launch/thesis_cpu.sh "
                  "--count; study.md, fourth amendment), judged on their own.")
flags.DEFINE_string("grid", os.path.join(RESULTS, "grid-count"),
                    "(h)'s content-dependent runs (the tenth amendment); their static twins "
                    "are read from the first --thesis_count directory.")
flags.DEFINE_string("grid_distance", os.path.join(RESULTS, "grid-distance"),
                    "(h)'s descriptive Task 1 runs (launch/thesis_cpu.sh --grid_distance); "
                    "their static twins are read from the first --thesis directory.")

from pe_spectral.training.workdir import load_runs  # noqa: E402
from studies.arxiv_2505_13027 import claims as rules  # noqa: E402
from studies.arxiv_2505_13027 import grid  # noqa: E402
from studies.arxiv_2505_13027 import plan as study  # noqa: E402
from studies.arxiv_2505_13027.claims import (  # noqa: E402
  CONVERGED_FRAC,
  DEPOSIT_PRESET,
  DEPOSIT_RATIO,
  LONG_PRESET,
  NOT_RUN,
  PAPER_EXAMPLES,
  PAPER_MLA_FACTOR,
  REFUTATION,
  STUDY_PRESET,
  Outcome,
  _frac_txt,
  cannot_change,
  claim_g_of,
  claims,
  compare,
  config_variant,
  converged,
  deposit_rule,
  faithful_task2_pilots,
  pilot_txt,
  plateau_of,
  run_spec,
  variant_label,
)
from studies.arxiv_2505_13027.claims import budget_override as _budget  # noqa: E402
from studies.arxiv_2505_13027.claims import encoding_of as _encoding  # noqa: E402
from studies.arxiv_2505_13027.claims import mode_of as _mode  # noqa: E402
from studies.arxiv_2505_13027.claims import paper_number as _paper  # noqa: E402
from studies.arxiv_2505_13027.claims import preset_label as _preset  # noqa: E402
from studies.arxiv_2505_13027.claims import run_label as _label  # noqa: E402
from studies.arxiv_2505_13027.report_lengths import lengths_section, load_lengths  # noqa: E402
from studies.arxiv_2505_13027.report_thesis import (  # noqa: E402
  load_thesis_budgets,
  thesis_budget,
  thesis_section,
  thesis_task_label,
)


def _plateau_txt(r) -> str:
  per = plateau_of(r).get("per_seed")
  return "?" if not per else f"{sum(per)}/{len(per)}"



def _cmp_txt(p) -> str:
  return (f"{p['mean']:+.1f} [{p['lo']:+.1f}, {p['hi']:+.1f}] "
          f"({p['wins']}/{p['n']} seeds, p = {p['p']:.3f})")



def spectra_section(runs) -> list[str]:
  """Trained-model logit spectra (decompose.json): contraction and bias widening."""
  rows = [r for r in runs if r.get("decompose")]
  if not rows:
    return []
  lines = ["## Logit spectra of trained models", "",
           "From `python -m experiments.decompose` (fixed test examples; medians over "
           "examples, then mean over seeds). *Contraction ratio* = spread(S(L)) / "
           "spread(S(L_θ=0)): the same layer's logits with the rotation removed (1 for "
           "non-rotary PEs). For additive biases, spread(S(B)) and spread(S(L − B)) "
           "show how much of the logit spread the bias term carries (Weyl: "
           "spread(S(L)) ≥ spread(S(B)) − spread(S(L − B))).", "",
           "| task | PE | mode | layer | contraction ratio, mean over heads [min, max] | "
           "deposit head vs other heads | spread S(L) | spread S(B) | spread S(L − B) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    d = r["decompose"]
    ratio = np.asarray(d["contraction_ratio_median"]).mean(0)  # [L, H]
    spread = np.asarray(d["spread_median"]).mean(0)
    bias = np.asarray(d.get("bias_spread_median", np.zeros((1,) + ratio.shape))).mean(0)
    nob = np.asarray(d.get("without_bias_spread_median",
                           np.zeros((1,) + ratio.shape))).mean(0)
    dep = "—"
    if "deposit_head_ratio_mean" in d:
      dep = f"{d['deposit_head_ratio_mean']:.3f} vs {d['other_heads_ratio_mean']:.3f}"
    for l in range(ratio.shape[0]):
      lines.append(
          f"| {r['task']} | {_label(r)}{_budget(r)} | "
          f"{'faithful' if r['faithful'] else 'clean'} | {l} | "
          f"{ratio[l].mean():.3f} [{ratio[l].min():.3f}, {ratio[l].max():.3f}] | "
          f"{dep if l == 0 else ''} | {spread[l].mean():.2f} | {bias[l].mean():.2f} | "
          f"{nob[l].mean():.2f} |")
  alibi = [r for r in rows if "alibi_bias_spread_over_asymptotic_median" in r["decompose"]]
  if alibi:
    lines += ["", "ALiBi's bias against its asymptotic spread (docs/spectral.md: spread(S(B)) = "
              "0.5500506·m·n² + O(m), slope m, n = the example's real length): the ratio per "
              "head, median over examples, mean over seeds and layers.", "",
              "| task | mode | ratio per head |", "|---|---|---|"]
    for r in alibi:
      a = np.asarray(r["decompose"]["alibi_bias_spread_over_asymptotic_median"]).mean((0, 1))
      lines.append(f"| {r['task']} | {'faithful' if r['faithful'] else 'clean'} | "
                   f"{' '.join(f'{x:.3f}' for x in a)} |")
  mla = [r for r in rows if "mla_rotary" in r["decompose"].get("term_norm_mean", {})]
  if mla:
    lines += ["", "MLA's two channels (Frobenius norm of each channel's share of L, "
              "mean over seeds, examples and heads): content vs decoupled rotary.", "",
              "| task | mode | layer | ‖content‖ | ‖rotary‖ |", "|---|---|---|---|---|"]
    for r in mla:
      t = r["decompose"]["term_norm_mean"]
      c, rot = np.asarray(t["mla_content"]), np.asarray(t["mla_rotary"])  # [L, H]
      for l in range(c.shape[0]):
        lines.append(f"| {r['task']} | {'faithful' if r['faithful'] else 'clean'} | {l} | "
                     f"{c[l].mean():.2f} | {rot[l].mean():.2f} |")
  return lines + [""]


def ceilings_section(ceil: dict) -> list[str]:
  lines = ["| preset | Bayes ceiling % (expected MAP accuracy) | ambiguous examples % | "
           "permutation-invariant ceiling % |", "|---|---|---|---|"]
  for p, (bayes, amb, perm, n) in ceil.items():
    lines.append(f"| {p} | {bayes:.2f} (on {n} test examples) | {amb:.2f} | {perm:.2f} |")
  return lines


# -- the converged study: identities, pairing, claims -------------------------

# Examples one model sees in the paper's code (PROTOCOL §3): 70,000 training
# sentences x 100 epochs for Task 1, 35,000 x 100 for Task 2; its MLA script
# trains 150 epochs.
def _task_fields(variant) -> dict:
  """The task generator's fields a configuration variant sets."""
  return {k.split(".", 1)[1]: v for k, v in (variant or {}).items() if k.startswith("task.")}


def chance_and_ceiling(task, preset, ceil, variant=None):
  """``(classes, chance %, ceiling % or None, permutation-invariant ceiling % or
  None)`` of a preset's data, with a variant's task fields (Task 1 ceilings from
  ``ceil``, computed on the presets' own data; Task 2: 100 %)."""
  fields = _task_fields(variant)
  t = configs.task_config(preset, task)
  n = (t.replace(**fields) if fields else t).num_labels
  if task == "count":
    return n, 100 / n, 100.0, None
  c = None if fields else ceil.get(preset)
  return n, 100 / n, (c[0] if c else None), (c[2] if c else None)


def _chance_ceiling(task, preset, ceil, variant=None) -> str:
  _, chance, top, _ = chance_and_ceiling(task, preset, ceil, variant)
  return f"{chance:.1f} / " + ("?" if top is None else f"{top:.1f}")


def _data_configs(runs, task) -> list[tuple[str, dict, str]]:
  """``(preset, task variant, label)`` for each distinct dataset the runs of
  ``task`` trained on; presets with the same data share one label
  (``"long, study"``), a variant's fields follow (``"study, seq_len 80"``)."""
  groups: dict = {}
  for r in runs:
    if r["task"] != task:
      continue
    fields = _task_fields(config_variant(r))
    v = {f"task.{k}": val for k, val in fields.items()}
    t = configs.task_config(r["preset"], task)
    key = json.dumps((t.replace(**fields) if fields else t).to_dict(), sort_keys=True)
    groups.setdefault(key, {}).setdefault(r["preset"], v)
  out = []
  for key in sorted(groups, key=lambda k: sorted(groups[k])):
    presets = groups[key]
    first = sorted(presets)[0]
    v = presets[first]
    label = ", ".join(sorted(presets)) + (f", {variant_label(v)}" if v else "")
    out.append((first, v, label))
  return out


def missing_txt(specs, lead: str = "waits for") -> str:
  """The runs a claim's row still waits for, by their study-plan names
  (``python -m studies.arxiv_2505_13027.plan --only=<name>`` runs one) and priority, in
  the plan's order, after ``lead``."""
  found = [(study.entry_for(spec), spec) for spec in specs]
  order = {e.key: i for i, e in enumerate(study.PLAN)}
  parts = [f"`{e.key}` (P{e.priority})"
           for e, _ in sorted((f for f in found if f[0] is not None),
                              key=lambda f: order[f[0].key])]
  parts += [f"{spec.task}/{spec.pe} at {spec.preset} (not in the study plan)"
            for e, spec in found if e is None]
  return (f"{lead} " + ", ".join(parts)) if parts else ""


def waiting_lead(c) -> str:
  """What a row says before the runs it still waits for: that they cannot
  change its verdict (:func:`studies.arxiv_2505_13027.claims.cannot_change`), that they are
  a GPU's (a Task 2 row not testable from pilots, sixth amendment), or that
  the row waits for them."""
  why = cannot_change(c)
  if why == REFUTATION:
    return "not run yet (they cannot change a refutation):"
  if why:
    return f"not run yet (they cannot change this: {why}):"
  if c["verdict"].outcome is Outcome.NOT_TESTABLE:
    return "the plan's runs for a GPU, not run:"
  return "waits for"


def verdict_section(cl, ceil=None) -> list[str]:
  """The verdict table's lines for the claims' rows ``cl`` (``claims.claims``)."""
  lines = ["## Verdicts", "",
           "The claims, their tests and decision rules are in [study.md](study.md), "
           "which also says which details were fixed before the runs and which after. "
           "Paired differences are in accuracy points, "
           "mean [95 % percentile-bootstrap CI] over the seeds both runs share (same "
           "initialisation, batch order and data), with the seeds won and an exact "
           "sign-flip p-value. A comparison counts only if both runs converged "
           f"(≥ {_frac_txt(CONVERGED_FRAC)[2:]} of seeds plateaued); otherwise it is "
           "inconclusive whatever its CI says; at `long`, the plan's largest Task 1 budget, "
           "a claim undecided only for that reason, with every run it needs committed, is "
           "*not testable at this scale*, and so at once is one whose reference run did not "
           "converge there, since none of its comparisons can ever count. The last column "
           "applies the second convergence rule instead (test accuracy within "
           f"{100 * stats.TEST_PLATEAU_TOL:g} points of its final value over the last third; "
           "study.md): a sensitivity result beside the verdict, never replacing it. "
           "A row that waits for runs names them as the study plan does "
           "(and says so when they cannot change its verdict: a refutation, a label "
           "that a run which did not converge has fixed, or a row that no longer judges) "
           "(`python -m studies.arxiv_2505_13027.plan --list`; P = its priority).", "",
           "| claim | mode | preset | chance / ceiling % | paper | ours: paired difference | "
           "verdict | by the test-accuracy rule |", "|---|---|---|---|---|---|---|---|"]
  for c in cl:
    if c["id"] == "c":
      ev = []
      for pe, rule, r in c["deposit"]:
        ev.append(f"{pe}: {sum(rule['per_seed'])}/{len(rule['per_seed'])} seeds"
                  + ("" if converged(r) else " (not converged)"))
      evid = "; ".join(ev) or "—"
    else:
      evid = "<br>".join(f"{name}: {_cmp_txt(p)}"
                         + ("" if p["converged"] else " *(not converged)*")
                         for name, p in c["rows"]) or "—"
    task = "count" if c["id"] in ("b", "d") else "distance"
    wait = missing_txt(c.get("missing", []), waiting_lead(c))
    if wait:
      evid = wait if evid == "—" else f"{evid}<br>{wait}"
    at = c["preset"] + (f", {c['variant']}" if c.get("variant") else "")
    verdict = f"**{c['verdict']}**"
    if c.get("judged") is False:  # its long row judges (study.md, the long budget)
      verdict = f"{c['verdict']} (not judging: the {LONG_PRESET} row judges this claim)"
    lines.append(f"| ({c['id']}) {c['claim']} | {c['mode']} | {at} | "
                 f"{_chance_ceiling(task, c['preset'], ceil or {}, c.get('variant_fields'))} | "
                 f"{c['paper']} | "
                 f"{evid} | {verdict} | {c.get('verdict_test_rule', '—')} |")
  return lines + [""]


def examples_to(r, level: float = 0.9):
  """(median examples seen until test accuracy first reached ``level``, seeds
  that reached it, seeds); the median is None unless more than half did."""
  recs = r.get("records") or []
  if not recs:
    return None, 0, len(r["test_accuracy"])
  acc = np.asarray([x["test_accuracy"] for x in recs], float)  # [evals, seeds]
  seen = np.asarray([x.get("examples_seen", x["step"]) for x in recs], float)
  firsts = [seen[np.argmax(col >= level)] for col in acc.T if (col >= level).any()]
  n = acc.shape[1]
  # a median over all seeds (those that never got there count as infinite):
  # defined when more than half of them got there
  med = float(np.median(firsts + [np.inf] * (n - len(firsts)))) if 2 * len(firsts) > n else None
  return med, len(firsts), n


def study_table(runs, task, ceil=None) -> list[str]:
  """Per run: accuracy (bootstrap CI), per seed, plateau, examples vs the paper;
  reference rows for chance and the ceilings of each preset's data."""
  sel = [r for r in runs if r["task"] == task]
  if not sel:
    return []
  lines = ["| PE | mode | preset | n | test acc % (mean [95 % bootstrap CI]) | per seed | "
           "plateaued | examples to 90 % test acc (median; seeds there) | "
           "examples seen / paper's | paper |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  order = {STUDY_PRESET: 0, LONG_PRESET: 1, DEPOSIT_PRESET: 2}
  for r in sorted(sel, key=lambda r: (order.get(r["preset"], 3), r["preset"], r["faithful"],
                                      -np.mean(r["test_accuracy"]))):
    acc = 100 * np.asarray(r["test_accuracy"])
    m, lo, hi = stats.bootstrap_mean_ci(acc)
    enc = _encoding(r["pe"])
    paper_ex = PAPER_EXAMPLES[task] * (
        PAPER_MLA_FACTOR if enc is not None and enc.latent_attention and r["faithful"] else 1)
    seen = r.get("examples_seen")
    seen_txt = ("?" if seen is None else
                f"{seen / 1e3:.0f} k / {paper_ex / 1e6:.1f} M ({seen / paper_ex:.1%})")
    paper = _paper(r)
    med, k, n = examples_to(r)
    to90 = f"{'—' if med is None else f'{med / 1e3:.0f} k'}; {k}/{n}"
    lines.append(f"| {_label(r)} | {_mode(r)} | {_preset(r)} | {len(acc)} | {m:.1f} "
                 f"[{lo:.1f}, {hi:.1f}] | {' '.join(f'{a:.1f}' for a in acc)} | "
                 f"{_plateau_txt(r)} | {to90} | {seen_txt} | "
                 f"{'—' if paper is None else f'{paper:.2f}'} |")
  for ref, val in reference_rows(runs, task, ceil or {}):
    lines.append(f"| *{ref}* | | | | {val:.1f} | | | | | |")
  return lines


def reference_rows(runs, task, ceil) -> list[tuple[str, float]]:
  """(label, accuracy %) for chance and the ceilings of each dataset the runs used."""
  rows = []
  for preset, variant, names in _data_configs(runs, task):
    _, chance, top, perm = chance_and_ceiling(task, preset, ceil, variant)
    rows.append((f"chance ({names})", chance))
    if task == "count":
      rows.append((f"ceiling ({names})", top))
    elif top is not None:
      rows.append((f"Bayes ceiling ({names})", top))
      rows.append((f"permutation-invariant ceiling ({names})", perm))
  return rows


def chance_line(runs, task, ceilings_by_preset) -> str:
  parts = []
  for preset, variant, names in _data_configs(runs, task):
    n, chance, top, perm = chance_and_ceiling(task, preset, ceilings_by_preset, variant)
    txt = f"{names}: chance {chance:.1f} % ({n} classes)"
    if task == "count":
      txt += ", ceiling 100 % (the label is a function of the sentence)"
    elif top is not None:
      txt += f", Bayes ceiling {top:.1f} %, permutation-invariant ceiling {perm:.1f} %"
    parts.append(txt)
  return "Chance and ceiling — " + "; ".join(parts) + "."


def _group(r) -> tuple:
  """(preset, variant label, faithful): the runs one figure and paired table show."""
  return r["preset"], _variant(r), r["faithful"]


def _variant(r) -> str:
  return variant_label(config_variant(r))


def curves_figure(runs, task, preset, faithful, path, variant="") -> bool:
  sel = [r for r in runs if r["task"] == task and _group(r) == (preset, variant, faithful)
         and r.get("records")]
  if not sel:
    return False
  sel = sorted(sel, key=lambda r: -np.mean(r["test_accuracy"]))
  curves = [{"label": f"{_label(r)} ({_plateau_txt(r)} plateaued)", "records": r["records"]}
            for r in sel]
  plotting.learning_curves(curves, path,
                           f"{task} / {preset}{', ' + variant if variant else ''} / "
                           f"{'faithful' if faithful else 'clean'}",
                           paper_examples=PAPER_EXAMPLES[task])
  return True


def paired_table(runs, task, preset, faithful, variant="") -> list[str]:
  """Every PE against the best run of its group, paired on shared seeds."""
  sel = [r for r in runs if r["task"] == task and _group(r) == (preset, variant, faithful)]
  if len(sel) < 2:
    return []
  best = max(sel, key=lambda r: np.mean(r["test_accuracy"]))
  lines = [f"Paired against the best run here ({_label(best)}), points: mean "
           "[95 % bootstrap CI] (seeds won, sign-flip p).", "",
           "| run | best − run | both converged |", "|---|---|---|"]
  for r in sorted(sel, key=lambda r: -np.mean(r["test_accuracy"])):
    if r is best:
      continue
    p = compare(best, r)
    lines.append(f"| {_label(r)} | {_cmp_txt(p)} | {'yes' if p['converged'] else 'no'} |")
  return lines


def deposit_section(runs, figdir, outdir) -> list[str]:
  sel = [r for r in runs if r.get("ablation") and r["task"] == "distance"]
  if not sel:
    return []
  lines = ["## Head ablation and the deposit pattern", "",
           "Single-head knock-outs (the head's attention output set to 0), every (layer, "
           "head), on the test split (`ablation.json`). Per seed: the largest drop of each "
           "early layer (first half of the layers) and the layer's second-largest, in "
           f"points; a seed shows a deposit when some early layer has top ≥ "
           f"{DEPOSIT_RATIO:g} × max(second, 0) and top > 0. The deposit score of each early "
           "layer (mean over seeds) is shown as first defined → bounded: the first definition "
           "(max − mean drop over the layer's positive damage, scaled) exceeds 1 where a "
           "knock-out raises accuracy; the bounded one clips drops at 0 first and stays in "
           "[0, 1] (`ablation.deposit_scores`; descriptive, the deposit rule does not use "
           "it).", "",
           "| PE | mode | preset | baseline % | seeds with a deposit | per seed: early-layer "
           "top / second drop (points) | deposit score, first → bounded |",
           "|---|---|---|---|---|---|---|"]
  order = {DEPOSIT_PRESET: 0, STUDY_PRESET: 1}
  for r in sorted(sel, key=lambda r: (order.get(r["preset"], 2), r["faithful"], r["pe"])):
    rule = deposit_rule(r["ablation"])
    cells = []
    for i in range(len(rule["per_seed"])):
      cells.append(",".join(f"{t:.1f}/{s_:.1f}" for t, s_ in zip(rule["top"][i], rule["second"][i]))
                   + ("✓" if rule["per_seed"][i] else ""))
    sc = scores_of_drops(r["ablation"]["drop"])  # [seeds, layers]
    scores = "; ".join(f"L{l} {sc['score'][:, l].mean():.2f} → "
                       f"{sc['score_bounded'][:, l].mean():.2f}"
                       for l in range(rule["early_layers"]))
    lines.append(f"| {_label(r)} | {_mode(r)} | {r['preset']} | "
                 f"{100 * np.mean(r['ablation']['baseline']):.1f} | "
                 f"{sum(rule['per_seed'])}/{len(rule['per_seed'])} | {' · '.join(cells)} | "
                 f"{scores} |")
  lines.append("")
  for r in sorted(sel, key=lambda r: (order.get(r["preset"], 2), r["faithful"], r["pe"])):
    enc = _encoding(r["pe"])
    rotary_heads = enc is not None and "rotary" in enc.kinds and not enc.latent_attention
    if r["preset"] != DEPOSIT_PRESET and not rotary_heads:
      continue
    name = f"ablation_seeds_{r['task']}_{r['name']}.png"
    path = os.path.join(figdir, name)
    plotting.ablation_per_seed(r["ablation"]["drop"], r["ablation"]["seeds"], path,
                               f"{_label(r)} ({_mode(r)}, {r['preset']})")
    lines += [f"![{r['name']}]({os.path.relpath(path, outdir)})", ""]
  both = [r for r in sel if "ablation-leak-all" in r.get("ablations", {})]
  if both:
    lines += ["### Clean vs paper-style ablation, like for like", "",
              "Paper-style = the paper's procedure: the whole dataset (train + test) and its "
              "leak (head H−1 of every finished layer stays zeroed). Largest single-head drop "
              "per layer, mean over seeds, in points and relative to the baseline.", "",
              "| PE | mode | preset | ablation | baseline % | largest drop per layer: points "
              "(relative %) |", "|---|---|---|---|---|---|"]
    for r in both:
      for key, label in (("ablation", "clean: test split"),
                         ("ablation-leak-all", "paper-style: all data + leak")):
        a = r["ablations"][key]
        d = 100 * np.asarray(a["drop"])  # [seeds, layers, heads]
        base = 100 * np.asarray(a["baseline"])
        top = d.max(-1)  # [seeds, layers]
        rel = 100 * top / base[:, None]
        cells = [f"L{l}: {top[:, l].mean():.1f} ({rel[:, l].mean():.0f} %)"
                 for l in range(top.shape[1])]
        lines.append(f"| {_label(r)} | {_mode(r)} | {r['preset']} | {label} | "
                     f"{base.mean():.1f} | {'; '.join(cells)} |")
    lines.append("")
  return lines


def _machine(r) -> str:
  """The device a run finished on, with the host CPU where its summary names
  one (``environment``, recorded since 2026-12-03)."""
  kind = r.get("device_kind") or "unknown device"
  cpu = (r.get("environment") or {}).get("cpu") or {}
  if kind == "cpu" and cpu.get("model"):
    isa = {True: ", AVX-512", False: ", no AVX-512"}.get(cpu.get("avx512"), "")
    fm = f" {cpu['family_model']}" if cpu.get("family_model") else ""
    kind += f" ({cpu['model']}{fm}{isa})"
  return kind


def compute_line(runs) -> str:
  by = {}
  for r in runs:
    key = _machine(r)
    by.setdefault(key, [0.0, 0])
    by[key][0] += r.get("wall_seconds", 0.0)
    by[key][1] += 1
  parts = [f"{n} run(s) on {k}: {t / 3600:.2f} h of training wall time" for k, (t, n) in
           sorted(by.items())]
  return "Compute: " + "; ".join(parts) + " (compilation and evaluations included)."


def _ceilings(runs, n_examples) -> dict:
  """{preset: (Bayes %, ambiguous %, permutation-invariant %, n)} for the Task 1
  presets present; presets that generate the same data share one computation."""
  out, by_data = {}, {}
  for p in sorted({r["preset"] for r in runs if r["task"] == "distance"}):
    cfg = configs.task_config(p, "distance")
    key = json.dumps(cfg.to_dict(), sort_keys=True)
    if key not in by_data:
      d = tasks.generate(cfg)
      n = min(n_examples, d.test_ids.shape[0])
      bayes = ceilings.distance_bayes_accuracy(cfg, d.test_ids[:n], d.test_labels[:n],
                                               d.triggers)
      ids = np.concatenate([np.asarray(d.train_ids), np.asarray(d.test_ids)])
      y = np.concatenate([np.asarray(d.train_labels), np.asarray(d.test_labels)])
      perm = ceilings.bag_of_tokens_accuracy(ids, y, d.triggers)
      by_data[key] = (100 * bayes["expected"], 100 * bayes["ambiguous_fraction"],
                      100 * perm, n)
    out[p] = by_data[key]
  return out


def _ci_txt(m, lo, hi, fmt="{:+.1f}") -> str:
  return f"{fmt.format(m)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def _floor_txt(floor: float) -> str:
  return f" (above loss {floor:g})" if floor else ""


def thesis_results(truns: dict, runs=(), *, with_g: bool = True, superseded=()) -> dict:
  """The rules' results on one configuration of the coupling study: ``{"e",
  "f", "f2"[, "g"]}`` (``claims.claim_e``, ``claim_f``, ``claim_f2``,
  ``claim_g_of``), each with its Verdict. (g) has its own runs, the same for
  every configuration; ``superseded``: the configuration's runs at other
  budgets, which (f) reads for its last rung only."""
  out = {"e": rules.claim_e(truns) if truns else {"rows": [], "verdict": NOT_RUN},
         "f": rules.claim_f(truns, superseded) if truns else {"pairs": {}, "verdict": NOT_RUN},
         "f2": rules.claim_f2(truns) if truns else {"verdict": NOT_RUN}}
  if with_g:
    out["g"] = claim_g_of(runs)
  return out


def thesis_claims(truns: dict, runs=(), *, with_g: bool = True,
                  superseded=(), results: Optional[dict] = None) -> list[tuple]:
  """The verdict-table rows ``(id, claim, evidence, verdict)`` of (e), (f),
  (f2)[, (g)] from :func:`thesis_results` (computed here unless given)."""
  res = results or thesis_results(truns, runs, with_g=with_g, superseded=superseded)
  rows = []
  e = res["e"]
  ev = "<br>".join(f"{r['pe']} L{r['layer']}: {r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"
                   for r in e["rows"]) or "—"
  rows.append(("e", "Contraction: multiplicative PEs' logits contracted (ratio < 1), "
               "additive ones widened (> 1), every layer", ev, e["verdict"]))
  f = res["f"]
  fv = []
  for kernel, p in f["pairs"].items():
    ex, sh, sp = p["examples"], p["sharpness"], p["spikes"]
    fv.append(f"{kernel}: examples A − M "
              f"{_ci_txt(ex['mean'] / 1e3, ex['lo'] / 1e3, ex['hi'] / 1e3)} k; "
              f"peak sharpness A − M {_ci_txt(sh['mean'], sh['lo'], sh['hi'], '{:+.0f}')}; "
              f"spikes{_floor_txt(p['spike_floor'])} A − M "
              f"{_ci_txt(sp['mean'], sp['lo'], sp['hi'])} → {p['verdict']}")
  rows.append(("f", "Optimisation: in each pair the multiplicative member reaches 90 % of its "
               "final accuracy with fewer examples, with lower peak preconditioned sharpness "
               "or fewer spikes", "<br>".join(fv) or "—", f["verdict"]))
  f2 = res["f2"]
  f2v = (f"Spearman ρ = {f2['rho']:+.2f} [{f2['lo']:+.2f}, {f2['hi']:+.2f}] over {f2['n']} "
         f"seeds of {', '.join(f2['pes'])}" if "rho" in f2 else
         (f"converged: {', '.join(f2['pes']) or 'none'}" if "pes" in f2 else "—"))
  rows.append(("f2", "Dose-response: early coupling ratio vs examples to threshold, "
               "Spearman > 0", f2v, f2["verdict"]))
  if "g" not in res:
    return rows
  g = res["g"]
  fr = ", ".join(f"{pe} {100 * f:.0f} %" + (" (not converged)" if pe in g["unconverged"] else "")
                 for pe, f in g["fractions"].items())
  gv = (f"pooled multiplicative − additive {100 * g['diff']:+.0f} [{100 * g['lo']:+.0f}, "
        f"{100 * g['hi']:+.0f}] points of seeds; {fr}" if "diff" in g else
        (f"committed: {fr or 'none'}; "
         + missing_txt([run_spec("distance", pe, preset=DEPOSIT_PRESET) for pe in g["missing"]],
                       waiting_lead(g))))
  rows.append(("g", "The deposit is inherent in multiplicative encodings (deposit preset, "
               "4 multiplicative vs 4 additive PEs)", gv, g["verdict"]))
  return rows


def _thesis_rows(truns: dict, runs, ceil, *, task: str = "distance",
                 label: str = "", with_g: bool = True, superseded=(),
                 results: Optional[dict] = None) -> list[str]:
  """Verdict-table lines of the 2x2 design on one configuration."""
  out = []
  for cid, claim, ev, v in thesis_claims(truns, runs, with_g=with_g, superseded=superseded,
                                         results=results):
    at = (f"{thesis_budget(truns)}{', ' + label if label else ''}" if cid != "g"
          else DEPOSIT_PRESET + " (8 seeds)")
    # The cpu preset's Task 1 data are the study's (same TaskConfig), whose
    # ceiling `ceil` holds; Task 2's ceiling is 100 % at any preset.
    t, preset = ("distance", DEPOSIT_PRESET) if cid == "g" else (
        (task, STUDY_PRESET) if task == "distance"
        else (task, next(iter(truns.values()))["summary"]["preset"]))
    paper = ("the paper: contraction stabilises and speeds training" if cid != "g"
             else "ICLR version")
    # last cell: the test-accuracy rule's column, which these rules do not use
    out.append(f"| ({cid}) {claim} | clean | {at} | {_chance_ceiling(t, preset, ceil)} | "
               f"{paper} | {ev} | **{v}** | — |")
  return out


def pilots_section(pilots, figdir, outdir) -> list[str]:
  """The faithful Task 2 pilots' learning curves: what the faithful Task 2
  rows' *not testable at this scale* rests on (study.md, sixth amendment)."""
  ps = faithful_task2_pilots(pilots)
  if not ps:
    return []
  budget = lambda p: variant_label(config_variant(p), sections=("train",))
  curves = [{"label": f"{_label(p)}{', ' + budget(p) if budget(p) else ''} "
                      f"({_plateau_txt(p)} plateaued)",
             "records": p["records"]} for p in ps if p.get("records")]
  figs = []
  for metric, word in (("test_accuracy", "test"), ("train_accuracy", "train")):
    fig = os.path.join(figdir, f"curves_count_pilots_faithful_{word}.png")
    plotting.learning_curves(curves, fig, f"faithful count pilots: {word} accuracy",
                             metric=metric, paper_examples=PAPER_EXAMPLES["count"])
    figs.append(f"![{word} accuracy of the faithful count pilots]"
                f"({os.path.relpath(os.path.abspath(fig), outdir)})")
  return (["## Task 2 — faithful pilots (2 seeds each, not evidence)", "",
           "The sizing runs behind the faithful Task 2 rows' verdict (study.md, sixth "
           "amendment), committed under `results/pilots/`; the plateau rule reads the train "
           "accuracy (second figure):", ""]
          + [f"- {pilot_txt(p)}" for p in ps] + [""] + figs + [""])


@dataclasses.dataclass(frozen=True)
class Report:
  """What RESULTS.md states, computed before any of it is written: the runs it
  reads, the ceilings, and every rule's result with its Verdict (the claims'
  rows, and the coupling study's per configuration). :func:`render` writes
  Markdown and figures from it alone."""
  runs: list
  date: str
  ceilings: dict               # {preset: (Bayes %, ambiguous %, perm.-invariant %, n)}
  claims: list                 # claims.claims' rows (a)-(d)
  thesis: dict                 # {configuration: {"runs", "superseded", "results", ...}}
  lengths: list = ()
  pilots: list = ()
  runs_dir: str = ""


def compute(runs, *, ceiling_examples: int, lengths=(), thesis_runs=None,
            thesis_superseded=(), thesis_count=None, thesis_count_superseded=(),
            pilots=(), runs_dir: str = "", date: Optional[str] = None) -> Report:
  """The report's content from the loaded runs (``workdir.load_runs``, the
  thesis loaders): a pure function of them but for the date."""
  ceil = _ceilings(runs, ceiling_examples) if any(r["task"] == "distance" for r in runs) else {}
  thesis = {}
  if thesis_runs:
    thesis["distance"] = dict(runs=thesis_runs, superseded=tuple(thesis_superseded),
                              task="distance", label="", with_g=True)
  if thesis_count:
    thesis["count"] = dict(runs=thesis_count, superseded=tuple(thesis_count_superseded),
                           task="count", label=thesis_task_label(thesis_count), with_g=False)
  for t in thesis.values():
    t["results"] = thesis_results(t["runs"], runs, with_g=t["with_g"],
                                  superseded=t["superseded"])
  return Report(runs=list(runs), date=date or time.strftime("%Y-%m-%d"), ceilings=ceil,
                claims=claims(runs, pilots), thesis=thesis, lengths=list(lengths),
                pilots=list(pilots), runs_dir=runs_dir)


def render(report: Report, out: str, figdir: str) -> str:
  """RESULTS.md's text for ``report``; draws its figures under ``figdir``
  (paths in the text are relative to ``out``'s folder)."""
  runs, ceil = report.runs, report.ceilings
  os.makedirs(figdir, exist_ok=True)
  outdir = os.path.dirname(os.path.abspath(out)) or "."
  rel = lambda path: os.path.relpath(os.path.abspath(path), outdir)
  src = rel(report.runs_dir) if report.runs_dir else "results/runs"  # as seen from the report
  parts = ["# Results", "",
           "Generated by `python -m studies.arxiv_2505_13027.report` on "
           f"{report.date} from "
           f"{len(runs)} run(s) under `{src}`. Every number below is read from the runs' "
           "committed `summary.json`, `metrics.jsonl` and `ablation*.json`. "
           + compute_line(runs), ""]
  parts += verdict_section(report.claims, ceil)
  rows = []
  for t in report.thesis.values():
    rows += _thesis_rows(t["runs"], runs, ceil, task=t["task"], label=t["label"],
                         with_g=t["with_g"], superseded=t["superseded"], results=t["results"])
  if rows:
    parts = parts[:-1] + rows + [""]
  parts += ["Convergence: " + stats.plateau([{"step": 1, "train_accuracy": [0.0]},
                                             {"step": 2, "train_accuracy": [0.0]}])["criterion"]
            .replace("train_accuracy", "a seed has plateaued when its train accuracy stays")
            + " (`pe_spectral.analysis.stats.plateau`). Presets and budgets: "
            "[docs/presets.md](../../docs/presets.md); the pre-registered tests: "
            "[study.md](study.md).", ""]
  for task, title in (("distance", "Task 1 — trigger distance"),
                      ("count", "Task 2 — trigger count")):
    if not any(r["task"] == task for r in runs):
      continue
    parts += [f"## {title}", "", chance_line(runs, task, ceil), ""]
    parts += study_table(runs, task, ceil) + [""]
    groups = sorted({_group(r) for r in runs if r["task"] == task},
                    key=lambda g: ({STUDY_PRESET: 0, LONG_PRESET: 1,
                                    DEPOSIT_PRESET: 2}.get(g[0], 3), g))
    for preset, variant, faithful in groups:
      slug = "".join(ch for ch in variant.replace(", ", "_").replace(" ", "")
                     if ch.isalnum() or ch in "_.").replace(".", "p")
      fig = os.path.join(figdir, f"curves_{task}_{preset}{'_' + slug if slug else ''}"
                                 f"{'_faithful' if faithful else ''}.png")
      head = (f"### {preset} preset{', ' + variant if variant else ''}, "
              f"{'faithful' if faithful else 'clean'}")
      parts += [head, ""]
      if curves_figure(runs, task, preset, faithful, fig, variant):
        parts += [f"![curves {task} {preset}]({rel(fig)})", ""]
      pt = paired_table(runs, task, preset, faithful, variant)
      if pt:
        parts += pt + [""]
  parts += pilots_section(report.pilots, figdir, outdir)
  parts += deposit_section(runs, figdir, outdir)
  parts += lengths_section(list(report.lengths), figdir, outdir)
  empty = dict(runs={}, superseded=())
  t1, t2 = report.thesis.get("distance", empty), report.thesis.get("count")
  parts += thesis_section(t1["runs"], figdir, outdir, t1["superseded"])
  if t2:
    parts += thesis_section(t2["runs"], figdir, outdir, t2["superseded"], task=t2["label"],
                            slug="count", heading=False)
  parts += spectra_section(runs)
  if ceil:
    parts += ["## Task 1 ceilings", "",
              "Computed on the generated data: exact MAP over the admissible parses "
              "(triggers recur as fillers, so some sentences are ambiguous), and the in-sample "
              "majority accuracy from (length, #A, #B), the most a permutation-invariant model "
              "(NoPE with bidirectional attention) can reach.", ""]
    parts += ceilings_section(ceil) + [""]
  return "\n".join(parts) + "\n"




def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  runs = load_runs(FLAGS.runs)
  if not runs:
    print(f"error: no runs with summary.json under {FLAGS.runs}/<task>/<run>/",
          file=sys.stderr)
    return 2
  thesis, superseded = load_thesis_budgets(FLAGS.thesis)
  count, count_superseded = load_thesis_budgets(FLAGS.thesis_count)
  report = compute(runs, ceiling_examples=FLAGS.ceiling_examples,
                   lengths=load_lengths(FLAGS.lengths), thesis_runs=thesis,
                   thesis_superseded=superseded, thesis_count=count,
                   thesis_count_superseded=count_superseded,
                   pilots=load_runs(FLAGS.pilots, depth=1), runs_dir=FLAGS.runs)
  text = render(report, FLAGS.out, FLAGS.figdir)
  rel = os.path.relpath(os.path.abspath(FLAGS.figdir),
                        os.path.dirname(os.path.abspath(FLAGS.out)))
  sep = "\n"
  # (h) on Task 2 (judged), then on Task 1 (described), each once a new PE's run is committed
  for setting, runs_dir, static_dirs in ((grid.TASK2, FLAGS.grid, FLAGS.thesis_count),
                                         (grid.TASK1, FLAGS.grid_distance, FLAGS.thesis)):
    grid_runs = grid.load_grid(runs_dir, static_dirs[0] if static_dirs else "")
    if any(pe in grid_runs for pe in grid.NEW_PES):
      text += sep + "\n".join(grid.grid_section(grid_runs, setting)
                               + grid.grid_figures(grid_runs, FLAGS.figdir, rel, setting))
      sep = "\n\n"
  if os.path.exists(FLAGS.out):
    with open(FLAGS.out) as f:
      old = f.read()
    marker = "<!-- hand-written notes below are kept by studies.arxiv_2505_13027.report -->"
    if marker in old:
      text += "\n" + old[old.index(marker):]
  with open(FLAGS.out, "w") as f:
    f.write(text)
  print(f"wrote {FLAGS.out} from {len(runs)} runs")
  return 0


if __name__ == "__main__":
  cli.run(main)
