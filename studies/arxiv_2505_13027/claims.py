"""The paper's claims as a library: its numbers, the PEs each claim compares,
the thresholds and the decision rules (study.md).

Pure functions of run records -- dicts as ``pe_spectral.workdir.load_runs``
reads them from committed files (``summary.json`` fields plus ``records``,
``config``, ``ablation``); nothing here reads files or renders text, so every
rule is unit-tested on hand-made records.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from studies.arxiv_2505_13027 import presets  # noqa: F401 -- registers study, deposit, long

__all__ = ["PAPER", "CLAIM_PES", "PAPER_EXAMPLES", "PAPER_MLA_FACTOR", "STUDY_PRESET",
           "DEPOSIT_PRESET", "LONG_PRESET", "CONVERGED_FRAC", "enough_plateaued", "CLOSE_MARGIN",
           "DEPOSIT_RATIO", "DEPOSIT_SEED_FRAC", "deposit_rule", "find", "converged",
           "plateau_of", "plateau_of_test_accuracy", "converged_by_test_accuracy", "compare",
           "combine", "claim_preset", "claim_presets", "claims", "run_label",
           "budget_override", "config_variant", "variant_label", "preset_label",
           "paper_number", "encoding_of", "mode_of", "TASK2_CONFIGS", "run_spec",
           "LARGEST_PRESET", "NOT_TESTABLE", "RIVALS_MISSING", "scale_verdict", "unconverged_txt",
           "pilot_txt", "pilots_verdict", "faithful_task2_pilots", "claim_g_of",
           "cannot_change", "waiting", "REFUTATION"]

# The paper's reported test accuracies (docs/protocol.md): faithful mode,
# paper preset, one seed. The paper's "rope" is our rope_sinusoidal.
PAPER = {
    ("distance", "rope_sinusoidal", None): 92.64,
    ("distance", "mla", None): 88.34,
    ("distance", "partial_rope", 1): 90.0,  # "about 90%"
    ("count", "mla", None): 97.41,
    ("count", "nope", None): 77.69,
    ("count", "rope_sinusoidal", None): 69.43,
}


# The paper's claims are statements about named PEs; this table is the one place
# the report names them (how each PE works is the registry's business).
CLAIM_PES = {
    "reference": {False: "rope", True: "rope_sinusoidal"},  # the paper's 'rope', per mode
    "full_rope": "rope",                # claim a2: full RoPE ...
    "partial_rope": "partial_rope",     # ... against RoPE on one head
    "task2": ("mla", "nope"),           # claim b: MLA > NoPE > the reference
    "driver": ("rope", "rope_sinusoidal", "sinusoidal"),  # claim d: NoPE minus each
    "deposit_absent": ("nope", "alibi"),  # claim c: no deposit in these ...
    "deposit_weaker": "mla",              # ... and a weaker one in this
    # claim a: the reference against every other PE of these (the study plan's Task 1 set)
    "task1": ("rope", "nope", "alibi", "sinusoidal", "learned", "relative",
              "rope_sinusoidal", "mla"),
}


def encoding_of(pe: str):
  """The registry entry of a run's PE (None for a name no longer registered)."""
  from pe_spectral import encodings
  return encodings.REGISTRY.get(pe)


def run_label(r) -> str:
  """The PE's own label of the run (e.g. partial RoPE's k, explicitly set ALiBi slopes)."""
  enc = encoding_of(r["pe"])
  if enc is None:
    return r["pe"]
  from pe_spectral import model as model_lib
  model = model_lib.upgrade_record({"pe": r["pe"],
                                    **r.get("config", {}).get("run", {}).get("model", {})})
  if r.get("rope_heads") is not None:  # the summary's, for a run without its config
    model["pe_options"] = {**(model.get("pe_options") or {}), "heads": r["rope_heads"]}
  return enc.run_label(model)


def budget_override(r) -> str:
  """`` (batch B, N steps)`` when a run overrode its preset's training budget, else ``""``."""
  v = config_variant(r)  # the training fields it set away from the preset, among others
  if not any(f"train.{k}" in v for k in ("batch_size", "epochs", "steps", "learning_rate")):
    return ""
  return f" (batch {r['config']['run']['train']['batch_size']}, {r.get('steps', '?')} steps)"


