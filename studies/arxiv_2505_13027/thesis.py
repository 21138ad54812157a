"""The thesis claims (e), (f), (f2) as pure decision rules (study.md).

A *thesis run* is a dict read from one run's committed files:
``summary`` (summary.json), ``metrics`` (metrics.jsonl rows), ``steps``
(steps.jsonl rows), ``spectra`` (spectra.jsonl rows), ``curvature``
(curvature.jsonl rows), ``config`` (config.json) and ``coupling``
("multiplicative" or "additive", the PE's declared coupling). Every function
here takes such dicts and returns numbers and verdict strings; nothing reads
files or renders text, so each rule is unit-tested on hand-made runs.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pe_spectral import stats

__all__ = ["PAIRS", "CONVERGED_FRAC", "converged", "coupling_ratio", "ratio_over_training",
           "early_ratio", "examples_to_threshold", "peak_sharpness", "spike_counts",
           "claim_e", "claim_f_pair", "claim_f", "claim_f2", "G_MULTIPLICATIVE", "G_ADDITIVE",
           "claim_g", "budget", "judged_runs", "load", "task_of", "registered_spike_floor",
           "peak_sharpness_at", "LAST_RUNG_EPOCHS"]

# (kernel, multiplicative member, additive member)
PAIRS = (("rotary", "rope", "rope_additive"), ("decay", "alibi_multiplicative", "alibi"))
# the study's (claims.CONVERGED_FRAC; claims.enough_plateaued applies it)
CONVERGED_FRAC = 2.0 / 3.0
THRESHOLD_FRAC = 0.9
# The last budget of the Task 1 ladder (study.md, seventh amendment): a
# pair with a member that did not converge at this many epochs or more is not
# testable at this project's scale.
LAST_RUNG_EPOCHS = 128


def converged(run: dict) -> bool:
  """At least 2/3 of the seeds plateaued: the study's one rule
  (``claims.enough_plateaued``) on a thesis run's summary."""
  from studies.arxiv_2505_13027.claims import enough_plateaued
  return enough_plateaued(run["summary"]["plateau"]["per_seed"])


def coupling_ratio(row: dict, coupling: str) -> np.ndarray:
  """``[seeds, layers]`` head-median coupling ratio of one spectra row: the
  contraction ratio for a multiplicative PE, the widening ratio for an
  additive one."""
  key = {"multiplicative": "contraction_ratio", "additive": "widening_ratio"}[coupling]
  return np.median(np.asarray(row[key], np.float64), axis=-1)


def ratio_over_training(run: dict) -> np.ndarray:
  """``[evals, seeds, layers]`` coupling ratios at every evaluation."""
  return np.stack([coupling_ratio(r, run["coupling"]) for r in run["spectra"]])


def early_ratio(run: dict) -> np.ndarray:
  """``[seeds]``: the first evaluation's ratio, geometric mean over layers."""
  return np.exp(np.log(ratio_over_training(run)[0]).mean(-1))


def examples_to_threshold(run: dict) -> np.ndarray:
  return stats.examples_to_threshold(run["metrics"], frac=THRESHOLD_FRAC)


def _sharpness(run: dict) -> np.ndarray:
  """``[evals, seeds]`` Adam-preconditioned sharpness, in evaluation order."""
  rows = sorted(run["curvature"], key=lambda r: r["step"])
  return np.asarray([r["precond_sharpness"] for r in rows], np.float64)


def peak_sharpness(run: dict, first_frac: float = 1.0) -> np.ndarray:
  """``[seeds]``: the largest Adam-preconditioned sharpness over evaluations
  (the registered measure), or over the first ``first_frac`` of them (a
  sensitivity figure: near zero loss Adam's second moments shrink with the
  gradients and λ_max(P⁻¹H) climbs at the end of training, which says more
  about the preconditioner than about stability)."""
  s = _sharpness(run)
  if not 0 < first_frac <= 1:
    raise ValueError(f"first_frac must be in (0, 1], got {first_frac}")
  return np.max(s[:max(1, int(round(first_frac * len(s))))], axis=0)


def peak_sharpness_at(run: dict) -> np.ndarray:
  """``[seeds]``: where the peak falls, as a fraction of training (the
  peak's evaluation index + 1 over the number of evaluations)."""
  s = _sharpness(run)
  return (np.argmax(s, axis=0) + 1) / len(s)


def per_step_losses(run: dict) -> np.ndarray:
  """``[seeds, steps]`` batch losses, in step order."""
  rows = sorted(run["steps"], key=lambda r: r["first_step"])
  return np.concatenate([np.asarray(r["loss"], np.float64) for r in rows], axis=1)