# Fields that do not make a run another experiment: the PE and mode (its own
# label), the memory and precision options (the same model, computed leaner),
# and the sizes that follow from the task.
_NOT_A_VARIANT = {("model", k) for k in ("pe", "faithful", "pe_options", "attention_block",
                                          "remat", "dtype", "vocab_size", "num_classes")}


def config_variant(r) -> dict:
  """The model, task and training fields a run set away from its preset's
  values (``--config.model.dropout=0`` gives ``{"model.dropout": 0.0}``,
  ``--epochs=40`` ``{"train.epochs": 40}``), read from its ``config.json``;
  ``{}`` for a plan run or a run without its config. The PE's options are its
  label's business (:func:`run_label`); the memory options compute the same
  model."""
  run = r.get("config", {}).get("run")
  from pe_spectral import config as configs
  if not run or r["preset"] not in configs.PRESET_NAMES:
    return {}
  from pe_spectral import model as model_lib
  from pe_spectral import tasks
  default = configs.build(r["preset"], r["task"], r["pe"], faithful=r["faithful"])
  sections = []
  if "model" in run:
    sections.append(("model", default.model.to_dict(),
                     model_lib.recorded_fields({"pe": r["pe"], **run["model"]})))
  if "task" in run:
    sections.append(("task", default.task.to_dict(), tasks.recorded_fields(run["task"])))
  if "train" in run:
    sections.append(("train", default.train.to_dict(), run["train"]))
  out = {}
  for sec, want, got in sections:
    for k in sorted(got):
      if (sec, k) not in _NOT_A_VARIANT and k in want and got[k] != want[k]:
        out[f"{sec}.{k}"] = got[k]
  return out


def variant_label(variant: dict, *, sections=("model", "task", "train")) -> str:
  """``"dropout 0"`` for ``{"model.dropout": 0.0}``; ``""`` for the preset
  itself. Model fields first, then the task's, then training's."""
  fmt = lambda v: f"{v:g}" if isinstance(v, float) else str(v)
  keys = sorted((k for k in variant if k.split(".", 1)[0] in sections),
                key=lambda k: (sections.index(k.split(".", 1)[0]), k))
  return ", ".join(f"{k.split('.', 1)[1]} {fmt(variant[k])}" for k in keys)


def preset_label(r) -> str:
  """The preset, its overridden budget (`` (batch B, N steps)``) and any other
  field set away from it: ``study (batch 128, 4360 steps), dropout 0, seq_len 80``."""
  v = variant_label(config_variant(r), sections=("model", "task"))
  return r["preset"] + budget_override(r) + (f", {v}" if v else "")


def paper_number(r):
  """The paper's number for this run's (task, PE[, k]), if it reports one."""
  key = (r["task"], r["pe"])
  return PAPER.get(key + (r.get("rope_heads"),), PAPER.get(key + (None,)))


PAPER_EXAMPLES = {"distance": 7_000_000, "count": 3_500_000}
PAPER_MLA_FACTOR = 1.5
STUDY_PRESET = "study"
DEPOSIT_PRESET = "deposit"
LONG_PRESET = "long"  # the study with 3.3x the budget, for groups that had not converged
# Task 2 configurations registered beside the study preset's (study.md,
# "Task 2 without dropout"), as (preset, variant): claims (b) and (d) are
# judged on each as well, in clean mode, never replacing the study preset's rows.
TASK2_CONFIGS = (
    (LONG_PRESET, {"model.dropout": 0.0}),  # a GPU's: the paper's 120 tokens, 100 epochs
    (STUDY_PRESET, {"model.dropout": 0.0, "task.seq_len": 80, "task.max_len": 80,
                    "task.count_max": 66, "train.epochs": 40}),  # the 2-core CPU's
)
# A run counts as converged when at least this fraction of its seeds plateaued
# (stats.plateau); comparisons with an unconverged run are inconclusive.
# enough_plateaued is the one place that applies it (thesis.py too).
CONVERGED_FRAC = 2.0 / 3.0
_CONVERGED_NUM, _CONVERGED_DEN = 2, 3  # CONVERGED_FRAC as an exact ratio
# "Partial RoPE on one head comes close to full RoPE": within this many points.
CLOSE_MARGIN = 5.0
# The largest Task 1 budget of the plan (study.md, "Not testable at this
# scale"): a claim judged there that is undecided only because a run did not
# converge cannot be decided at this project's scale, and says so with the runs.
LARGEST_PRESET = LONG_PRESET
NOT_TESTABLE = "not testable at this scale"
# (a) with every comparison made so far won but rivals still to run: a claim of
# several comparisons is reproduced only if all of them are (study.md)
RIVALS_MISSING = "inconclusive (rivals missing)"


def mode_of(r) -> str:
  return "faithful" if r["faithful"] else "clean"


def find(runs, task, pe, *, preset, faithful=False, rope_heads=None, variant=None):
  """The run of (task, pe, preset, mode[, rope_heads]) with the preset's
  settings, or with exactly the fields of ``variant`` (:func:`config_variant`)
  set away from them."""
  for r in runs:
    if (r["task"], r["pe"], r["preset"], r["faithful"]) != (task, pe, preset, faithful):
      continue
    if rope_heads is not None and r.get("rope_heads") != rope_heads:
      continue
    if run_label(r) != run_label({**r, "config": {}}):
      continue  # overridden slopes: not the plan's run
    if config_variant(r) != (variant or {}):
      continue  # another budget or configuration (e.g. the registered dropout-0 Task 2)
    return r
  return None


def run_spec(task, pe, *, preset, faithful=False, rope_heads=None, variant=None) -> dict:
  """A run a claim needs, named by the fields :func:`find` looks it up by (a
  claim's ``"missing"`` entries: the runs its row still waits for)."""
  return {"task": task, "pe": pe, "preset": preset, "faithful": faithful,
          "rope_heads": rope_heads, "variant": dict(variant or {})}


def plateau_of(r) -> dict:
  from pe_spectral import stats
  return stats.plateau(r["records"]) if r.get("records") else r.get("plateau", {})


def enough_plateaued(per_seed) -> bool:
  """The study's convergence rule on per-seed plateau flags: at least 2/3 of
  the seeds (exact integer arithmetic; False without seeds)."""
  per = list(per_seed or [])
  return bool(per) and _CONVERGED_DEN * sum(map(bool, per)) >= _CONVERGED_NUM * len(per)


def converged(r) -> bool:
  return enough_plateaued(plateau_of(r).get("per_seed"))


def plateau_of_test_accuracy(r) -> dict:
  """The second convergence rule's per-seed result (test accuracy within
  ``stats.TEST_PLATEAU_TOL`` over the last third); {} without metrics."""
  from pe_spectral import stats
  if not r.get("records"):
    return {}
  return stats.plateau(r["records"], metric=stats.TEST_PLATEAU_METRIC,
                       tol=stats.TEST_PLATEAU_TOL)


def converged_by_test_accuracy(r) -> bool:
  """The second rule (study.md): >= 2/3 of seeds plateaued in test accuracy."""
  return enough_plateaued(plateau_of_test_accuracy(r).get("per_seed"))


def compare(a, b, *, margin=0.0) -> dict:
  """Paired test of "a beats b by more than margin" on their shared seeds."""
  from pe_spectral import stats
  p = stats.paired(100 * np.asarray(a["test_accuracy"]),
                   100 * np.asarray(b["test_accuracy"]),
                   seeds_a=a["seeds"], seeds_b=b["seeds"])
  v = stats.verdict(p, margin=margin)
  conv = converged(a) and converged(b)
  conv2 = converged_by_test_accuracy(a) and converged_by_test_accuracy(b)
  return {**p, "verdict": v if conv else "inconclusive", "converged": conv,
          "raw_verdict": v, "converged_test": conv2,
          "verdict_test_rule": v if conv2 else "inconclusive"}