# A spike's absolute floor: spikes that also exceed this batch loss. For runs
# under 64 epochs it is a sensitivity figure beside the pre-registered count;
# the third amendment (study.md) puts it in force for pairs judged at
# SPIKE_FLOOR_FROM_EPOCHS epochs or more, registered before any such run; the
# fourth amendment puts it in force for the Task 2 configuration
# (SPIKE_FLOOR_TASKS), also before any of its runs.
SPIKE_FLOOR_SENSITIVITY = 0.1
SPIKE_FLOOR_FROM_EPOCHS = 64
SPIKE_FLOOR_TASKS = ("count",)


def task_of(run: dict) -> str:
  """The task a run trained on (``distance`` or ``count``), from its config."""
  return run["config"]["run"]["task"]["name"]


def registered_spike_floor(*runs: dict) -> float:
  """The floor the pre-registered spike rule uses for a pair of runs: 0.1
  when every run trained ``SPIKE_FLOOR_FROM_EPOCHS`` epochs or more, or every
  run is of a task in ``SPIKE_FLOOR_TASKS``; else 0."""
  long = all(budget(r)[0] >= SPIKE_FLOOR_FROM_EPOCHS for r in runs)
  task = all(task_of(r) in SPIKE_FLOOR_TASKS for r in runs)
  return SPIKE_FLOOR_SENSITIVITY if (long or task) else 0.0


def spike_counts(run: dict, floor: float = 0.0) -> np.ndarray:
  """``[seeds]`` loss spikes after warm-up (:func:`stats.loss_spikes`; ``floor``
  0 is the pre-registered rule)."""
  train = run["config"]["run"]["train"]
  warmup = int(train["warmup_frac"] * run["config"]["total_steps"])
  return np.asarray([len(stats.loss_spikes(x, skip=warmup, floor=floor))
                     for x in per_step_losses(run)])


def _ci_side(lo: float, hi: float) -> int:
  return 1 if lo > 0 else (-1 if hi < 0 else 0)


def claim_e(runs: dict) -> dict:
  """(e): per PE and layer, the bootstrap CI over seeds of the mean log ratio
  (geometric mean over evaluations) below 0 for multiplicative PEs, above 0
  for additive ones. ``runs``: ``{pe: run}``."""
  rows, sides = [], []
  for pe, run in runs.items():
    logr = np.log(ratio_over_training(run)).mean(0)          # [seeds, layers]
    want = -1 if run["coupling"] == "multiplicative" else 1
    for layer in range(logr.shape[1]):
      m, lo, hi = stats.bootstrap_mean_ci(logr[:, layer])
      side = _ci_side(lo, hi)
      sides.append(side * want)
      rows.append({"pe": pe, "layer": layer, "coupling": run["coupling"],
                   "ratio": float(np.exp(m)), "lo": float(np.exp(lo)),
                   "hi": float(np.exp(hi)), "holds": side == want})
  if not rows:
    verdict = "not run"
  elif any(s < 0 for s in sides):
    verdict = "refuted"
  elif all(s > 0 for s in sides) and len(runs) == 2 * len(PAIRS):
    verdict = "reproduced"
  else:
    verdict = "inconclusive"
  return {"rows": rows, "verdict": verdict}


def claim_f_pair(mult: dict, add: dict) -> dict:
  """(f) for one pair, paired by seed: E_A - E_M (examples to threshold),
  peak sharpness A - M, spikes A - M (with :func:`registered_spike_floor`)."""
  seeds_m, seeds_a = mult["summary"]["seeds"], add["summary"]["seeds"]
  p = lambda f: stats.paired(f(add), f(mult), seeds_a=seeds_a, seeds_b=seeds_m)
  floor = registered_spike_floor(mult, add)
  out = {"examples": p(examples_to_threshold), "sharpness": p(peak_sharpness),
         "spikes": p(lambda r: spike_counts(r, floor)), "spike_floor": floor,
         "converged": {"mult": converged(mult), "add": converged(add)}}
  side = {k: _ci_side(out[k]["lo"], out[k]["hi"]) for k in ("examples", "sharpness",
                                                           "spikes")}
  if not all(out["converged"].values()):
    v = "inconclusive (not converged)"
  elif side["examples"] < 0 or (side["sharpness"] < 0 and side["spikes"] < 0):
    v = "refuted"
  elif side["examples"] > 0 and (side["sharpness"] > 0 or side["spikes"] > 0):
    v = "reproduced"
  else:
    v = "inconclusive"
  out["verdict"] = v
  return out