def combine(verdicts) -> str:
  if not verdicts:
    return "not run"
  if any(v == "refuted" for v in verdicts):
    return "refuted"
  if all(v == "reproduced" for v in verdicts):
    return "reproduced"
  return "inconclusive"


def unconverged_txt(r, *, test_rule: bool = False) -> str:
  """``partial_rope (k=1) did not converge at long: 1/8 seeds plateaued``."""
  per = (plateau_of_test_accuracy(r) if test_rule else plateau_of(r)).get("per_seed") or []
  return (f"{run_label(r)} did not converge at {r['preset']}: "
          f"{sum(per)}/{len(per)} seeds plateaued")


def scale_verdict(rows, used, *, preset, pending, reference=None,
                  test_rule: bool = False) -> str:
  """A Task 1 claim's verdict from its comparisons ``rows`` (name, :func:`compare`)
  on the runs ``used``: :func:`combine`'s, except that at :data:`LARGEST_PRESET`,
  with no run ``pending``, a claim undecided only because runs did not converge
  is :data:`NOT_TESTABLE`, naming them (study.md, fifth amendment). A
  converged comparison still refutes, and one whose CI is merely wide keeps the
  claim inconclusive. ``reference``, the run every comparison includes: if it
  did not converge there, the label is given at once, pending runs or not,
  since no comparison can ever count (eighth amendment). With runs
  ``pending``, comparisons that all reproduce read :data:`RIVALS_MISSING`: a
  claim of several comparisons is reproduced only if all of them are."""
  vk, ck = ("verdict_test_rule", "converged_test") if test_rule else ("verdict", "converged")
  conv = converged_by_test_accuracy if test_rule else converged
  if preset == LARGEST_PRESET and reference is not None and not conv(reference):
    return f"{NOT_TESTABLE} ({unconverged_txt(reference, test_rule=test_rule)})"
  v = combine([p[vk] for _, p in rows])
  if pending and v == "reproduced":
    # "reproduced if all [comparisons] are": a missing rival is not yet beaten
    return RIVALS_MISSING
  if v != "inconclusive" or preset != LARGEST_PRESET or pending:
    return v
  if any(p[vk] == "inconclusive" and p[ck] for _, p in rows):
    return v  # a converged comparison that decides nothing: not a matter of scale
  bad = [r for r in used if not conv(r)]
  return f"{NOT_TESTABLE} ({'; '.join(unconverged_txt(r, test_rule=test_rule) for r in bad)})"


def _seeds_txt(seeds) -> str:
  seeds = list(seeds)
  contiguous = seeds == list(range(seeds[0], seeds[0] + len(seeds))) if seeds else False
  if contiguous and len(seeds) > 1:
    return f"seeds {seeds[0]}–{seeds[-1]}"
  return "seed" + ("s " if len(seeds) != 1 else " ") + ", ".join(map(str, seeds))


def pilot_txt(r, *, test_rule: bool = False, accuracy: bool = True) -> str:
  """``rope_sinusoidal at study, dropout 0, …, epochs 100, seeds 8–9: 0/2 seeds
  plateaued (test 64.2, 46.9 %)``: a pilot as a verdict names it (without the
  accuracies unless ``accuracy``)."""
  per = (plateau_of_test_accuracy(r) if test_rule else plateau_of(r)).get("per_seed") or []
  v = variant_label(config_variant(r))
  acc = ", ".join(f"{100 * a:.1f}" for a in r.get("test_accuracy", []))
  return (f"{run_label(r)} at {r['preset']}{', ' + v if v else ''}, {_seeds_txt(r['seeds'])}: "
          f"{sum(per)}/{len(per)} seeds plateaued" + (f" (test {acc} %)" if accuracy else ""))


def faithful_task2_pilots(pilots) -> list:
  """The committed faithful Task 2 pilots (task ``count``, faithful mode),
  shortest budget first."""
  return sorted((p for p in pilots if p.get("task") == "count" and p.get("faithful")),
                key=lambda p: p.get("examples_seen", 0))


def pilots_verdict(pilots, *, test_rule: bool = False):
  """The verdict of a faithful Task 2 row none of whose runs is committed
  (study.md, sixth amendment): :data:`NOT_TESTABLE`, naming the pilots,
  when faithful Task 2 pilots exist and none of them converged (by the rule of
  the column: ``test_rule`` for the test-accuracy one); ``None`` otherwise, and
  the row stays "not run"."""
  ps = faithful_task2_pilots(pilots)
  conv = converged_by_test_accuracy if test_rule else converged
  if not ps or any(conv(p) for p in ps):
    return None
  return (f"{NOT_TESTABLE} (no faithful Task 2 configuration converged in the pilots: "
          + "; ".join(pilot_txt(p, test_rule=test_rule, accuracy=False) for p in ps) + ")")


def claim_preset(runs, task, ref_pe, faithful) -> str:
  """``long`` where the claim's reference run exists at the long budget, else ``study``."""
  if find(runs, task, ref_pe, preset=LONG_PRESET, faithful=faithful) is not None:
    return LONG_PRESET
  return STUDY_PRESET


def claim_presets(runs, task, ref_pe, faithful) -> list[tuple[str, bool]]:
  """``(preset, judged)`` rows of a claim: ``study`` always, and ``long``
  beside it once the reference run exists there. The registered rule
  (:func:`claim_preset`) judges at ``long`` then; the ``study`` row stays in
  the table, marked as not judging, so a ``long`` row with fewer PEs never
  hides what the ``study`` row found."""
  judged = claim_preset(runs, task, ref_pe, faithful)
  rows = [(STUDY_PRESET, judged == STUDY_PRESET)]
  if judged == LONG_PRESET:
    rows.append((LONG_PRESET, True))
  return rows