def _last_rung_failures(pe_runs) -> list[str]:
  """``rope_additive did not converge at 128 epochs: 2/5 seeds plateaued`` for
  each run at :data:`LAST_RUNG_EPOCHS` or more that did not converge."""
  out = []
  for pe, r in pe_runs:
    epochs = budget(r)[0]
    if epochs >= LAST_RUNG_EPOCHS and not converged(r):
      per = r["summary"]["plateau"]["per_seed"]
      out.append(f"{pe} did not converge at {epochs} epochs: "
                 f"{sum(per)}/{len(per)} seeds plateaued")
  return out


def claim_f(runs: dict, other_budgets: Sequence[dict] = ()) -> dict:
  """(f) per pair and overall on the judged ``runs``. ``other_budgets``: the
  pair members' runs at other budgets (``judged_runs``' superseded ones), read
  only for the last rung (study.md, seventh amendment): a pair that would
  be *inconclusive (not converged)* is *not testable at this scale* when a
  member did not converge at :data:`LAST_RUNG_EPOCHS` epochs or more."""
  from studies.arxiv_2505_13027.claims import NOT_TESTABLE
  pairs = {}
  for kernel, m, a in PAIRS:
    if m in runs and a in runs:
      p = claim_f_pair(runs[m], runs[a])
      if p["verdict"] == "inconclusive (not converged)":
        seen = [(pe, runs[pe]) for pe in (m, a)]
        seen += [(pe, b[pe]) for b in other_budgets for pe in (m, a) if pe in b]
        failed = _last_rung_failures(seen)
        if failed:
          p["verdict"] = f"{NOT_TESTABLE} ({'; '.join(failed)})"
      pairs[kernel] = p
  vs = [p["verdict"] for p in pairs.values()]
  if not vs:
    verdict = "not run"
  elif "refuted" in vs:
    verdict = "refuted"
  elif len(vs) == len(PAIRS) and all(v == "reproduced" for v in vs):
    verdict = "reproduced"
  elif len(vs) == len(PAIRS) and all(v.startswith(NOT_TESTABLE) for v in vs):
    verdict = NOT_TESTABLE
  else:
    verdict = "inconclusive (" + "; ".join(f"{k}: {p['verdict']}"
                                          for k, p in pairs.items()) + ")"
  return {"pairs": pairs, "verdict": verdict}


def claim_f2(runs: dict) -> dict:
  """(f2): Spearman(early coupling ratio, examples to threshold) over every
  seed of every converged run, with a bootstrap CI."""
  used = {pe: r for pe, r in runs.items() if converged(r)}
  if len(used) < 2:
    return {"pes": sorted(used), "verdict": "not testable (fewer than two converged runs)",
            "points": []}
  x = np.concatenate([early_ratio(r) for r in used.values()])
  y = np.concatenate([examples_to_threshold(r) for r in used.values()])
  rho, lo, hi = stats.bootstrap_spearman_ci(x, y)
  side = _ci_side(lo, hi)
  verdict = {1: "reproduced", -1: "refuted", 0: "inconclusive"}[side]
  return {"pes": sorted(used), "rho": rho, "lo": lo, "hi": hi, "n": len(x),
          "verdict": verdict}


# (g): the deposit in multiplicative vs additive encodings (deposit preset):
# the eight PEs registered in study.md; which side each is on is the
# registry's declared coupling (checked in tests/test_thesis.py).
G_PES = ("rope", "xpos", "p_rope", "alibi_multiplicative",
         "alibi", "rope_additive", "relative", "kerple_log")


def _by_coupling(coupling: str) -> tuple:
  from pe_spectral import encodings
  return tuple(pe for pe in G_PES if encodings.get(pe).coupling == coupling)


G_MULTIPLICATIVE = _by_coupling("multiplicative")
G_ADDITIVE = _by_coupling("additive")