def claims(runs, pilots=()) -> list[dict]:
  """The pre-registered claims (study.md), each with its evidence and
  verdict. A claim's row at a preset that does not judge it (the ``study``
  row once its ``long`` row exists) carries ``"judged": False``. ``pilots``
  (committed 2-seed pilots, not evidence) only label the faithful Task 2 rows
  that have no runs (:func:`pilots_verdict`)."""
  out = []
  T1, T2 = "distance", "count"
  for faithful in (False, True):
    mode = "faithful" if faithful else "clean"
    ref_pe = CLAIM_PES["reference"][faithful]
    for P1, judged in claim_presets(runs, T1, ref_pe, faithful):
      ref = find(runs, T1, ref_pe, preset=P1, faithful=faithful)
      rows, others = [], []
      missing = [run_spec(T1, pe, preset=P1, faithful=faithful) for pe in CLAIM_PES["task1"]
                 if find(runs, T1, pe, preset=P1, faithful=faithful) is None]
      if ref is not None:
        others = [r for r in runs if r["task"] == T1 and r["preset"] == P1
                  and r["faithful"] == faithful and r is not ref
                  and r.get("rope_heads") is None  # partial RoPE is (a2)'s
                  and find(runs, T1, r["pe"], preset=P1, faithful=faithful) is r]
        others = sorted(others, key=lambda o: o["pe"])
        for o in others:
          rows.append((f"{run_label(ref)} − {run_label(o)}", compare(ref, o)))
      used = ([ref] if ref is not None else []) + others
      at = dict(preset=P1, pending=bool(missing), reference=ref)
      out.append({"id": "a", "mode": mode, "preset": P1, "judged": judged, "missing": missing,
                  "claim": "Task 1: " + ("the paper's rope (sinusoid + rotary)" if faithful
                                         else "RoPE") + " "
                           "beats every other PE",
                  "paper": "RoPE 92.64 %, MLA 88.34 % (one seed each)",
                  "rows": rows, "verdict": scale_verdict(rows, used, **at),
                  "verdict_test_rule": scale_verdict(rows, used, **at, test_rule=True)})
    full_pe, part_pe = CLAIM_PES["full_rope"], CLAIM_PES["partial_rope"]
    for P2, judged in claim_presets(runs, T1, full_pe, faithful):
      part = find(runs, T1, part_pe, preset=P2, faithful=faithful, rope_heads=1)
      full = find(runs, T1, full_pe, preset=P2, faithful=faithful)
      rows = []
      missing = [run_spec(T1, pe, preset=P2, faithful=faithful, rope_heads=k)
                 for pe, k, r in ((full_pe, None, full), (part_pe, 1, part)) if r is None]
      if part is not None and full is not None:
        p = compare(full, part, margin=CLOSE_MARGIN)
        # the claim is "full − partial < margin": the mirror of "full beats partial by > margin"
        flip = {"reproduced": "refuted", "refuted": "reproduced"}
        p = {**p, "verdict": flip.get(p["verdict"], p["verdict"]),
             "raw_verdict": flip.get(p["raw_verdict"], p["raw_verdict"]),
             "verdict_test_rule": flip.get(p["verdict_test_rule"], p["verdict_test_rule"])}
        rows.append((f"{full_pe} − {part_pe} (k=1)", p))
      used = [r for r in (full, part) if r is not None]
      at = dict(preset=P2, pending=bool(missing), reference=full)
      out.append({"id": "a2", "mode": mode, "preset": P2, "judged": judged, "missing": missing,
                  "claim": f"Task 1: RoPE on 1 head within {CLOSE_MARGIN:g} points of full RoPE",
                  "paper": "≈ 90 % vs 92.64 %", "rows": rows,
                  "verdict": scale_verdict(rows, used, **at),
                  "verdict_test_rule": scale_verdict(rows, used, **at, test_rule=True)})
    for P3, judged in claim_presets(runs, T2, ref_pe, faithful):
      out += [dict(c, judged=judged)
              for c in _task2_claims(runs, faithful, P3, pilots=pilots if faithful else ())]
    if not faithful:
      for preset, variant in TASK2_CONFIGS:
        out += _task2_claims(runs, faithful, preset, variant)
    dep = {pe: find(runs, T1, pe, preset=DEPOSIT_PRESET, faithful=faithful)
           for pe in (ref_pe, *CLAIM_PES["deposit_absent"], CLAIM_PES["deposit_weaker"])}
    rows = [(pe, deposit_rule(r["ablation"]), r) for pe, r in dep.items()
            if r is not None and r.get("ablation")]
    missing = [run_spec(T1, pe, preset=DEPOSIT_PRESET, faithful=faithful)
               for pe, r in dep.items() if r is None or not r.get("ablation")]
    out.append({"id": "c", "mode": mode, "preset": DEPOSIT_PRESET, "missing": missing,
                "claim": f"Deposit ({DEPOSIT_PRESET} preset): one early-layer head carries "
                         f"the ablation damage in {_frac_txt(DEPOSIT_SEED_FRAC)} of "
                         f"{ref_pe} seeds; "
                         "absent in NoPE and ALiBi, weaker in MLA",
                "paper": "≈ 60 % drop from one layer-1 head of 'rope'",
                "deposit": rows, "verdict": _deposit_verdict(rows, ref_pe),
                "verdict_test_rule": "—"})  # its rule does not use convergence
  return out


def claim_g_of(runs) -> dict:
  """(g) from the committed clean ``deposit``-preset Task 1 runs that have an
  ``ablation`` (:func:`studies.arxiv_2505_13027.thesis.claim_g`, with the study's
  convergence rule), as a claim row: ``"id"`` is ``"g"``."""
  from studies.arxiv_2505_13027 import thesis
  found = {pe: find(runs, "distance", pe, preset=DEPOSIT_PRESET)
           for pe in thesis.G_MULTIPLICATIVE + thesis.G_ADDITIVE}
  found = {pe: r for pe, r in found.items() if r is not None and r.get("ablation")}
  g = thesis.claim_g({pe: r["ablation"] for pe, r in found.items()},
                     converged={pe: converged(r) for pe, r in found.items()})
  return {**g, "id": "g"}


REFUTATION = "a refutation"


def cannot_change(c: dict) -> Optional[str]:
  """Why the runs a claim row (:func:`claims`, :func:`claim_g_of`) still waits
  for cannot change its verdict, or None when they can:

  * "the long row judges this claim": a ``study`` row that no longer judges
    (:func:`claim_presets`: the claim's ``long`` reference exists, so the
    ``long`` row gives the verdict from now on);
  * :data:`REFUTATION`: a converged comparison refuted it;
  * "the reference did not converge": a Task 1 row not testable with runs
    missing, which only an unconverged reference at the largest budget gives
    (study.md, eighth amendment); a Task 2 row not testable from pilots
    (sixth amendment) is not settled: a GPU's runs would judge it;
  * "<pes> did not converge": (g) with a committed run that did not converge
    (ninth amendment).
  """
  v = c["verdict"]
  if c.get("judged") is False:
    return f"the {LONG_PRESET} row judges this claim"
  if v == "refuted":
    return REFUTATION
  if v.startswith(NOT_TESTABLE) and c["id"] in ("a", "a2"):
    return "the reference did not converge"
  if c["id"] == "g" and c.get("unconverged"):
    return f"{', '.join(c['unconverged'])} did not converge"
  return None


def waiting(runs, pilots=()) -> list:
  """``[(spec, reason)]``: every run a verdict-table row waits for
  (:func:`run_spec` fields), once per row, with :func:`cannot_change`'s
  reason (None: that run can still change the row's verdict)."""
  out = []
  for c in claims(runs, pilots):
    out += [(spec, cannot_change(c)) for spec in c.get("missing", [])]
  g = claim_g_of(runs)
  out += [(run_spec("distance", pe, preset=DEPOSIT_PRESET), cannot_change(g))
          for pe in g.get("missing", [])]
  return out


def _task2_claims(runs, faithful: bool, preset: str, variant=None, pilots=()) -> list[dict]:
  """Claims (b) and (d) on the Task 2 runs of one configuration: ``preset``
  with the fields of ``variant`` (:func:`config_variant`) set away from it.
  A row none of whose runs exists takes :func:`pilots_verdict` of ``pilots``
  where that gives one (the caller passes pilots for the faithful rows only)."""
  T2, mode = "count", "faithful" if faithful else "clean"
  ref_pe = CLAIM_PES["reference"][faithful]
  at = dict(preset=preset, faithful=faithful, variant=variant)
  rope2 = find(runs, T2, ref_pe, **at)
  mla_pe, nope_pe = CLAIM_PES["task2"]
  mla2 = find(runs, T2, mla_pe, **at)
  nope2 = find(runs, T2, nope_pe, **at)
  label = variant_label(variant or {})
  common = {"mode": mode, "preset": preset, "variant": label, "variant_fields": variant or {}}
  need = lambda pe, r: [] if r is not None else [run_spec(T2, pe, **at)]
  rows = []
  if mla2 is not None and nope2 is not None:
    rows.append((f"{mla_pe} − {nope_pe}", compare(mla2, nope2)))
  if nope2 is not None and rope2 is not None:
    rows.append((f"{nope_pe} − {ref_pe}", compare(nope2, rope2)))
  out = [{"id": "b", **common, "claim": "Task 2: MLA > NoPE > RoPE",
          "missing": need(mla_pe, mla2) + need(nope_pe, nope2) + need(ref_pe, rope2),
          "paper": "MLA 97.41 %, NoPE 77.69 %, RoPE 69.43 %", "rows": rows,
          "verdict": combine([p["verdict"] for _, p in rows])
          if len(rows) == 2 else "not run",
          "verdict_test_rule": combine([p["verdict_test_rule"] for _, p in rows])
          if len(rows) == 2 else "not run"}]
  rows, missing, needs = [], [], need(nope_pe, nope2)
  drivers = [find(runs, T2, pe, **at) for pe in CLAIM_PES["driver"]]
  for pe, r in zip(CLAIM_PES["driver"], drivers):
    needs += need(pe, r)
    if nope2 is not None and r is not None:
      rows.append((f"{nope_pe} − {pe}", compare(nope2, r)))
    else:
      missing.append(f"{nope_pe} − {pe}")
  out.append({"id": "d", **common, "missing": needs,
              "claim": "Task 2: does the sinusoid or the rotation drive RoPE's gap to NoPE?",
              "paper": "NoPE − 'rope' = 8.3 points", "rows": rows,
              "verdict": _driver_verdict(rows, missing=missing) if rows else "not run",
              "verdict_test_rule": _driver_verdict(rows, "converged_test", missing)
              if rows else "not run"})
  for c, its_runs in zip(out, ([mla2, nope2, rope2], [nope2, *drivers])):
    if all(r is None for r in its_runs):  # none of its runs committed
      for key, test_rule in (("verdict", False), ("verdict_test_rule", True)):
        c[key] = pilots_verdict(pilots, test_rule=test_rule) or c[key]
  return out