def claim_g(ablations: dict, *, converged: Optional[dict] = None,
            resamples: int = 10_000, seed: int = 0) -> dict:
  """(g): the deposit rule of (c) per seed, pooled over the multiplicative PEs
  against the additive ones, with a bootstrap CI of the difference of pooled
  fractions (seeds resampled within each PE).

  Args:
    ablations: ``{pe: ablation.json dict}`` of the ``deposit`` preset's
      single-head knock-outs; PEs outside the two groups are ignored.
    converged: ``{pe: bool}`` (the study's rule); a run that did not converge
      makes the verdict "inconclusive (not converged)", numbers still given.
  Returns:
    ``{"fractions": {pe: float}, "unconverged": [pe], "multiplicative",
    "additive" (pooled fractions), "diff", "lo", "hi", "verdict"}``. With PEs
    missing: ``{"fractions", "unconverged", "missing", "verdict"}``, the
    verdict "not run" -- unless a present run did not converge, which fixes
    the label whatever the missing runs show (study.md, ninth amendment).
  """
  from studies.arxiv_2505_13027.claims import deposit_rule
  hits = {pe: np.asarray(deposit_rule(a)["per_seed"], bool) for pe, a in ablations.items()
          if pe in G_MULTIPLICATIVE + G_ADDITIVE}
  unconverged = [pe for pe in G_MULTIPLICATIVE + G_ADDITIVE
                 if pe in hits and converged is not None and not converged.get(pe, False)]
  out = {"fractions": {pe: float(h.mean()) for pe, h in hits.items()},
         "unconverged": unconverged}
  not_converged = f"inconclusive (not converged: {', '.join(unconverged)})"
  missing = [pe for pe in G_MULTIPLICATIVE + G_ADDITIVE if pe not in hits]
  if missing:
    return {**out, "missing": missing,
            "verdict": not_converged if unconverged else "not run"}
  rng = np.random.default_rng(seed)
  frac = lambda group: float(np.concatenate([hits[pe] for pe in group]).mean())

  def boot(group):  # [resamples] pooled fractions, seeds resampled within each PE
    draws = [h[rng.integers(0, len(h), (resamples, len(h)))] for h in
             (hits[pe] for pe in group)]
    return np.concatenate(draws, axis=1).mean(1)

  mult, add = frac(G_MULTIPLICATIVE), frac(G_ADDITIVE)
  lo, hi = np.percentile(boot(G_MULTIPLICATIVE) - boot(G_ADDITIVE), [2.5, 97.5])
  verdict = {1: "reproduced", -1: "refuted", 0: "inconclusive"}[_ci_side(lo, hi)]
  if unconverged:
    verdict = not_converged
  return {**out, "multiplicative": mult, "additive": add, "diff": mult - add,
          "lo": float(lo), "hi": float(hi), "verdict": verdict}


def budget(run: dict) -> tuple:
  """``(epochs, seeds)`` a run trained with."""
  return (int(run["config"]["run"]["train"]["epochs"]), len(run["summary"]["seeds"]))


def judged_runs(budgets: Sequence[dict]) -> tuple[dict, list[dict]]:
  """Picks the runs that judge the claims (study.md, second amendment).

  Args:
    budgets: one ``{pe: thesis run}`` per committed budget directory.

  Returns:
    ``(judged, superseded)``: ``judged`` maps each PE to one run. A pair is
    judged at the longest budget (most epochs, then most seeds; the later
    directory on a tie) at which *both* its members exist; a PE whose partner
    exists nowhere is taken at its own longest budget. ``superseded`` lists the
    other runs -- shorter budgets, or a longer run still waiting for its
    partner -- each a ``{pe: run}`` per directory, in input order, empties
    dropped.
  """
  def best(indices, pe):
    return max(indices, key=lambda i: (budget(budgets[i][pe]), i))
  chosen: dict = {}  # pe -> index of the directory
  pair_pes = set()
  for _, m, a in PAIRS:
    pair_pes |= {m, a}
    both = [i for i, b in enumerate(budgets) if m in b and a in b]
    if both:
      # A pair's budget: the smaller of its members' (they match by design).
      i = max(both, key=lambda i: (min(budget(budgets[i][m]), budget(budgets[i][a])), i))
      chosen[m] = chosen[a] = i
    else:
      for pe in (m, a):
        have = [i for i, b in enumerate(budgets) if pe in b]
        if have:
          chosen[pe] = best(have, pe)
  for pe in sorted({pe for b in budgets for pe in b} - pair_pes):
    chosen[pe] = best([i for i, b in enumerate(budgets) if pe in b], pe)
  order = [pe for _, m, a in PAIRS for pe in (m, a)]
  order += sorted(set(chosen) - set(order))
  judged = {pe: budgets[chosen[pe]][pe] for pe in order if pe in chosen}
  superseded = [{pe: r for pe, r in b.items() if chosen.get(pe) != i}
                for i, b in enumerate(budgets)]
  return judged, [b for b in superseded if b]


def load(workdir: str, coupling: Optional[str] = None) -> dict:
  """A thesis run from a workdir's files (``coupling``: default the PE's)."""
  import json
  import os

  from pe_spectral import encodings
  read = lambda name: json.load(open(os.path.join(workdir, name)))
  def jsonl(name):
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
      return []
    with open(path) as f:
      return [json.loads(line) for line in f if line.strip()]
  summary = read("summary.json")
  return {"workdir": workdir, "summary": summary, "config": read("config.json"),
          "metrics": jsonl("metrics.jsonl"),
          "steps": jsonl("steps.jsonl"), "spectra": jsonl("spectra.jsonl"),
          "curvature": jsonl("curvature.jsonl"),
          "coupling": coupling or encodings.get(summary["pe"]).coupling}