def _frac_txt(f) -> str:
  return "≥ 2/3" if abs(f - 2 / 3) < 1e-9 else f"≥ {f:.2f}"


def _driver_verdict(rows, key: str = "converged", missing=()) -> str:
  """Each comparison's own statement; those not run yet (``missing``) are
  named last, so a partial row never reads as complete."""
  parts = []
  for name, p in rows:
    if not p[key]:
      parts.append(f"{name}: not converged")
    elif p["lo"] > 0:
      parts.append(f"{name}: NoPE better")
    elif p["hi"] < 0:
      parts.append(f"{name}: NoPE worse")
    else:
      parts.append(f"{name}: no difference shown")
  parts += [f"{name}: not run" for name in missing]
  if any("not converged" in t for t in parts):
    return "inconclusive (" + "; ".join(parts) + ")"
  return "; ".join(parts)


def _deposit_verdict(rows, ref_pe) -> str:
  d = {pe: rule for pe, rule, _ in rows}
  if ref_pe not in d:
    return "not run"
  main = d[ref_pe]["fraction"] >= DEPOSIT_SEED_FRAC - 1e-9
  if not main:
    return "refuted"
  checks = []
  for pe in CLAIM_PES["deposit_absent"]:
    if pe in d:
      checks.append(d[pe]["fraction"] < DEPOSIT_SEED_FRAC - 1e-9)
  weaker = CLAIM_PES["deposit_weaker"]
  if weaker in d:
    checks.append(d[weaker]["fraction"] < d[ref_pe]["fraction"])
  if len(checks) < 3:
    return "inconclusive (controls missing)" if all(checks) else "refuted"
  return "reproduced" if all(checks) else "refuted"


# Deposit rule (claim c, and per seed in claim g): a head of an early layer
# (first half of the layers) whose drop is >= DEPOSIT_RATIO x the layer's
# second-largest drop, in at least DEPOSIT_SEED_FRAC of the seeds.
DEPOSIT_RATIO = 3.0
DEPOSIT_SEED_FRAC = 2.0 / 3.0


def deposit_rule(ablation: dict) -> dict:
  """Claim (c)'s per-seed test on one ``ablation.json`` (single-head knock-outs).

  ``ablation["drop"]``: ``[seeds, layers, heads]`` accuracy drops (fractions).
  Per seed it holds when, in some early layer, the largest drop is positive
  and at least ``DEPOSIT_RATIO`` times the second-largest (taken as 0 when
  negative). Returns per-seed hits, their fraction and the layer that hit.
  """
  d = 100 * np.asarray(ablation["drop"], float)  # [seeds, layers, heads] points
  if d.ndim != 3 or d.shape[-1] < 2:
    raise ValueError(f"deposit_rule needs drops [seeds, layers, heads >= 2], got {d.shape}")
  early = max(1, d.shape[1] // 2)
  srt = np.sort(d[:, :early], axis=-1)
  top, second = srt[..., -1], srt[..., -2]
  ratio = top / np.maximum(second, 1e-9)
  hit = (top > 0) & (top >= DEPOSIT_RATIO * np.maximum(second, 0.0))  # [seeds, early]
  per_seed = hit.any(1)
  best = np.argmax(np.where(hit, ratio, -np.inf), axis=1)
  return {"early_layers": early, "per_seed": per_seed.tolist(),
          "fraction": float(per_seed.mean()), "top": top.tolist(),
          "second": second.tolist(),
          "layer": [int(b) if h else None for b, h in zip(best, per_seed)]}
